// The run page's "Streams and WebSocket" chart (issue 26), fed by the run's protocols.json: per chart
// bucket the p95 time to first event, the p95 gap between events and the p95 WebSocket round trip (ms,
// left axis), and the WebSocket messages per second (right axis). Hidden until the run has such figures;
// while the run is active it is fetched again every 2 s with ?since= the last bucket held.
(function () {
  "use strict";
  const box = document.getElementById("protocol-chart-box");
  if (!box || !window.Chart) return;
  const url = box.dataset.url;
  const F = window.PlimsollFormat;
  const written = (unit, v) => (F ? (unit === "ms" ? F.durationMs(v) : F.rate(v)) : String(v));
  const sets = [
    { key: "ttfe_p95", label: "time to first event p95 (ms)", color: "#1c7c3c", axis: "y", unit: "ms" },
    { key: "gap_p95", label: "gap between events p95 (ms)", color: "#9a6300", axis: "y", unit: "ms" },
    { key: "rtt_p95", label: "WebSocket round trip p95 (ms)", color: "#1f5fbf", axis: "y", unit: "ms" },
    { key: "ws_msgs_per_s", label: "WebSocket messages/s", color: "#7a8aa6", axis: "y2", unit: "rate", dashed: true },
  ];
  let chart = null;
  let held = null;

  function make() {
    box.hidden = false;
    chart = new Chart(document.getElementById("chart-protocols"), {
      type: "line",
      data: { datasets: sets.map((d) => ({ label: d.label, data: [], yAxisID: d.axis, borderColor: d.color,
        backgroundColor: d.color, borderWidth: 1.6, borderDash: d.dashed ? [4, 3] : [], pointRadius: 0,
        tension: 0.15, spanGaps: true })) },
      options: {
        animation: false, responsive: true, maintainAspectRatio: false, parsing: false,
        interaction: { mode: "index", intersect: false },
        plugins: { title: { display: true, text: "Streams and WebSocket" }, legend: { position: "bottom" },
          tooltip: { callbacks: {
            title: (items) => (items.length ? "second " + items[0].parsed.x : ""),
            label: (item) => item.dataset.label + ": " + written(sets[item.datasetIndex].unit, item.parsed.y),
          } } },
        scales: {
          x: { type: "linear", title: { display: true, text: "seconds since start" }, min: 0 },
          y: { beginAtZero: true, title: { display: true, text: "ms" } },
          y2: { beginAtZero: true, position: "right", grid: { drawOnChartArea: false }, title: { display: true, text: "messages/s" } },
        },
      },
    });
  }

  function merge(data, since) {
    if (!held || since === null || data.bucket !== held.bucket) return data;
    const keep = held.t.findIndex((t) => t >= since);
    const cut = keep === -1 ? held.t.length : keep;
    for (const key of Object.keys(data)) {
      if (Array.isArray(data[key]) && Array.isArray(held[key])) held[key] = held[key].slice(0, cut).concat(data[key]);
      else held[key] = data[key];
    }
    return held;
  }

  function load() {
    const since = held && held.active && held.t.length ? held.t[held.t.length - 1] : null;
    const next = since === null ? url : url + "?since=" + since;
    fetch(next, { credentials: "same-origin" })
      .then((r) => (r.ok ? r.json() : Promise.reject(r.status)))
      .then((data) => {
        held = merge(data, since);
        if (held.t.length) {
          if (!chart) make();
          sets.forEach((d, i) => {
            chart.data.datasets[i].data = held.t.map((x, j) => ({ x: x, y: held[d.key][j] }));
          });
          chart.update("none");
        }
        box.dataset.points = String(held.t.length);
        if (data.active) setTimeout(load, 2000);
      })
      .catch(() => setTimeout(load, 5000));
  }
  load();
})();
