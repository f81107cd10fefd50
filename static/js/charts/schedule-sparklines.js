// The Schedules page's sparklines: APD (left) and pages/s (right) of each schedule's last 30 fired runs.
// Data: the json_script "schedule-sparklines" ({schedule code: [{due, run, apd_ms, pages_per_s}]}).
(function () {
  "use strict";
  const PC = window.PlimsollCharts, C = PC.colors;
  const source = document.getElementById("schedule-sparklines");
  if (!source || typeof Chart === "undefined") return;
  const data = JSON.parse(source.textContent);
  const F = window.PlimsollFormat; // figures as every page writes them (static/js/format.js)
  document.querySelectorAll("canvas.schedule-sparkline").forEach((canvas) => {
    const points = data[canvas.dataset.schedule] || [];
    if (!points.length) {
      canvas.replaceWith(Object.assign(document.createElement("p"), { className: "small muted", textContent: "No run yet: the trend appears after the first fire." }));
      return;
    }
    new Chart(canvas, {
      type: "line",
      data: {
        labels: points.map((p) => "#" + p.run),
        datasets: [
          { label: "APD (ms)", data: points.map((p) => p.apd_ms), yAxisID: "apd", borderColor: C.sparkBlue, borderWidth: 1.5, pointRadius: 1.5 },
          { label: "pages/s", data: points.map((p) => p.pages_per_s), yAxisID: "rate", borderColor: C.sparkGreen, borderWidth: 1.5, pointRadius: 1.5 },
        ],
      },
      options: {
        animation: false,
        maintainAspectRatio: false,
        plugins: { legend: { display: true, position: "right", labels: { boxWidth: 10 } },
          tooltip: { callbacks: { label: (item) => item.dataset.label.replace(" (ms)", "") + ": " +
            (item.dataset.yAxisID === "apd" ? F.durationMs(item.parsed.y) : F.rate(item.parsed.y)) } } },
        scales: {
          x: { display: false },
          apd: { position: "left", beginAtZero: true, ticks: { maxTicksLimit: 3, callback: (v) => F.durationMs(v) } },
          rate: { position: "right", beginAtZero: true, grid: { drawOnChartArea: false }, ticks: { maxTicksLimit: 3, callback: (v) => F.rate(v) } },
        },
      },
    });
  });
})();
