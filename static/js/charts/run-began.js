// When a degradation began: the time charts shade the seconds from the change point ("began")
// to the second the drift crossed its limit, in orange. Registered for every chart before
// run-charts.js draws its four, and limited to those inside #charts.
(function () {
  "use strict";
  const el = document.getElementById("degradation-data");
  if (!el || !window.Chart) return;
  const d = JSON.parse(el.textContent);
  if (d.began_s == null || d.crossed_s == null) return;
  Chart.register({
    id: "degradationBegan",
    beforeDatasetsDraw(chart) {
      if (!chart.canvas.closest("#charts")) return;
      const x = chart.scales.x, area = chart.chartArea, ctx = chart.ctx;
      // At least a second wide, so a step that crossed in the second it began still shows.
      const left = Math.max(x.getPixelForValue(d.began_s), area.left);
      const right = Math.min(x.getPixelForValue(Math.max(d.crossed_s, d.began_s + 1)), area.right);
      if (right <= left) return;
      ctx.save();
      ctx.fillStyle = "rgba(214, 120, 0, 0.22)";
      ctx.fillRect(left, area.top, right - left, area.bottom - area.top);
      ctx.fillStyle = "#9a4f00";
      ctx.font = "11px sans-serif";
      ctx.textAlign = "right";
      ctx.fillText("began @ " + d.began_s + " s", left - 3, area.top + 26);
      ctx.restore();
    },
  });
  document.getElementById("charts")?.setAttribute("data-began", String(d.began_s));
})();
