// The journey's charts, fed by journey.json (the same data the page's tables come from).
//
// Per environment section, four panels over one plan's finished runs: APD (with p95),
// pages/s, capacity (step runs only) and error rate; a dashed marker at every tuning
// change; a small chart per external measurement with several values.
//
// The x axis is the runs' order (0, 1, 2… labelled with run numbers), not wall-clock
// time: trials come in bursts (three runs in an hour, then nothing for a week), and on a
// time axis each burst would collapse into one vertical smear while the empty weeks take
// the width. In run order every run gets the same room, and a change sits exactly where
// it happened in the story: between the last run before it and the first run after it
// (the server computes that place, `seq`). Dates are in the tooltips. This also needs no
// date adapter, which Chart.js does not bundle.
//
// Runs in doubt (cancelled, a shard lost, the generator saturated) are drawn hollow and
// grey and are not joined into the trend line, unless a user included them (`counts`).
(function () {
  "use strict";
  const PC = window.PlimsollCharts, C = PC.colors;
  const root = document.getElementById("journey");
  if (!root || !window.Chart || !root.dataset.url) return;

  const BLUE = C.blue, AMBER = C.amber, GREEN = C.green, RED = C.red, PURPLE = C.purple;
  const DOUBT = C.doubt, MARK = C.orange;

  // Figures are written by static/js/format.js, the twin of portal/formatting.py.
  const F = window.PlimsollFormat;
  const fmtMs = (v) => F.durationMs(v);
  const fmtRate = (v) => F.rate(v);
  const fmtPct = (v) => F.percent(v);
  function fmtDate(ms) {
    return new Date(ms).toLocaleString(undefined, {
      year: "numeric", month: "short", day: "numeric", hour: "2-digit", minute: "2-digit" });
  }

  // A dashed vertical line at each change's place, labelled with its number (and its
  // title on the first panel). Labels are staggered so that neighbours stay readable.
  const changeMarkers = {
    id: "changeMarkers",
    afterDatasetsDraw(chart, args, opts) {
      const x = chart.scales.x, area = chart.chartArea, ctx = chart.ctx;
      (opts.changes || []).forEach((c, i) => {
        const px = x.getPixelForValue(c.seq);
        if (px < area.left - 1 || px > area.right + 1) return;
        PC.vline(chart, c.seq, { color: MARK, dash: [5, 4], clip: false });
        ctx.save();
        ctx.fillStyle = MARK;
        ctx.font = "600 11px system-ui, sans-serif";
        const right = px > area.right - 120;
        ctx.textAlign = right ? "right" : "left";
        const text = opts.titles ? "#" + c.number + " " + c.title : "#" + c.number;
        ctx.fillText(text, px + (right ? -3 : 3), area.top + 11 + (i % 3) * 12, opts.titles ? 150 : 40);
        ctx.restore();
      });
    },
  };

  const PANELS = {
    apd: {
      title: "Page duration (ms)", fmt: fmtMs, y: "ms",
      lines: [
        { label: "APD", color: GREEN, value: (p) => p.apd_ms, doubt: true },
        { label: "p95", color: AMBER, value: (p) => p.p95_ms },
      ],
    },
    pages_per_s: {
      title: "Throughput (pages/s)", fmt: fmtRate, y: "pages/s",
      lines: [{ label: "pages/s", color: BLUE, value: (p) => p.pages_per_s, doubt: true }],
    },
    capacity: {
      title: "Capacity (users within thresholds)", fmt: (v) => (v === null ? "—" : v + " users"), y: "users",
      lines: [{
        label: "capacity", color: PURPLE, doubt: true,
        // A step run where even the lowest level broke a threshold holds 0 of its levels.
        value: (p) => (p.capacity_held === null ? null : p.capacity_users === null ? 0 : p.capacity_users),
      }],
    },
    error_rate: {
      title: "Error rate (%)", fmt: fmtPct, y: "%",
      lines: [{ label: "error rate", color: RED, value: (p) => p.error_rate_pct, doubt: true }],
    },
  };

  function xAxis(section) {
    const n = section.points.length;
    const seqs = section.changes.map((c) => c.seq);
    const bySeq = {};
    section.points.forEach((p) => { bySeq[p.seq] = p; });
    return {
      type: "linear",
      min: Math.min(-0.5, ...seqs.map((s) => s - 0.3)),
      max: Math.max(n - 0.5, ...seqs.map((s) => s + 0.3)),
      title: { display: true, text: "runs in the order they started" },
      grid: { display: false },
      // One tick per run, labelled with its number (Chart.js thins the labels when they crowd).
      afterBuildTicks: (axis) => { axis.ticks = section.points.map((p) => ({ value: p.seq })); },
      ticks: { callback: (v) => (bySeq[v] ? "#" + bySeq[v].number : "") },
    };
  }

  function pointLines(p) {
    const lines = [fmtDate(p.x), p.change ? "under change #" + p.change : "under the initial configuration"];
    if (p.doubts.length) {
      lines.push((p.counts ? "counted anyway, although: " : "left out: ") + p.doubts.join("; "));
    }
    // i12-schedules: a scheduled run's verdict against its plan's baseline.
    if (p.baseline_headline) lines.push(p.baseline_headline);
    return lines;
  }

  function makePanel(canvas, section, spec, first) {
    const datasets = [];
    spec.lines.forEach((line) => {
      const counting = section.points.filter((p) => p.counts && line.value(p) !== null && line.value(p) !== undefined);
      datasets.push({
        label: line.label, data: counting.map((p) => ({ x: p.seq, y: line.value(p), p: p })),
        borderColor: line.color, backgroundColor: line.color, borderWidth: 1.8,
        pointRadius: 3.5, pointHoverRadius: 6, tension: 0,
      });
    });
    spec.lines.filter((l) => l.doubt).forEach((line) => {
      const doubtful = section.points.filter((p) => !p.counts && line.value(p) !== null && line.value(p) !== undefined);
      if (!doubtful.length) return;
      datasets.push({
        label: line.label + " (in doubt)", data: doubtful.map((p) => ({ x: p.seq, y: line.value(p), p: p })),
        showLine: false, borderColor: DOUBT, backgroundColor: C.white, pointBackgroundColor: C.white,
        pointBorderColor: DOUBT, pointBorderWidth: 1.8, pointRadius: 4.5, pointHoverRadius: 6.5,
      });
    });
    return new Chart(canvas, {
      type: "line",
      data: { datasets: datasets },
      options: {
        animation: false, responsive: true, maintainAspectRatio: false, parsing: false,
        interaction: { mode: "nearest", intersect: true },
        onClick(evt, elements, chart) {
          if (!elements.length) return;
          const raw = chart.data.datasets[elements[0].datasetIndex].data[elements[0].index];
          if (raw && raw.p && raw.p.url) window.location.href = raw.p.url; // a shared page's points have no URL
        },
        onHover(evt, elements) {
          evt.native.target.style.cursor = elements.length ? "pointer" : "default";
        },
        plugins: {
          title: { display: true, text: spec.title },
          legend: { position: "bottom", labels: { boxWidth: 12 } },
          changeMarkers: { changes: section.changes, titles: first },
          tooltip: {
            callbacks: {
              title: (items) => {
                const p = items[0].raw.p;
                return "Run #" + p.number + " · " + p.status_display;
              },
              label: (item) => item.dataset.label.replace(" (in doubt)", "") + ": " + spec.fmt(item.parsed.y),
              afterBody: (items) => pointLines(items[0].raw.p),
            },
          },
        },
        scales: {
          x: xAxis(section),
          y: { beginAtZero: true, title: { display: true, text: spec.y } },
        },
      },
      plugins: [changeMarkers],
    });
  }

  function makeMeasurementChart(canvas, series) {
    const labels = series.values.map((v) => fmtDate(v.x));
    return new Chart(canvas, {
      type: "line",
      data: {
        labels: labels,
        datasets: [{
          label: series.name + " (" + series.unit + ")", data: series.values.map((v) => v.value),
          borderColor: BLUE, backgroundColor: BLUE, borderWidth: 1.8, pointRadius: 3.5, tension: 0,
        }],
      },
      options: {
        animation: false, responsive: true, maintainAspectRatio: false,
        plugins: {
          title: { display: true, text: series.name + " (" + (series.lower_is_better ? "lower" : "higher") + " is better)" },
          legend: { display: false },
          tooltip: {
            callbacks: {
              label: (item) => item.parsed.y + " " + series.unit,
              afterBody: (items) => {
                const v = series.values[items[0].dataIndex];
                return v.change ? "under change #" + v.change : "under the initial configuration";
              },
            },
          },
        },
        scales: { y: { beginAtZero: true, title: { display: true, text: series.unit } } },
      },
    });
  }

  function draw(data) {
    const sections = data.sections || [data];
    let charts = 0;
    sections.forEach((section, i) => {
      const box = root.querySelector('[data-section="' + i + '"]');
      if (!box) return;
      let first = true;
      box.querySelectorAll("canvas[data-panel]").forEach((canvas) => {
        const spec = PANELS[canvas.dataset.panel];
        if (!spec || !section.points.length) return;
        makePanel(canvas, section, spec, first);
        first = false;
        charts += 1;
      });
      box.querySelectorAll("canvas[data-measurement]").forEach((canvas) => {
        const series = section.measurements[Number(canvas.dataset.measurement)];
        if (!series) return;
        makeMeasurementChart(canvas, series);
        charts += 1;
      });
    });
    root.dataset.charts = String(charts);
  }

  fetch(root.dataset.url, { credentials: "same-origin", headers: { Accept: "application/json" } })
    .then((r) => (r.ok ? r.json() : Promise.reject(r.status)))
    .then(draw)
    .catch((err) => {
      root.dataset.error = String(err);
      console.error("journey: cannot load the chart data", err);
    });
})();
