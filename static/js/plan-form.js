// The plan form: shows only the chosen profile kind's fields, and adds or removes levels of a
// steps profile (a new level starts as a copy of the last one). The server validates only the
// chosen kind's fields, so hiding the others changes nothing about what is saved.
(function () {
  "use strict";
  const form = document.getElementById("plan-form");
  if (!form) return;
  const kind = form.querySelector('[name="profile_kind"]');

  function toggle() {
    form.querySelectorAll("[data-kinds]").forEach((el) => {
      el.hidden = !el.dataset.kinds.split(" ").includes(kind.value);
    });
  }
  if (kind) {
    kind.addEventListener("change", toggle);
    toggle();
  }

  const rows = document.getElementById("level-rows");
  const template = document.getElementById("level-template");
  const add = document.getElementById("level-add");
  const total = form.querySelector('[name="levels-TOTAL_FORMS"]');
  if (!rows || !template || !add || !total) return;
  const FIELDS = ["users", "ramp_up", "hold", "ramp_down", "quiet"];

  function value(row, name) {
    const input = row.querySelector('[name$="-' + name + '"]');
    return input ? input.value : "";
  }

  function renumber() {
    let n = 0;
    rows.querySelectorAll(".level-row").forEach((row) => {
      const removed = row.querySelector('[name$="-DELETE"]');
      row.classList.toggle("removed", Boolean(removed && removed.checked));
      row.querySelector(".pos").textContent = removed && removed.checked ? "" : String(++n);
    });
  }

  // The empty row offered for adding a level without JavaScript; the button does that here.
  let last = rows.lastElementChild;
  while (last && !value(last, "id") && !value(last, "users") && Number(total.value) === rows.children.length) {
    last.remove();
    total.value = String(Number(total.value) - 1);
    last = rows.lastElementChild;
  }

  add.hidden = false;
  add.addEventListener("click", () => {
    const index = Number(total.value);
    const holder = document.createElement("tbody");
    holder.innerHTML = template.innerHTML.replace(/__prefix__/g, String(index));
    const row = holder.querySelector("tr");
    const previous = Array.from(rows.querySelectorAll(".level-row")).filter((r) => !r.classList.contains("removed")).pop();
    if (previous) FIELDS.forEach((name) => { row.querySelector('[name$="-' + name + '"]').value = value(previous, name); });
    rows.appendChild(row);
    total.value = String(index + 1);
    renumber();
    row.querySelector('[name$="-users"]').focus();
    form.dispatchEvent(new Event("plan:levels"));
  });
  rows.addEventListener("change", (event) => {
    if (event.target.name && event.target.name.endsWith("-DELETE")) renumber();
  });
  renumber();
})();
