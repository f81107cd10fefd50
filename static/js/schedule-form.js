// The schedule form shows the fields of the chosen kind only: a time of day for "every day" and
// "weekdays", N and the minute past the hour for "every N hours", an expression for cron.
// Hidden fields keep their values; the server reads only the chosen kind's.
(function () {
  "use strict";
  const FIELDS = { at_time: ["daily", "weekdays", "hours"], every_hours: ["hours"], cron: ["cron"] };

  function sync(form) {
    const kind = form.querySelector("[name=kind]");
    if (!kind) return;
    for (const [name, kinds] of Object.entries(FIELDS)) {
      const input = form.querySelector("[name=" + name + "]");
      const field = input && input.closest(".field");
      if (field) field.hidden = !kinds.includes(kind.value);
    }
  }

  for (const form of document.querySelectorAll("#schedule-form")) {
    sync(form);
    form.addEventListener("change", (event) => { if (event.target.name === "kind") sync(form); });
  }
})();
