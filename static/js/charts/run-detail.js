// The run report, closer: the figures of a zoomed time range, a page's own charts (click its
// name in the pages table), and the latency distribution of all pages and of the chosen one.
// Everything comes from the run's detail.json (portal/runs/results/drilldown.py), computed server-side
// from the rows of the range; figures are written by format.js, the twin of portal/formatting.py.
(function () {
  "use strict";
  const PC = window.PlimsollCharts, C = PC.colors;
  const box = document.getElementById("charts");
  const url = box && box.dataset.detailUrl;
  if (!url || !window.Chart) return;
  const F = window.PlimsollFormat;
  const zoom = window.PlimsollRunCharts ? window.PlimsollRunCharts.zoom : null;
  const state = { page: null, from: null, to: null, overall: null };
  const panel = document.getElementById("page-detail");
  const pageCharts = [];
  let distribution = null;

  const FIGURES = [
    ["apd_ms", "APD", "ms"], ["p50_ms", "p50", "ms"], ["p95_ms", "p95", "ms"], ["p99_ms", "p99", "ms"],
    ["max_ms", "max", "ms"], ["pages_per_s", "pages/s", "rate"], ["pages", "pages", "count"],
    ["error_rate_pct", "errors", "pct"], ["ttfb_ms", "time to first byte", "ms"], ["connect_ms", "connect", "ms"],
  ];
  const write = { ms: (v) => F.durationMs(v), rate: (v) => F.rate(v), count: (v) => F.number(v), pct: (v) => F.percent(v) };

  function query(params) {
    const q = new URLSearchParams();
    for (const [k, v] of Object.entries(params)) if (v !== null && v !== undefined) q.set(k, v);
    const text = q.toString();
    return text ? url + (url.includes("?") ? "&" : "?") + text : url;
  }

  function get(params) {
    return fetch(query(params), { credentials: "same-origin" }).then((r) => (r.ok ? r.json() : Promise.reject(r.status)));
  }

  function el(tag, attrs, text) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
    if (text !== undefined) node.textContent = text;
    return node;
  }

  // The figures as the report's stat boxes; each keeps its raw value for the tests (data-value).
  function figures(target, f) {
    target.replaceChildren();
    for (const [key, label, kind] of FIGURES) {
      const stat = el("div", { class: "stat", "data-figure": key, "data-value": f[key] === null ? "" : String(f[key]) });
      stat.append(el("div", { class: "value" }, write[kind](f[key])), el("div", { class: "label" }, label));
      target.append(stat);
    }
  }

  // A page's streams, WebSocket and protocol figures of the same seconds (issue 26), when it has any.
  function protocolFigures(target, p) {
    if (!target) return;
    target.replaceChildren();
    target.hidden = !p;
    if (!p) return;
    const box = (key, label, text, value) => {
      const stat = el("div", { class: "stat", "data-figure": key, "data-value": value === null || value === undefined ? "" : String(value) });
      stat.append(el("div", { class: "value" }, text), el("div", { class: "label" }, label));
      target.append(stat);
    };
    box("protocols", "hits by protocol", Object.entries(p.protocols).map(([k, n]) => k + " " + F.number(n)).join(" · ") || "—", JSON.stringify(p.protocols));
    if (p.stream) {
      box("streams", "streamed responses", F.number(p.stream.responses), p.stream.responses);
      if (p.stream.ttfe_ms) {
        box("ttfe_p50", "time to first event p50", F.durationMs(p.stream.ttfe_ms.p50), p.stream.ttfe_ms.p50);
        box("ttfe_p95", "time to first event p95", F.durationMs(p.stream.ttfe_ms.p95), p.stream.ttfe_ms.p95);
      }
      if (p.stream.gap_ms) box("gap_p95", "gap between events p95", F.durationMs(p.stream.gap_ms.p95), p.stream.gap_ms.p95);
      box("events", "events per response (mean)", String(p.stream.events.per_response.mean), p.stream.events.per_response.mean);
    }
    if (p.websocket) {
      if (p.websocket.rtt_ms) {
        box("rtt_p50", "WebSocket round trip p50", F.durationMs(p.websocket.rtt_ms.p50), p.websocket.rtt_ms.p50);
        box("rtt_p95", "WebSocket round trip p95", F.durationMs(p.websocket.rtt_ms.p95), p.websocket.rtt_ms.p95);
      }
      box("ws_sent", "messages sent", F.number(p.websocket.sent), p.websocket.sent);
      box("ws_received", "messages received", F.number(p.websocket.received), p.websocket.received);
    }
  }

  // ---- the zoomed range's figures ------------------------------------------------------------
  const rangeBox = document.getElementById("range-figures");
  const rangeTitle = document.getElementById("range-title");
  const rangeStats = document.getElementById("range-stats");
  const resetButton = document.getElementById("zoom-reset");

  function showRange() {
    if (!rangeBox) return;
    if (state.from === null) {
      rangeBox.hidden = true;
      if (resetButton) resetButton.hidden = true;
      rangeBox.removeAttribute("data-from");
      return;
    }
    if (resetButton) resetButton.hidden = false;
    get({ from: state.from, to: state.to, page: state.page }).then((data) => {
      if (state.from === null) return; // reset while this was on its way
      rangeTitle.textContent = "Seconds " + data.range.from + "–" + data.range.to + " (" + F.seconds(data.figures.seconds) + ")" +
        (state.page ? " of " + state.page : ", all pages") + (data.resolution_s > 1 ? "; rolled up per minute" : "");
      figures(rangeStats, data.figures);
      rangeBox.hidden = false;
      rangeBox.dataset.from = String(data.range.from);
      rangeBox.dataset.to = String(data.range.to);
      rangeBox.dataset.page = state.page || "";
    });
  }

  box.addEventListener("plimsoll:range", (event) => {
    state.from = event.detail.from;
    state.to = event.detail.to;
    showRange();
    if (state.page) showPage(state.page);
  });

  // ---- the latency distribution --------------------------------------------------------------
  // x is 1 / (1 − p): p50 → 2, p90 → 10, p99 → 100, p99.99 → 10,000, on a log scale.
  const TICKS = [[50, "p50"], [90, "p90"], [99, "p99"], [99.9, "p99.9"], [99.99, "p99.99"]];
  const toX = (p) => 1 / (1 - p / 100);

  function curve(points) {
    return points.map(([p, ms]) => ({ x: toX(p), y: ms, p: p }));
  }

  function drawDistribution() {
    const canvas = document.getElementById("chart-distribution");
    if (!canvas || !state.overall) return;
    const datasets = [{ label: "all pages", data: curve(state.overall), borderColor: C.blue, backgroundColor: C.blue }];
    if (state.page && state.pageDistribution) {
      datasets.push({ label: state.page, data: curve(state.pageDistribution), borderColor: C.red, backgroundColor: C.red });
    }
    for (const d of datasets) Object.assign(d, { borderWidth: 1.8, pointRadius: 2, tension: 0 });
    if (distribution) distribution.destroy();
    distribution = new Chart(canvas, {
      type: "line",
      data: { datasets: datasets },
      options: {
        animation: false, responsive: true, maintainAspectRatio: false, parsing: false,
        interaction: { mode: "nearest", axis: "x", intersect: false },
        plugins: {
          title: { display: true, text: "Latency distribution (page duration by percentile)" },
          legend: { position: "bottom" },
          tooltip: { callbacks: {
            title: (items) => (items.length ? "p" + items[0].raw.p : ""),
            label: (item) => item.dataset.label + ": " + F.durationMs(item.parsed.y),
          } },
        },
        scales: {
          x: { type: "logarithmic", min: 2, max: 10000, title: { display: true, text: "percentile" },
            afterBuildTicks: (axis) => { axis.ticks = TICKS.map(([p]) => ({ value: toX(p) })); },
            ticks: { callback: (v) => { const t = TICKS.find(([p]) => Math.abs(toX(p) - v) < 1e-6 * v); return t ? t[1] : ""; } } },
          y: { type: "logarithmic", title: { display: true, text: "page duration (ms)" },
            ticks: { callback: (v) => F.durationMs(v) } },
        },
      },
    });
    canvas.dataset.series = String(datasets.length);
  }

  get({ only: "distribution" }).then((data) => {
    state.overall = data.distribution;
    drawDistribution();
  });

  // ---- one page's own charts ------------------------------------------------------------------
  function lineChart(canvas, title, unit, series) {
    const chart = new Chart(canvas, {
      type: "line",
      data: { datasets: series.map((s) => ({ label: s.label, data: s.data, borderColor: s.color, backgroundColor: s.color,
        borderWidth: s.dashed ? 1 : 1.6, borderDash: s.dashed ? [4, 3] : [], pointRadius: 0, tension: 0.1, spanGaps: true })) },
      options: {
        animation: false, responsive: true, maintainAspectRatio: false, parsing: false,
        interaction: { mode: "index", intersect: false },
        plugins: { title: { display: true, text: title }, legend: { position: "bottom" },
          tooltip: { callbacks: {
            title: (items) => (items.length ? "second " + items[0].parsed.x : ""),
            label: (item) => item.dataset.label + ": " + write[unit](item.parsed.y),
          } } },
        scales: { x: { type: "linear", min: 0, max: Number(box.dataset.durationS) || undefined,
          title: { display: true, text: "seconds since start" } }, y: { beginAtZero: true } },
      },
      plugins: window.PlimsollZoom ? [window.PlimsollZoom.plugin] : [],
    });
    if (zoom) zoom.add(chart);
    return chart;
  }

  function clearPageCharts() {
    while (pageCharts.length) {
      const chart = pageCharts.pop();
      if (zoom) zoom.remove(chart);
      chart.destroy();
    }
  }

  function showPage(label) {
    state.page = label;
    // The page's series over the whole run (zoom narrows the axes); figures of the range or the window.
    Promise.all([get({ page: label }), state.from === null ? null : get({ page: label, from: state.from, to: state.to })]).then(([whole, ranged]) => {
      if (state.page !== label) return;
      const data = ranged || whole;
      const s = whole.series;
      const pts = (ys) => s.t.map((t, i) => ({ x: t, y: ys[i] }));
      document.getElementById("page-detail-title").textContent = label;
      document.getElementById("page-detail-basis").textContent =
        (ranged ? "Figures of seconds " + data.range.from + "–" + data.range.to : "Figures of the measurement window, as in the table") +
        "; charts over the whole run, " + (s.bucket_s > 1 ? "one point per " + s.bucket_s + " s (dashed: each point's worst second)" : "one point per second") + ".";
      figures(document.getElementById("page-detail-figures"), data.figures);
      protocolFigures(document.getElementById("page-detail-protocols"), (data.protocols || [])[0]);
      clearPageCharts();
      pageCharts.push(lineChart(document.getElementById("chart-page-latency"), "Page duration", "ms", [
        { label: "APD", color: C.green, data: pts(s.apd_ms) }, { label: "p50", color: C.sage, data: pts(s.p50_ms) },
        { label: "p95", color: C.amber, data: pts(s.p95_ms) }, { label: "p99", color: C.purple, data: pts(s.p99_ms) },
        { label: "worst second's APD", color: C.red, dashed: true, data: s.bucket_s > 1 ? pts(s.apd_max_ms) : [] },
      ]));
      pageCharts.push(lineChart(document.getElementById("chart-page-throughput"), "Pages and errors per second", "rate", [
        { label: "pages/s", color: C.blue, data: pts(s.pages_per_s) }, { label: "errors/s", color: C.red, data: pts(s.errors_per_s) },
        { label: "slowest second's pages/s", color: C.slate, dashed: true, data: s.bucket_s > 1 ? pts(s.pages_per_s_min) : [] },
      ]));
      pageCharts.push(lineChart(document.getElementById("chart-page-timing"), "Connect time and time to first byte", "ms", [
        { label: "time to first byte", color: C.blue, data: pts(s.ttfb_ms) }, { label: "connect", color: C.amber, data: pts(s.connect_ms) },
      ]));
      const errors = document.querySelector("#page-detail-errors tbody");
      errors.replaceChildren();
      for (const e of data.errors) {
        const row = el("tr");
        row.append(el("td", {}, ""), el("td", { class: "num" }, F.number(e.count)), el("td", { class: "small mono" }, e.sample));
        row.firstChild.append(el("code", {}, e.kind));
        errors.append(row);
      }
      document.getElementById("page-detail-no-errors").hidden = data.errors.length > 0;
      // Trace context: the slowest requests' trace ids, linked when the environment has a trace URL template.
      const slowest = document.querySelector("#page-detail-slowest tbody");
      if (slowest) {
        slowest.replaceChildren();
        for (const r of data.slowest || []) {
          const row = el("tr");
          const id = r.url ? el("a", { href: r.url, target: "_blank", rel: "noopener noreferrer", class: "mono" }, r.trace_id) : el("code", {}, r.trace_id);
          row.append(el("td", { class: "num" }, String(r.second)), el("td", {}, r.page), el("td", { class: "num", "data-value": String(r.ms) }, F.number(r.ms) + " ms"), el("td", {}, ""));
          row.lastChild.append(id);
          slowest.append(row);
        }
        document.getElementById("page-detail-no-slowest").hidden = (data.slowest || []).length > 0;
      }
      state.pageDistribution = data.distribution;
      drawDistribution();
      panel.hidden = false;
      panel.dataset.page = label;
      panel.dataset.points = String(s.t.length);
    });
  }

  if (panel) {
    for (const button of document.querySelectorAll("button.page-drill")) {
      button.addEventListener("click", () => {
        for (const row of document.querySelectorAll("#pages tr.chosen")) row.classList.remove("chosen");
        button.closest("tr").classList.add("chosen");
        showPage(button.dataset.page);
        panel.scrollIntoView({ block: "nearest" });
      });
    }
    document.getElementById("page-detail-close").addEventListener("click", () => {
      state.page = null;
      state.pageDistribution = null;
      clearPageCharts();
      panel.hidden = true;
      delete panel.dataset.page;
      for (const row of document.querySelectorAll("#pages tr.chosen")) row.classList.remove("chosen");
      drawDistribution();
      showRange();
    });
  }
})();
