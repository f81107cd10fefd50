// Shard handoffs on the run's time charts: an orange dashed line where a worker stopped (or
// went silent) and a band over the seconds until another worker resumed the shard. The data
// comes from #handoff-data; registered before run-charts.js draws, limited to #charts.
(function () {
  "use strict";
  const el = document.getElementById("handoff-data");
  const PC = window.PlimsollCharts;
  if (!el || !window.Chart || !PC) return;
  const handoffs = JSON.parse(el.textContent);
  const color = PC.colors.handoff;
  Chart.register(PC.runChartMarkers("handoffMarker", {
    afterDatasets(chart) {
      for (const h of handoffs) {
        PC.band(chart, h.stopped_at_s, h.resumed_at_s == null ? chart.scales.x.max : h.resumed_at_s, PC.rgba(color, 0.1));
        PC.vline(chart, h.stopped_at_s, { color, dash: [2, 3] });
      }
    },
  }));
  document.getElementById("charts")?.setAttribute("data-handoff-markers", String(handoffs.length));
})();
