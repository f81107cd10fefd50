// Capacity of a steps run: pages/s (left axis) and APD (right axis) against users, held levels
// in green and broken ones in red, the capacity and the knee marked by vertical lines, and the
// fitted scalability (USL) curve over the measured points: solid over the measured levels,
// dashed and labelled past the last one, where it is an extrapolation; with no model because the
// levels rose to a sharp ceiling, that measured ceiling instead.
(function () {
  "use strict";
  const el = document.getElementById("capacity-data"), canvas = document.getElementById("chart-capacity");
  if (!el || !canvas || !window.Chart) return;
  const c = JSON.parse(el.textContent);
  const F = window.PlimsollFormat;
  const levels = c.levels;
  const PC = window.PlimsollCharts, C = PC.colors;
  const held = levels.map((l) => (l.held ? C.green : C.red));
  const model = c.model && c.model.fitted ? c.model : null;
  const lastLevel = model ? model.last_level : null;
  const marks = {
    id: "capacityMarks",
    afterDraw(chart) {
      const area = chart.chartArea;
      const lines = [[c.capacity_users, "capacity", C.green, 14], [c.knee_users, "knee", C.amber, 28]];
      const drawn = [];
      for (const [users, label, color, dy] of lines) {
        if (users == null) continue;
        const text = label + ": " + users + (users === 1 ? " user" : " users");
        const at = PC.vline(chart, users, { color, label: text, labelY: dy, align: "fit", clip: false });
        drawn.push({ label, left: Math.round(at.left), right: Math.round(at.right) });
      }
      // Where the labels went, for tests (a canvas has no DOM to inspect).
      chart.canvas.dataset.marks = JSON.stringify({ area: [Math.round(area.left), Math.round(area.right)], drawn });
      // The extrapolated part of the curve is shaded and named, so nobody reads it as measured.
      if (lastLevel != null && PC.band(chart, lastLevel, chart.scales.x.max, PC.rgba(C.shade, 0.08))) {
        PC.label(chart, "extrapolation", area.right - 4, area.bottom - 6, C.grey, "right");
      }
    },
  };
  const datasets = [
    { label: "pages/s", yAxisID: "y", borderColor: C.blue, backgroundColor: C.blue,
      pointBackgroundColor: held, pointBorderColor: held, pointRadius: levels.map((l) => (l.capacity ? 7 : 4)),
      showLine: !model, data: levels.map((l) => ({ x: l.users, y: l.pages_per_s })) },
    { label: "APD (ms)", yAxisID: "y1", borderColor: C.amber, backgroundColor: C.amber,
      pointBackgroundColor: held, pointBorderColor: held, pointRadius: 4, borderDash: [4, 2],
      data: levels.map((l) => ({ x: l.users, y: l.apd_ms })) },
  ];
  if (model) {
    const fitted = model.curve.filter((p) => !p.extrapolated);
    const beyond = model.curve.filter((p) => p.extrapolated);
    if (fitted.length && beyond.length) beyond.unshift(fitted[fitted.length - 1]);
    datasets.push(
      { label: "USL model", yAxisID: "y", borderColor: C.violet, backgroundColor: C.violet, pointRadius: 0,
        borderWidth: 2, data: fitted.map((p) => ({ x: p.n, y: p.x })) },
      { label: "USL model (extrapolated)", yAxisID: "y", borderColor: C.violet, backgroundColor: C.violet,
        pointRadius: 0, borderWidth: 2, borderDash: [6, 4], data: beyond.map((p) => ({ x: p.n, y: p.x })) },
    );
  }
  // No model because the levels rose to a sharp ceiling (a pool, a fixed number of slots): the measured
  // ceiling, flat from the first level at it to the last, in the model's place.
  const ceiling = !model && c.model && c.model.ceiling_pages_per_s != null ? c.model : null;
  if (ceiling) {
    const top = levels.reduce((m, l) => Math.max(m, l.users), 0);
    datasets.push({ label: "measured ceiling", yAxisID: "y", borderColor: C.grey, backgroundColor: C.grey,
      pointRadius: 0, borderWidth: 2, borderDash: [2, 3],
      data: [{ x: ceiling.ceiling_users, y: ceiling.ceiling_pages_per_s }, { x: top, y: ceiling.ceiling_pages_per_s }] });
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
  canvas.dataset.ceiling = ceiling ? String(ceiling.ceiling_pages_per_s) : "";
})();
