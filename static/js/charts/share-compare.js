// A shared comparison or experiment: the average page duration over each side's run, on one
// chart. The runs' series come from the share link's own data URLs (compare-runs).
(function () {
  "use strict";
  const PC = window.PlimsollCharts, C = PC.colors;
  const el = document.getElementById("compare-runs"), canvas = document.getElementById("chart-compare");
  if (!el || !canvas || !window.Chart) return;
  const sides = JSON.parse(el.textContent);
  const COLORS = [C.amber, C.green];
  const chart = new Chart(canvas, {
    type: "line",
    data: { datasets: [] },
    options: {
      animation: false, responsive: true, maintainAspectRatio: false, parsing: false,
      interaction: { mode: "nearest", intersect: false },
      plugins: { title: { display: true, text: "Average page duration (APD) over the run" }, legend: { position: "bottom" },
        tooltip: { callbacks: { label: (item) => item.dataset.label + ": " + window.PlimsollFormat.durationMs(item.parsed.y) } } },
      scales: {
        x: { type: "linear", min: 0, title: { display: true, text: "seconds since start" } },
        y: { beginAtZero: true, title: { display: true, text: "ms" } },
      },
    },
  });
  Promise.all(sides.map((s) => fetch(s.url).then((r) => (r.ok ? r.json() : Promise.reject(r.status)))))
    .then((all) => {
      all.forEach((data, i) => {
        chart.data.datasets.push({
          label: sides[i].label, borderColor: COLORS[i % 2], backgroundColor: COLORS[i % 2],
          borderWidth: 1.8, pointRadius: 0, tension: 0.15, spanGaps: true,
          data: data.t.map((x, j) => ({ x: x, y: data.apd_ms[j] })),
        });
      });
      chart.update("none");
      canvas.dataset.points = String(all.reduce((n, d) => n + d.t.length, 0));
    })
    .catch((err) => { canvas.dataset.error = String(err); });
})();
