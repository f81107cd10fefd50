// The four charts of a run page (users, page duration, throughput, errors), fed by
// the run's series.json. While the run is active the data is fetched again every 2 s, with
// ?since= the start of the last bucket held: the server sends that bucket (it may have grown)
// and the newer ones, and the page replaces its points from there on.
(function () {
  "use strict";
  const PC = window.PlimsollCharts, C = PC.colors;
  const box = document.getElementById("charts");
  if (!box || !window.Chart) return;
  const url = box.dataset.seriesUrl;
  const charts = {};
  const F = window.PlimsollFormat;
  // Drag over any of the four charts to zoom all of them on that range (static/js/charts/zoom.js);
  // the range goes to run-detail.js, which shows its figures, as an event on the charts' box.
  const zoom = window.PlimsollZoom
    ? window.PlimsollZoom.group((from, to) => box.dispatchEvent(new CustomEvent("plimsoll:range", { detail: { from: from, to: to } })))
    : null;
  const written = { ms: (v) => F.durationMs(v), rate: (v) => F.rate(v), users: (v) => F.number(v) };

  // Shades the measurement windows (one per level for a steps profile), so readers see
  // which seconds the summary uses.
  const windowBand = {
    id: "windowBand",
    beforeDatasetsDraw(chart, args, opts) {
      for (const w of opts.windows || []) PC.band(chart, w[0], w[1], PC.rgba(C.blue, 0.07));
    },
  };

  function makeChart(id, title, datasets, yTitle, unit) {
    const el = document.getElementById(id);
    const chart = new Chart(el, {
      type: "line",
      data: { datasets: datasets.map((d) => ({ label: d.label, data: [], borderColor: d.color, backgroundColor: d.color,
        borderWidth: d.dashed ? 1 : 1.6, borderDash: d.dashed ? [4, 3] : [], pointRadius: 0, tension: 0.15, spanGaps: true,
        hidden: !!d.hidden })) },
      options: {
        animation: false, responsive: true, maintainAspectRatio: false, parsing: false,
        // Hover shows every series at that second.
        interaction: { mode: "index", intersect: false },
        plugins: { title: { display: true, text: title }, legend: { position: "bottom" }, windowBand: {},
          tooltip: { callbacks: {
            title: (items) => (items.length ? "second " + items[0].parsed.x : ""),
            label: (item) => item.dataset.label + ": " + written[unit](item.parsed.y),
          } } },
        scales: {
          x: { type: "linear", title: { display: true, text: "seconds since start" }, min: 0 },
          y: { beginAtZero: true, title: { display: true, text: yTitle } },
        },
      },
      plugins: window.PlimsollZoom ? [windowBand, window.PlimsollZoom.plugin] : [windowBand],
    });
    if (zoom) zoom.add(chart);
    return chart;
  }

  // A chart point of a long run is a bucket of seconds: besides its mean, the bucket's worst
  // second (highest APD, lowest pages/s) is drawn dashed, so a one-second stall stays visible.
  charts.users = makeChart("chart-users", "Active users", [{ label: "users", color: C.blue }], "users", "users");
  charts.latency = makeChart("chart-latency", "Page duration", [
    { label: "APD (ms)", color: C.green }, { label: "p95 (ms)", color: C.amber },
    { label: "worst second's APD (ms)", color: C.red, dashed: true }], "ms", "ms");
  charts.throughput = makeChart("chart-throughput", "Throughput", [
    { label: "pages/s", color: C.blue }, { label: "hits/s", color: C.slate },
    { label: "slowest second's pages/s", color: C.red, dashed: true }], "per second", "rate");
  charts.errors = makeChart("chart-errors", "Errors and dropped iterations", [
    { label: "errors/s", color: C.red }, { label: "dropped/s", color: C.amber }], "per second", "rate");
  const resetButton = document.getElementById("zoom-reset");
  if (resetButton && zoom) resetButton.addEventListener("click", () => zoom.reset());
  window.PlimsollRunCharts = { charts: charts, zoom: zoom };

  function points(t, ys) {
    return t.map((x, i) => ({ x: x, y: ys[i] }));
  }

  // What the page holds, so a live poll asks only for what is new.
  let held = null;

  function merge(data) {
    if (!held || data.since === null || data.since === undefined || data.bucket_s !== held.bucket_s) {
      held = data;
      return held;
    }
    const keep = held.t.findIndex((t) => t >= data.since);
    const cut = keep === -1 ? held.t.length : keep;
    for (const key of Object.keys(data)) {
      if (Array.isArray(data[key]) && Array.isArray(held[key]) && key !== "windows") {
        held[key] = held[key].slice(0, cut).concat(data[key]);
      } else {
        held[key] = data[key];
      }
    }
    return held;
  }

  function nextUrl() {
    if (!held || !held.active || !held.t.length) return url;
    const sep = url.includes("?") ? "&" : "?";
    return url + sep + "since=" + held.t[held.t.length - 1];
  }

  function update(data) {
    const fill = {
      users: [data.users],
      latency: [data.apd_ms, data.p95_ms, data.bucket_s > 1 ? data.apd_max_ms || [] : []],
      throughput: [data.pages_per_s, data.hits_per_s, data.bucket_s > 1 ? data.pages_per_s_min || [] : []],
      errors: [data.errors_per_s, data.dropped_per_s],
    };
    for (const [name, series] of Object.entries(fill)) {
      const chart = charts[name];
      series.forEach((ys, i) => { chart.data.datasets[i].data = ys.length ? points(data.t, ys) : []; });
      chart.options.plugins.windowBand.windows = data.windows;
      const max = Math.max(data.duration_s, data.t.length ? data.t[data.t.length - 1] + data.bucket_s : 0);
      if (zoom) zoom.extent(chart, 0, max);
      else chart.options.scales.x.max = max;
      chart.update("none");
    }
    box.dataset.points = String(data.t.length);
  }

  function load() {
    fetch(nextUrl(), { credentials: "same-origin" })
      .then((r) => (r.ok ? r.json() : Promise.reject(r.status)))
      .then((data) => {
        update(merge(data));
        if (data.active) setTimeout(load, 2000);
      })
      .catch(() => setTimeout(load, 5000));
  }
  load();
})();
