// Behaviour every page shares, in a file because the Content-Security-Policy allows no inline
// script, handler attribute (onchange=…) or style attribute:
//   data-autosubmit on a form control submits its form when it changes;
//   data-confirm="…" on a form asks before submitting;
//   data-pct="42" on a progress bar's inner element sets its width (also in content htmx swaps in).
(function () {
  "use strict";

  function setWidths(root) {
    for (const el of root.querySelectorAll("[data-pct]")) {
      el.style.width = Math.max(0, Math.min(100, Number(el.dataset.pct) || 0)) + "%";
    }
  }

  document.addEventListener("change", (event) => {
    const control = event.target.closest("[data-autosubmit]");
    if (control && control.form) control.form.requestSubmit();
  });

  document.addEventListener("submit", (event) => {
    const form = event.target.closest("form[data-confirm]");
    if (form && !window.confirm(form.dataset.confirm)) event.preventDefault();
  });

  document.addEventListener("DOMContentLoaded", () => setWidths(document));
  document.addEventListener("htmx:load", (event) => setWidths(event.detail.elt.parentNode || document));
})();
