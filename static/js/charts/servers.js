// The run page's Servers section: one chart per server with its counter set's main series
// (first one on the left axis, the others on the right) and Plimsoll's own pages/s, on the
// same seconds as the run's charts, measurement windows shaded and failed scrapes in red.
// Data: servers.json and series.json (fetched again every 5 s while the run is active).
(function () {
  "use strict";
  const PC = window.PlimsollCharts, C = PC.colors;
  const box = document.getElementById("server-charts");
  if (!box || !window.Chart) return;
  const palette = PC.series;
  const F = window.PlimsollFormat;
  const charts = {};

  const bands = {
    id: "serverBands",
    beforeDatasetsDraw(chart, args, opts) {
      for (const w of opts.windows || []) PC.band(chart, w.start, w.end, PC.rgba(C.blue, 0.07));
      for (const g of opts.gaps || []) PC.band(chart, g.from, g.to, PC.rgba(C.red, 0.15));
    },
  };

  // A server whose collection began after the page was rendered (the page opened while the
  // run was queued) gets its card here.
  function canvasFor(server) {
    let el = document.getElementById("chart-server-" + server.id);
    if (el) return el;
    const card = document.createElement("div");
    card.className = "card server-card";
    card.dataset.server = String(server.id);
    const title = document.createElement("h3");
    title.textContent = server.name;
    const wrap = document.createElement("div");
    wrap.className = "chart-box";
    el = document.createElement("canvas");
    el.id = "chart-server-" + server.id;
    el.setAttribute("aria-label", server.name + ": main series");
    wrap.appendChild(el);
    card.append(title, wrap);
    box.appendChild(card);
    box.closest("section").hidden = false;
    return el;
  }

  // The server's main series as datasets, then Plimsoll's pages/s. At the start of a run the
  // server has no figures yet (a rate needs two scrapes), so its main series arrive on later
  // polls: the datasets are rebuilt whenever the set of main series changes.
  function mainDatasets(main) {
    return main.map((s, i) => ({
      label: s.name + (s.unit ? " (" + s.unit + ")" : ""), yAxisID: i === 0 ? "y" : "y1", data: [], $key: s.key, $unit: s.unit || "",
      borderColor: palette[i % palette.length], backgroundColor: palette[i % palette.length],
      borderWidth: 1.6, pointRadius: 2, tension: 0.1, spanGaps: false,
    }));
  }

  function syncDatasets(chart, server) {
    const main = server.series.filter((s) => s.main);
    const keys = main.map((s) => s.key);
    if (chart.$main && chart.$main.join("\n") === keys.join("\n")) return;
    const pages = chart.data.datasets[chart.data.datasets.length - 1];
    chart.data.datasets = mainDatasets(main).concat([pages]);
    const first = main[0];
    chart.options.scales.y.title.text = first ? first.unit || first.name : "";
    chart.$unit = first ? first.unit || "" : "";
    chart.$main = keys;
  }

  function chartFor(server) {
    const el = canvasFor(server);
    if (charts[server.id]) return charts[server.id];
    const pages = { label: "Plimsoll pages/s", yAxisID: "y1", data: [], $unit: "/s", borderColor: C.slate,
      backgroundColor: C.slate, borderDash: [4, 3], borderWidth: 1.2, pointRadius: 0, spanGaps: true };
    charts[server.id] = new Chart(el, {
      type: "line",
      data: { datasets: [pages] },
      options: {
        animation: false, responsive: true, maintainAspectRatio: false, parsing: false,
        interaction: { mode: "nearest", axis: "x", intersect: false },
        plugins: { title: { display: true, text: server.name }, legend: { position: "bottom" }, serverBands: {},
          // Figures written by format.js, as the tables below write them (portal/formatting.py figure).
          tooltip: { callbacks: {
            title: (items) => (items.length ? "second " + F.number(items[0].parsed.x) : ""),
            label: (item) => item.dataset.label + ": " + F.figure(item.parsed.y, item.dataset.$unit),
          } } },
        scales: {
          x: { type: "linear", title: { display: true, text: "seconds since start" }, min: 0 },
          y: { position: "left", beginAtZero: true, title: { display: true, text: "" },
            ticks: { callback: (v) => F.figure(v, charts[server.id] ? charts[server.id].$unit : "") } },
          y1: { position: "right", beginAtZero: true, grid: { drawOnChartArea: false }, title: { display: true, text: "per second" },
            ticks: { callback: (v) => F.rate(v) } },
        },
      },
      plugins: [bands],
    });
    return charts[server.id];
  }

  function update(data, load) {
    for (const server of data.servers) {
      const chart = chartFor(server);
      if (!chart) continue;
      syncDatasets(chart, server);
      chart.$main.forEach((key, i) => {
        const s = server.series.find((x) => x.key === key);
        chart.data.datasets[i].data = s ? s.t.map((t, j) => ({ x: t, y: s.values[j] })) : [];
      });
      const pages = chart.data.datasets[chart.data.datasets.length - 1];
      pages.data = load ? load.t.map((t, j) => ({ x: t, y: load.pages_per_s[j] })) : [];
      chart.options.plugins.serverBands.windows = data.windows;
      chart.options.plugins.serverBands.gaps = server.gaps;
      const lastLoad = load && load.t.length ? load.t[load.t.length - 1] + load.bucket_s : 0;
      chart.options.scales.x.max = Math.max(data.duration_s, lastLoad);
      chart.update("none");
      // The server's own figures drawn (its first main series), not Plimsoll's pages/s.
      const own = chart.$main.length ? chart.data.datasets[0].data.filter((p) => p.y !== null) : [];
      chart.canvas.dataset.points = String(own.length);
    }
  }

  function fetchJson(url) {
    return fetch(url, { credentials: "same-origin" }).then((r) => (r.ok ? r.json() : Promise.reject(r.status)));
  }

  function load() {
    Promise.all([fetchJson(box.dataset.url), fetchJson(box.dataset.seriesUrl)])
      .then(([servers, series]) => {
        update(servers, series);
        box.dataset.loaded = "1";
        if (servers.active) setTimeout(load, 5000);
      })
      .catch(() => { if (box.dataset.live === "1") setTimeout(load, 5000); });
  }
  load();
})();
