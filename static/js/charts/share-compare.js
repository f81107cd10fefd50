// A shared comparison or experiment: the average page duration over the run, every run of each
// side on one chart, as the portal's comparison draws them (compare-curves.js): a trial set's
// trials as thin, pale lines and their mean as one bold line; the legend lists one entry per side
// (its mean, or its one run), a click shows or hides the side with its trials; the after side is
// drawn over the before side, whose line is wider underneath. Colours: before orange, after blue.
// The runs' series come from the share link's own data URLs (compare-runs).
(function () {
  "use strict";
  const PC = window.PlimsollCharts, C = PC.colors;
  const el = document.getElementById("compare-runs"), canvas = document.getElementById("chart-compare");
  if (!el || !canvas || !window.Chart) return;
  const sides = JSON.parse(el.textContent);
  const COLOR = { before: C.orange, after: C.blue };
  const pale = (hex) => hex + "80";

  function toggleSide(evt, item, legend) {
    const chart = legend.chart;
    const role = chart.data.datasets[item.datasetIndex].side;
    const show = !chart.isDatasetVisible(item.datasetIndex);
    chart.data.datasets.forEach((d, i) => { if (d.side === role) chart.setDatasetVisibility(i, show); });
    chart.update();
  }

  const chart = new Chart(canvas, {
    type: "line",
    data: { datasets: [] },
    options: {
      animation: false, responsive: true, maintainAspectRatio: false, parsing: false,
      interaction: { mode: "nearest", intersect: false },
      plugins: { title: { display: true, text: "Average page duration (APD) over the run" },
        legend: { position: "bottom", onClick: toggleSide,
          labels: { boxWidth: 18, filter: (item, data) => data.datasets[item.datasetIndex].$mean,
            sort: (a, b) => a.datasetIndex - b.datasetIndex } }, // before first, though drawn under after
        tooltip: { callbacks: { label: (item) => item.dataset.label + ": " + window.PlimsollFormat.durationMs(item.parsed.y) } } },
      scales: {
        x: { type: "linear", min: 0, title: { display: true, text: "seconds since start" } },
        y: { beginAtZero: true, title: { display: true, text: "ms" } },
      },
    },
  });
  const all = sides.flatMap((side) => side.runs.map((run) => ({ side: side, run: run })));
  Promise.all(all.map((s) => fetch(s.run.url).then((r) => (r.ok ? r.json() : Promise.reject(r.status)))))
    .then((series) => {
      const lines = new Map(sides.map((side) => [side, []]));
      all.forEach((s, i) => lines.get(s.side).push(series[i].t.map((x, j) => ({ x: x, y: series[i].apd_ms[j] }))));
      for (const side of sides) {
        const before = side.role === "before", color = COLOR[side.role], runs = lines.get(side);
        const name = before ? "Before" : "After"; // short: the cards below name each side
        if (runs.length > 1) {
          runs.forEach((data, i) => chart.data.datasets.push({
            label: name + ", run #" + side.runs[i].number, data: data, side: side.role,
            borderColor: pale(color), backgroundColor: pale(color), borderWidth: 1, pointRadius: 0,
            tension: 0, spanGaps: true, order: before ? 3 : 2,
          }));
        }
        chart.data.datasets.push({
          label: runs.length > 1 ? name + ", mean of " + runs.length + " trials" : name + ", run #" + side.runs[0].number,
          data: runs.length > 1 ? PC.meanOf(runs) : runs[0], side: side.role, $mean: true,
          borderColor: color, backgroundColor: color, borderWidth: before ? 4 : 2.5, pointRadius: 0,
          tension: 0, spanGaps: true, order: before ? 1 : 0,
        });
      }
      chart.update("none");
      window.PlimsollShareCompare = chart;
      canvas.dataset.points = String(series.reduce((n, d) => n + d.t.length, 0));
    })
    .catch((err) => { canvas.dataset.error = String(err); });
})();
