// The step form: shows only what the chosen kind of step uses (an HTTP request, a streamed response,
// a WebSocket session). Step forms arrive with HTMX (edit, add), so the toggle listens on the document.
// The server validates by kind, so hiding the other fields changes nothing about what is saved.
(function () {
  "use strict";

  function toggle(form) {
    const kind = form.querySelector('[name="kind"]');
    if (!kind) return;
    form.querySelectorAll("[data-step-kinds]").forEach((el) => {
      el.hidden = !el.dataset.stepKinds.split(" ").includes(kind.value);
    });
  }

  function all(root) {
    (root || document).querySelectorAll("form.step-form").forEach(toggle);
  }

  document.addEventListener("change", (event) => {
    if (event.target.name === "kind") {
      const form = event.target.closest("form.step-form");
      if (form) toggle(form);
    }
  });
  document.addEventListener("htmx:afterSettle", () => all());
  document.addEventListener("DOMContentLoaded", () => all());
})();
