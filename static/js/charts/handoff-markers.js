// Shard handoffs on the run's time charts: an orange dashed line where a worker stopped (or
// went silent) and a band over the seconds until another worker resumed the shard. The data
// comes from #handoff-data; registered before run-charts.js draws, limited to #charts.
(function () {
  "use strict";
  const el = document.getElementById("handoff-data");
  if (!el || !window.Chart) return;
  const handoffs = JSON.parse(el.textContent);
  Chart.register({
    id: "handoffMarker",
    afterDatasetsDraw(chart) {
      if (!chart.canvas.closest("#charts")) return;
      const x = chart.scales.x, area = chart.chartArea, ctx = chart.ctx;
      for (const h of handoffs) {
        const px = x.getPixelForValue(h.stopped_at_s);
        const end = h.resumed_at_s == null ? area.right : x.getPixelForValue(h.resumed_at_s);
        ctx.save();
        if (end > px) {
          ctx.fillStyle = "rgba(214, 120, 0, 0.10)";
          ctx.fillRect(Math.max(px, area.left), area.top, Math.min(end, area.right) - Math.max(px, area.left), area.bottom - area.top);
        }
        if (px >= area.left && px <= area.right) {
          ctx.strokeStyle = "#d67800";
          ctx.lineWidth = 1.5;
          ctx.setLineDash([2, 3]);
          ctx.beginPath();
          ctx.moveTo(px, area.top);
          ctx.lineTo(px, area.bottom);
          ctx.stroke();
        }
        ctx.restore();
      }
    },
  });
  document.getElementById("charts")?.setAttribute("data-handoff-markers", String(handoffs.length));
})();
