// Capacity of a steps run: pages/s (left axis) and APD (right axis) against users, held levels
// in green and broken ones in red, the capacity and the knee marked by vertical lines, and the
// fitted scalability (USL) curve over the measured points: solid over the measured levels,
// dashed and labelled past the last one, where it is an extrapolation.
(function () {
  "use strict";
  const el = document.getElementById("capacity-data"), canvas = document.getElementById("chart-capacity");
  if (!el || !canvas || !window.Chart) return;
  const c = JSON.parse(el.textContent);
  const F = window.PlimsollFormat;
  const levels = c.levels;
  const held = levels.map((l) => (l.held ? "#1c7c3c" : "#b3261e"));
  const model = c.model && c.model.fitted ? c.model : null;
  const lastLevel = model ? model.last_level : null;
  const marks = {
    id: "capacityMarks",
    afterDraw(chart) {
      const x = chart.scales.x, area = chart.chartArea, ctx = chart.ctx;
      const lines = [[c.capacity_users, "capacity", "#1c7c3c", 14], [c.knee_users, "knee", "#9a6300", 28]];
      const drawn = [];
      for (const [users, label, color, dy] of lines) {
        if (users == null) continue;
        const px = x.getPixelForValue(users);
        ctx.save();
        ctx.strokeStyle = color;
        ctx.lineWidth = 1.5;
        ctx.setLineDash([5, 3]);
        ctx.beginPath();
        ctx.moveTo(px, area.top);
        ctx.lineTo(px, area.bottom);
        ctx.stroke();
        ctx.fillStyle = color;
        ctx.font = "11px sans-serif";
        const text = label + ": " + users + (users === 1 ? " user" : " users");
        const width = ctx.measureText(text).width;
        // Right of the line, unless that runs past the plot (the top level is the capacity):
        // then left of it, so the label is never cut off by the canvas or hidden under the axis.
        const left = px + 4 + width <= area.right ? px + 4 : Math.max(area.left, px - 4 - width);
        ctx.fillText(text, left, area.top + dy);
        drawn.push({ label, left: Math.round(left), right: Math.round(left + width) });
        ctx.restore();
      }
      // Where the labels went, for tests (a canvas has no DOM to inspect).
      chart.canvas.dataset.marks = JSON.stringify({ area: [Math.round(area.left), Math.round(area.right)], drawn });
      if (lastLevel != null) {
        // The extrapolated part of the curve is shaded and named, so nobody reads it as measured.
        const left = Math.max(x.getPixelForValue(lastLevel), area.left);
        if (left < area.right) {
          ctx.save();
          ctx.fillStyle = "rgba(120, 120, 120, 0.08)";
          ctx.fillRect(left, area.top, area.right - left, area.bottom - area.top);
          ctx.fillStyle = "#555";
          ctx.font = "11px sans-serif";
          ctx.textAlign = "right";
          ctx.fillText("extrapolation", area.right - 4, area.bottom - 6);
          ctx.restore();
        }
      }
    },
  };
  const datasets = [
    { label: "pages/s", yAxisID: "y", borderColor: "#1f5fbf", backgroundColor: "#1f5fbf",
      pointBackgroundColor: held, pointBorderColor: held, pointRadius: levels.map((l) => (l.capacity ? 7 : 4)),
      showLine: !model, data: levels.map((l) => ({ x: l.users, y: l.pages_per_s })) },
    { label: "APD (ms)", yAxisID: "y1", borderColor: "#9a6300", backgroundColor: "#9a6300",
      pointBackgroundColor: held, pointBorderColor: held, pointRadius: 4, borderDash: [4, 2],
      data: levels.map((l) => ({ x: l.users, y: l.apd_ms })) },
  ];
  if (model) {
    const fitted = model.curve.filter((p) => !p.extrapolated);
    const beyond = model.curve.filter((p) => p.extrapolated);
    if (fitted.length && beyond.length) beyond.unshift(fitted[fitted.length - 1]);
    datasets.push(
      { label: "USL model", yAxisID: "y", borderColor: "#6a3fb5", backgroundColor: "#6a3fb5", pointRadius: 0,
        borderWidth: 2, data: fitted.map((p) => ({ x: p.n, y: p.x })) },
      { label: "USL model (extrapolated)", yAxisID: "y", borderColor: "#6a3fb5", backgroundColor: "#6a3fb5",
        pointRadius: 0, borderWidth: 2, borderDash: [6, 4], data: beyond.map((p) => ({ x: p.n, y: p.x })) },
    );
  }
  new Chart(canvas, {
    type: "line",
    data: { datasets },
    options: {
      animation: false, responsive: true, maintainAspectRatio: false, parsing: false,
      interaction: { mode: "nearest", intersect: false },
      plugins: { title: { display: true, text: "Throughput and APD against users" }, legend: { position: "bottom" },
        // Figures written by format.js, as the report's tables write them (portal/formatting.py).
        tooltip: { callbacks: {
          title: (items) => (items.length ? F.number(items[0].parsed.x, "users") : ""),
          label: (item) => item.dataset.label.replace(" (ms)", "") + ": " +
            (item.dataset.yAxisID === "y1" ? F.durationMs(item.parsed.y) : F.rate(item.parsed.y) + " pages/s"),
        } } },
      scales: {
        x: { type: "linear", title: { display: true, text: "users" }, beginAtZero: true },
        y: { position: "left", beginAtZero: true, title: { display: true, text: "pages/s" }, ticks: { callback: (v) => F.rate(v) } },
        y1: { position: "right", beginAtZero: true, grid: { drawOnChartArea: false }, title: { display: true, text: "APD (ms)" },
          ticks: { callback: (v) => F.durationMs(v) } },
      },
    },
    plugins: [marks],
  });
  canvas.dataset.levels = String(levels.length);
  canvas.dataset.model = model ? String(model.curve.length) : "0";
})();
