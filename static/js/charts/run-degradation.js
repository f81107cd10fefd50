// Degradation on the time charts: the steady state shaded green and a red line where the
// degradation began. Registered for every chart before run-charts.js draws its four, and
// limited to those inside #charts.
(function () {
  "use strict";
  const el = document.getElementById("degradation-data");
  if (!el || !window.Chart) return;
  const d = JSON.parse(el.textContent);
  const onsets = [];
  if (d.throughput_onset_s != null) onsets.push([d.throughput_onset_s, "throughput drop"]);
  if (d.apd_onset_s != null) {
    const same = onsets.find((o) => o[0] === d.apd_onset_s);
    if (same) same[1] += " + APD rise"; else onsets.push([d.apd_onset_s, "APD rise"]);
  }
  Chart.register({
    id: "degradationMarker",
    beforeDatasetsDraw(chart) {
      if (!chart.canvas.closest("#charts")) return;
      const x = chart.scales.x, area = chart.chartArea, ctx = chart.ctx;
      const left = Math.max(x.getPixelForValue(d.steady_window[0]), area.left);
      const right = Math.min(x.getPixelForValue(d.steady_window[1]), area.right);
      if (right <= left) return;
      ctx.save();
      ctx.fillStyle = "rgba(28, 124, 60, 0.12)";
      ctx.fillRect(left, area.top, right - left, area.bottom - area.top);
      ctx.restore();
    },
    afterDraw(chart) {
      if (!chart.canvas.closest("#charts")) return;
      const x = chart.scales.x, area = chart.chartArea, ctx = chart.ctx;
      for (const [t, label] of onsets) {
        const px = x.getPixelForValue(t);
        if (px < area.left || px > area.right) continue;
        ctx.save();
        ctx.strokeStyle = "#b3261e";
        ctx.lineWidth = 1.5;
        ctx.setLineDash([5, 3]);
        ctx.beginPath();
        ctx.moveTo(px, area.top);
        ctx.lineTo(px, area.bottom);
        ctx.stroke();
        ctx.fillStyle = "#b3261e";
        ctx.font = "11px sans-serif";
        ctx.textAlign = px > (area.left + area.right) / 2 ? "right" : "left";
        ctx.fillText(label + " @ " + t + " s", px + (ctx.textAlign === "left" ? 4 : -4), area.top + 12);
        ctx.restore();
      }
    },
  });
  document.getElementById("charts")?.setAttribute("data-degradation-marker", String(onsets.length));
})();
