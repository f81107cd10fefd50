// Charts are drawn at the screen's width; before printing (Save as PDF too) each one is
// redrawn to fit the paper, and back again afterwards.
(function () {
  "use strict";
  if (!window.Chart) return;
  function resizeAll() {
    Object.values(Chart.instances).forEach((chart) => chart.resize());
  }
  window.addEventListener("beforeprint", resizeAll);
  window.addEventListener("afterprint", resizeAll);
})();
