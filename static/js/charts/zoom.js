// Drag over a time chart to zoom on that range; every chart of a group follows, and a reset
// button brings the whole run back. A small plug-in of our own (no third-party zoom plug-in):
// mouse down, move, up on the canvas; the selection is drawn as a band while dragging.
// Exposed as window.PlimsollZoom:
//   PlimsollZoom.group(onRange)          → a group; onRange(from, to) (null, null on reset)
//   group.add(chart), group.remove(chart) → the chart zooms with the group (or no longer)
//   group.set(from, to) / group.reset()  → from code (the Playwright tests use the mouse)
(function () {
  "use strict";
  const PC = window.PlimsollCharts, C = PC.colors;
  const MIN_DRAG_PX = 6;

  const band = {
    id: "dragBand",
    afterDatasetsDraw(chart) {
      const drag = chart.$drag;
      if (!drag || drag.to === null) return;
      const area = chart.chartArea, ctx = chart.ctx;
      const left = Math.max(area.left, Math.min(drag.from, drag.to));
      const right = Math.min(area.right, Math.max(drag.from, drag.to));
      ctx.save();
      ctx.fillStyle = PC.rgba(C.blue, 0.15);
      ctx.strokeStyle = PC.rgba(C.blue, 0.6);
      ctx.fillRect(left, area.top, right - left, area.bottom - area.top);
      ctx.strokeRect(left, area.top, right - left, area.bottom - area.top);
      ctx.restore();
    },
  };

  function group(onRange) {
    const charts = [];
    const state = { from: null, to: null, full: new Map() };

    function apply() {
      for (const chart of charts) {
        const full = state.full.get(chart) || {};
        chart.options.scales.x.min = state.from === null ? full.min : state.from;
        chart.options.scales.x.max = state.to === null ? full.max : state.to;
        chart.update("none");
      }
    }

    function set(from, to) {
      state.from = Math.max(0, Math.floor(Math.min(from, to)));
      state.to = Math.ceil(Math.max(from, to));
      if (state.to <= state.from) state.to = state.from + 1;
      apply();
      onRange(state.from, state.to);
    }

    function reset() {
      state.from = state.to = null;
      apply();
      onRange(null, null);
    }

    function add(chart) {
      charts.push(chart);
      // Best given at creation (plugins: [PlimsollZoom.plugin]); added here otherwise.
      const plugins = chart.config.plugins;
      if (plugins && !plugins.includes(band)) plugins.push(band);
      state.full.set(chart, { min: chart.options.scales.x.min, max: chart.options.scales.x.max });
      if (state.from !== null) {
        chart.options.scales.x.min = state.from;
        chart.options.scales.x.max = state.to;
      }
      const canvas = chart.canvas;
      canvas.classList.add("zoomable");
      const px = (event) => event.clientX - canvas.getBoundingClientRect().left;
      canvas.addEventListener("mousedown", (event) => {
        if (event.button !== 0) return;
        chart.$drag = { from: px(event), to: null };
      });
      canvas.addEventListener("mousemove", (event) => {
        if (!chart.$drag) return;
        chart.$drag.to = px(event);
        chart.draw();
      });
      const end = (event) => {
        const drag = chart.$drag;
        chart.$drag = null;
        if (!drag) return;
        const to = event ? px(event) : drag.to;
        chart.draw();
        if (to === null || Math.abs(to - drag.from) < MIN_DRAG_PX) return;
        const x = chart.scales.x;
        set(x.getValueForPixel(drag.from), x.getValueForPixel(to));
      };
      canvas.addEventListener("mouseup", end);
      canvas.addEventListener("mouseleave", () => end(null));
    }

    // The full extent of a chart changes as a live run grows: keep it, and keep a zoom in place.
    function extent(chart, min, max) {
      state.full.set(chart, { min: min, max: max });
      if (state.from === null) {
        chart.options.scales.x.min = min;
        chart.options.scales.x.max = max;
      }
    }

    function remove(chart) {
      const i = charts.indexOf(chart);
      if (i !== -1) charts.splice(i, 1);
      state.full.delete(chart);
    }

    return { add: add, remove: remove, set: set, reset: reset, extent: extent, state: state };
  }

  window.PlimsollZoom = { group: group, plugin: band };
})();
