// A comparison's curves: the baseline's (before) runs and each compared side's runs on the same
// axes — page duration and pages/s over the measurement window (aligned at its start), the
// latency distributions by percentile, and for steps runs pages/s and APD against users.
// Data: the comparison's curves.json (portal/history/curves.py); the series are each run's own.
(function () {
  "use strict";
  const PC = window.PlimsollCharts, C = PC.colors;
  const box = document.getElementById("compare-curves");
  if (!box || !window.Chart) return;
  const F = window.PlimsollFormat;
  const BEFORE = C.orange;
  const AFTER = PC.compare;
  const TICKS = [[50, "p50"], [90, "p90"], [99, "p99"], [99.9, "p99.9"], [99.99, "p99.99"]];
  const toX = (p) => 1 / (1 - p / 100);
  const meanOf = PC.meanOf;
  const charts = {};

  // Each side's trials as thin, pale lines and their mean (at each x the trials share) as one bold
  // line; the legend lists the means only, one entry per side (and per series: APD, p95), so a
  // trial set of twelve runs adds no entry. The after sides' lines are drawn over the before
  // side's, whose mean is wider underneath: both stay visible where they coincide.
  function pale(hex) { return hex + "80"; }

  function datasetsOf(data, pick) {
    const out = [];
    let afterIndex = 0;
    const afters = data.sides.filter((side) => side.role !== "before").length;
    for (const side of data.sides) {
      const before = side.role === "before";
      const color = before ? BEFORE : AFTER[afterIndex++ % AFTER.length];
      // Short: the picker above names the sides; several sides after are told apart by their labels.
      const name = before ? "Before" : afters > 1 ? "After: " + side.label : "After";
      const bySuffix = new Map();
      side.runs.forEach((run) => {
        for (const d of pick(run)) {
          const suffix = d.suffix || "";
          const group = side.role + "|" + side.label + "|" + suffix;
          if (!bySuffix.has(suffix)) bySuffix.set(suffix, { template: d, group: group, lines: [] });
          bySuffix.get(suffix).lines.push(d.data);
          out.push(Object.assign({}, d, { label: "Run #" + run.number + " (" + side.label + ")" + suffix,
            borderColor: pale(color), backgroundColor: pale(color), borderWidth: 1, pointRadius: d.points ? 2 : 0,
            tension: 0, spanGaps: true, code: run.code, side: side.role, $group: group, order: before ? 3 : 2 }));
        }
      });
      for (const [suffix, g] of bySuffix) {
        const n = g.lines.length;
        out.push(Object.assign({}, g.template, {
          label: name + (n > 1 ? ", mean" : "") + suffix,
          data: meanOf(g.lines), borderColor: color, backgroundColor: color,
          borderWidth: before ? 4 : 2.5, pointRadius: g.template.points ? 3 : 0, tension: 0, spanGaps: true,
          side: side.role, $group: g.group, $mean: true, order: before ? 1 : 0,
        }));
      }
    }
    return out;
  }

  // A click on a side's legend entry shows or hides its mean and its trials together.
  function toggleGroup(evt, item, legend) {
    const chart = legend.chart;
    const group = chart.data.datasets[item.datasetIndex].$group;
    const show = !chart.isDatasetVisible(item.datasetIndex);
    chart.data.datasets.forEach((d, i) => { if (d.$group === group) chart.setDatasetVisibility(i, show); });
    chart.update();
  }

  function line(id, title, xTitle, unit, datasets, extra) {
    const write = unit === "ms" ? (v) => F.durationMs(v) : (v) => F.rate(v);
    const options = {
      animation: false, responsive: true, maintainAspectRatio: false, parsing: false,
      interaction: { mode: "nearest", axis: "x", intersect: false },
      plugins: { title: { display: true, text: title },
        legend: { position: "bottom", onClick: toggleGroup, labels: {
          boxWidth: 18,
          filter: (item, chartData) => chartData.datasets[item.datasetIndex].$mean,
          sort: (a, b) => a.datasetIndex - b.datasetIndex } },
        tooltip: { callbacks: { label: (item) => item.dataset.label + ": " + write(item.parsed.y) } } },
      scales: { x: { type: "linear", min: 0, title: { display: true, text: xTitle } },
        y: { beginAtZero: true, title: { display: true, text: unit === "ms" ? "ms" : "pages/s" } } },
    };
    if (extra) extra(options);
    const canvas = document.getElementById(id);
    charts[id] = new Chart(canvas, { type: "line", data: { datasets: datasets }, options: options });
    canvas.dataset.series = String(datasets.filter((d) => !d.$mean).length);
    return charts[id];
  }

  const pts = (t, ys) => t.map((x, i) => ({ x: x, y: ys[i] }));

  fetch(box.dataset.url, { credentials: "same-origin" })
    .then((r) => (r.ok ? r.json() : Promise.reject(r.status)))
    .then((data) => {
      line("chart-compare-duration", "Page duration over the measurement window", "seconds since the window's start", "ms",
        datasetsOf(data, (run) => [{ data: pts(run.series.t, run.series.apd_ms), suffix: " APD" },
          { data: pts(run.series.t, run.series.p95_ms), suffix: " p95", borderDash: [4, 3], hidden: true }]));
      line("chart-compare-throughput", "Throughput over the measurement window", "seconds since the window's start", "rate",
        datasetsOf(data, (run) => [{ data: pts(run.series.t, run.series.pages_per_s) }]));
      line("chart-compare-distribution", "Latency distributions", "percentile", "ms",
        datasetsOf(data, (run) => [{ data: run.distribution.map(([p, ms]) => ({ x: toX(p), y: ms, p: p })), points: true }]),
        (o) => {
          o.scales.x = { type: "logarithmic", min: 2, max: 10000, title: { display: true, text: "percentile" },
            afterBuildTicks: (axis) => { axis.ticks = TICKS.map(([p]) => ({ value: toX(p) })); },
            ticks: { callback: (v) => { const t = TICKS.find(([p]) => Math.abs(toX(p) - v) < 1e-6 * v); return t ? t[1] : ""; } } };
          o.scales.y = { type: "logarithmic", title: { display: true, text: "page duration (ms)" }, ticks: { callback: (v) => F.durationMs(v) } };
          o.plugins.tooltip.callbacks.title = (items) => (items.length ? "p" + items[0].raw.p : "");
        });
      const stepped = data.sides.some((side) => side.runs.some((run) => run.levels.length));
      if (stepped) {
        document.getElementById("compare-levels-box").hidden = false;
        line("chart-compare-levels", "Pages/s (solid) and APD (dashed) against users", "users", "rate",
          datasetsOf(data, (run) => run.levels.length ? [
            { data: run.levels.map((l) => ({ x: l.users, y: l.pages_per_s })), suffix: " pages/s", points: true, yAxisID: "y" },
            { data: run.levels.map((l) => ({ x: l.users, y: l.apd_ms })), suffix: " APD", points: true, borderDash: [4, 3], yAxisID: "apd" },
          ] : []),
          (o) => {
            o.scales.apd = { position: "right", beginAtZero: true, grid: { drawOnChartArea: false }, title: { display: true, text: "APD (ms)" },
              ticks: { callback: (v) => F.durationMs(v) } };
            o.plugins.tooltip.callbacks.label = (item) => item.dataset.label + ": " +
              (item.dataset.yAxisID === "apd" ? F.durationMs(item.parsed.y) : F.rate(item.parsed.y));
          });
      }
      window.PlimsollCompare = { charts: charts, data: data };
      box.dataset.drawn = "1";
    })
    .catch(() => { box.dataset.drawn = "error"; });
})();
