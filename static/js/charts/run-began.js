// When a degradation began: the time charts shade the seconds from the change point ("began")
// to the second the drift crossed its limit, in orange. Registered for every chart before
// run-charts.js draws its four, and limited to those inside #charts.
(function () {
  "use strict";
  const el = document.getElementById("degradation-data");
  const PC = window.PlimsollCharts;
  if (!el || !window.Chart || !PC) return;
  const d = JSON.parse(el.textContent);
  if (d.began_s == null || d.crossed_s == null) return;
  Chart.register(PC.runChartMarkers("degradationBegan", {
    before(chart) {
      // At least a second wide, so a step that crossed in the second it began still shows.
      const shown = PC.band(chart, d.began_s, Math.max(d.crossed_s, d.began_s + 1), PC.rgba(PC.colors.handoff, 0.22));
      if (shown) PC.label(chart, "began @ " + d.began_s + " s", shown.left - 3, chart.chartArea.top + 26, PC.colors.brown, "right");
    },
  }));
  document.getElementById("charts")?.setAttribute("data-began", String(d.began_s));
})();
