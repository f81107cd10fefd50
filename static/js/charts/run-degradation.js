// Degradation on the time charts: the steady state shaded green and a red line where the
// degradation began. Registered for every chart before run-charts.js draws its four, and
// limited to those inside #charts.
(function () {
  "use strict";
  const el = document.getElementById("degradation-data");
  const PC = window.PlimsollCharts;
  if (!el || !window.Chart || !PC) return;
  const d = JSON.parse(el.textContent);
  const onsets = [];
  if (d.throughput_onset_s != null) onsets.push([d.throughput_onset_s, "throughput drop"]);
  if (d.apd_onset_s != null) {
    const same = onsets.find((o) => o[0] === d.apd_onset_s);
    if (same) same[1] += " + APD rise"; else onsets.push([d.apd_onset_s, "APD rise"]);
  }
  Chart.register(PC.runChartMarkers("degradationMarker", {
    before(chart) {
      PC.band(chart, d.steady_window[0], d.steady_window[1], PC.rgba(PC.colors.green, 0.12));
    },
    after(chart) {
      for (const [t, label] of onsets) PC.vline(chart, t, { color: PC.colors.red, label: label + " @ " + t + " s" });
    },
  }));
  document.getElementById("charts")?.setAttribute("data-degradation-marker", String(onsets.length));
})();
