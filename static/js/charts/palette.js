// The charts' one palette and their markers: every chart script takes its colours and draws its
// vertical lines, bands and labels through window.PlimsollCharts, so a colour or a marker's look
// changes here only. Loaded by base.html and public_base.html before any chart script (no Chart.js
// needed: the helpers draw on a chart they are given).
(function () {
  "use strict";

  // Named by what they mean on the charts, in the portal's colours (static/css).
  const colors = {
    blue: "#1f5fbf", // users, pages/s, the measured windows
    green: "#1c7c3c", // APD, held levels, the steady state
    amber: "#9a6300", // p95, the knee, dropped iterations
    red: "#b3261e", // errors, broken levels, degradation, failed scrapes
    purple: "#6b4fa3", // p99
    violet: "#6a3fb5", // the USL model
    plum: "#7b3fa0", // a server's fourth series
    slate: "#7a8aa6", // hits/s, Plimsoll's pages/s beside a server's
    sage: "#5b8c5a", // p50
    teal: "#0f7c8a",
    doubt: "#8a94a6", // a doubtful run
    orange: "#d9822b", // a comparison's "before", a tuning change
    handoff: "#d67800", // a shard handoff
    brown: "#9a4f00", // "began @"
    steel: "#35618f", // the profile preview's window labels
    grey: "#555555", // "extrapolation"
    shade: "#787878", // the extrapolated part of a curve
    white: "#ffffff",
    sparkBlue: "#2563eb", // the schedules list's sparklines
    sparkGreen: "#16a34a",
  };

  // Series in order, for charts that draw several of one kind (servers, comparisons).
  const series = [colors.blue, colors.amber, colors.green, colors.plum, colors.red];
  const compare = [colors.blue, colors.green, colors.purple, colors.red, colors.teal, colors.slate];

  // "#1f5fbf", 0.15 → "rgba(31, 95, 191, 0.15)"
  function rgba(hex, alpha) {
    const n = parseInt(hex.slice(1), 16);
    return "rgba(" + (n >> 16) + ", " + ((n >> 8) & 255) + ", " + (n & 255) + ", " + alpha + ")";
  }

  // A band over the x values [from, to), clipped to the plot; false when nothing shows.
  function band(chart, from, to, fill) {
    const x = chart.scales.x, area = chart.chartArea, ctx = chart.ctx;
    const left = Math.max(x.getPixelForValue(from), area.left);
    const right = Math.min(x.getPixelForValue(to), area.right);
    if (right <= left) return false;
    ctx.save();
    ctx.fillStyle = fill;
    ctx.fillRect(left, area.top, right - left, area.bottom - area.top);
    ctx.restore();
    return { left, right };
  }

  // A vertical line at x value ``at`` (dashed by default), with an optional label near the top.
  // opts: color, dash ([5, 3]), width (1.5), label, labelY (12: pixels below the top), align
  // ("auto": right of the line in the left half, left of it in the right half; "fit": right of
  // the line unless it would run past the plot), clip (true: nothing outside the plot).
  // Returns the label's extent {left, right} (or {} without a label), or null when not drawn.
  function vline(chart, at, opts) {
    const o = Object.assign({ dash: [5, 3], width: 1.5, labelY: 12, align: "auto", clip: true }, opts);
    const x = chart.scales.x, area = chart.chartArea, ctx = chart.ctx;
    const px = x.getPixelForValue(at);
    if (o.clip && (px < area.left || px > area.right)) return null;
    ctx.save();
    ctx.strokeStyle = o.color;
    ctx.lineWidth = o.width;
    ctx.setLineDash(o.dash);
    ctx.beginPath();
    ctx.moveTo(px, area.top);
    ctx.lineTo(px, area.bottom);
    ctx.stroke();
    let extent = {};
    if (o.label) {
      ctx.fillStyle = o.color;
      ctx.font = "11px sans-serif";
      if (o.align === "fit") {
        // Right of the line, unless that runs past the plot: then left of it, never cut off.
        const width = ctx.measureText(o.label).width;
        const left = px + 4 + width <= area.right ? px + 4 : Math.max(area.left, px - 4 - width);
        ctx.fillText(o.label, left, area.top + o.labelY);
        extent = { left, right: left + width };
      } else {
        ctx.textAlign = px > (area.left + area.right) / 2 ? "right" : "left";
        ctx.fillText(o.label, px + (ctx.textAlign === "left" ? 4 : -4), area.top + o.labelY);
      }
    }
    ctx.restore();
    return extent;
  }

  // A short text in the plot, at pixel (px, py), in a colour; align as canvas textAlign.
  function label(chart, text, px, py, color, align) {
    const ctx = chart.ctx;
    ctx.save();
    ctx.fillStyle = color;
    ctx.font = "11px sans-serif";
    ctx.textAlign = align || "left";
    ctx.fillText(text, px, py);
    ctx.restore();
  }

  // The mean of several lines ([{x, y}, …] each) at each x they have (rounded to 1/1000), skipping
  // their gaps: a trial set's bold line over its trials (the comparison's curves, a shared comparison).
  function meanOf(lines) {
    const sums = new Map();
    for (const points of lines) {
      for (const p of points) {
        if (p.y === null || p.y === undefined) continue;
        const key = Math.round(p.x * 1000) / 1000;
        const acc = sums.get(key) || { x: p.x, y: 0, n: 0, p: p.p };
        acc.y += p.y; acc.n += 1;
        sums.set(key, acc);
      }
    }
    return Array.from(sums.values()).sort((a, b) => a.x - b.x).map((a) => ({ x: a.x, y: a.y / a.n, p: a.p }));
  }

  // A Chart.js plugin that draws markers on the run's time charts only (those inside #charts):
  // hooks is {before(chart), after(chart)}: before the datasets, after everything.
  function runChartMarkers(id, hooks) {
    const inCharts = (chart) => chart.canvas.closest("#charts");
    const plugin = { id };
    if (hooks.before) plugin.beforeDatasetsDraw = (chart) => inCharts(chart) && hooks.before(chart);
    if (hooks.afterDatasets) plugin.afterDatasetsDraw = (chart) => inCharts(chart) && hooks.afterDatasets(chart);
    if (hooks.after) plugin.afterDraw = (chart) => inCharts(chart) && hooks.after(chart);
    return plugin;
  }

  window.PlimsollCharts = { colors, series, compare, rgba, band, vline, label, meanOf, runChartMarkers };
})();
