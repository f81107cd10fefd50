// A comparison's curves: the baseline's (before) runs and each compared side's runs on the same
// axes — page duration and pages/s over the measurement window (aligned at its start), the
// latency distributions by percentile, and for steps runs pages/s and APD against users.
// Data: the comparison's curves.json (portal/history/curves.py); the series are each run's own.
(function () {
  "use strict";
  const box = document.getElementById("compare-curves");
  if (!box || !window.Chart) return;
  const F = window.PlimsollFormat;
  const BEFORE = "#d9822b";
  const AFTER = ["#1f5fbf", "#1c7c3c", "#6b4fa3", "#b3261e", "#0f7c8a", "#7a8aa6"];
  const TICKS = [[50, "p50"], [90, "p90"], [99, "p99"], [99.9, "p99.9"], [99.99, "p99.99"]];
  const toX = (p) => 1 / (1 - p / 100);
  const charts = {};

  function datasetsOf(data, pick) {
    const out = [];
    let afterIndex = 0;
    for (const side of data.sides) {
      const color = side.role === "before" ? BEFORE : AFTER[afterIndex++ % AFTER.length];
      side.runs.forEach((run, i) => {
        for (const d of pick(run)) {
          out.push(Object.assign({ label: "Run #" + run.number + " (" + side.label + (side.role === "before" ? ", before" : "") + ")" + (d.suffix || ""),
            borderColor: color, backgroundColor: color, borderWidth: i === 0 ? 1.8 : 1.1, pointRadius: d.points ? 3 : 0,
            tension: 0, spanGaps: true, code: run.code, side: side.role }, d));
        }
      });
    }
    return out;
  }

  function line(id, title, xTitle, unit, datasets, extra) {
    const write = unit === "ms" ? (v) => F.durationMs(v) : (v) => F.rate(v);
    const options = {
      animation: false, responsive: true, maintainAspectRatio: false, parsing: false,
      interaction: { mode: "nearest", axis: "x", intersect: false },
      plugins: { title: { display: true, text: title }, legend: { position: "bottom" },
        tooltip: { callbacks: { label: (item) => item.dataset.label + ": " + write(item.parsed.y) } } },
      scales: { x: { type: "linear", min: 0, title: { display: true, text: xTitle } },
        y: { beginAtZero: true, title: { display: true, text: unit === "ms" ? "ms" : "pages/s" } } },
    };
    if (extra) extra(options);
    const canvas = document.getElementById(id);
    charts[id] = new Chart(canvas, { type: "line", data: { datasets: datasets }, options: options });
    canvas.dataset.series = String(datasets.length);
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
