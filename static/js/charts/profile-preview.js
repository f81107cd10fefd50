// The load profile's chart: users (or, for an arrival rate, iterations/s) over time with the
// measured windows shaded. The server computes the points with the engine's own schedule
// (projects:plan-preview), so the chart shows what will run. On the plan form it follows the
// form: each change posts the form's values and redraws, or lists the errors instead.
(function () {
  "use strict";
  const PC = window.PlimsollCharts, C = PC.colors;
  const box = document.getElementById("profile-preview");
  if (!box || !window.Chart) return;
  const canvas = document.getElementById("profile-chart");
  const summary = document.getElementById("profile-summary");
  const errorList = document.getElementById("profile-errors");
  const form = document.getElementById("plan-form");

  // Shades each measured window [start, end, label] and writes its label at the top.
  const windowBands = {
    id: "windowBands",
    beforeDatasetsDraw(chart, args, opts) {
      const area = chart.chartArea, ctx = chart.ctx;
      (opts.windows || []).forEach(([start, end, label]) => {
        const shown = PC.band(chart, start, end, PC.rgba(C.blue, 0.09));
        if (!shown) return;
        const { left, right } = shown;
        ctx.save();
        if (label && right - left > 30) {
          ctx.fillStyle = C.steel;
          ctx.font = "11px system-ui, sans-serif";
          ctx.textAlign = "center";
          ctx.fillText(label, (left + right) / 2, area.top + 12, right - left - 4);
        }
        ctx.restore();
      });
    },
  };

  // Long profiles read better in minutes or hours than in thousands of seconds.
  function unitFor(duration) {
    if (duration > 3 * 3600) return { div: 3600, name: "hours" };
    if (duration > 180) return { div: 60, name: "minutes" };
    return { div: 1, name: "seconds" };
  }

  const chart = new Chart(canvas, {
    type: "line",
    data: { datasets: [{ label: "users", data: [], borderColor: C.blue, backgroundColor: PC.rgba(C.blue, 0.15),
      borderWidth: 1.8, pointRadius: 0, tension: 0, fill: "origin" }] },
    options: {
      animation: false, responsive: true, maintainAspectRatio: false, parsing: false,
      interaction: { mode: "index", intersect: false },
      plugins: { legend: { display: false }, windowBands: { windows: [] } },
      scales: {
        x: { type: "linear", min: 0, title: { display: true, text: "seconds since start" } },
        y: { beginAtZero: true, title: { display: true, text: "users" } },
      },
    },
    plugins: [windowBands],
  });

  function draw(data) {
    // Closed models draw users (pacing also sends its rate); an arrival rate draws iterations/s.
    const rate = !Array.isArray(data.users) && Array.isArray(data.rate);
    const ys = rate ? data.rate : data.users || [];
    const unit = unitFor(data.duration || (data.t.length ? data.t[data.t.length - 1] : 0));
    chart.data.datasets[0].label = rate ? "iterations/s" : "users";
    chart.data.datasets[0].data = data.t.map((t, i) => ({ x: t / unit.div, y: ys[i] }));
    // The engine gives each window as {start, end, label}; [start, end, label] is read too.
    chart.options.plugins.windowBands.windows = (data.windows || []).map((w) => {
      const [start, end, label] = Array.isArray(w) ? w : [w.start, w.end, w.label];
      return [start / unit.div, end / unit.div, label];
    });
    chart.options.scales.x.title.text = unit.name + " since start";
    chart.options.scales.x.max = data.duration ? data.duration / unit.div : undefined;
    chart.options.scales.y.title.text = rate ? "iterations started per second" : "active users";
    chart.update("none");
    box.classList.remove("has-errors");
    box.dataset.points = String(data.t.length);
    if (summary) summary.textContent = (data.description || "") + (data.duration ? " · " + window.PlimsollFormat.seconds(data.duration) + " in all" : "");
    errorList.replaceChildren();
  }

  function labelFor(key) {
    if (key === "__all__") return "";
    const level = /^levels-(\d+)-(\w+)$/.exec(key);
    if (level) return "Level " + (Number(level[1]) + 1) + ", " + level[2].replace("_", "-");
    if (key === "levels") return "Levels";
    const input = form && form.querySelector('[name="' + key + '"]');
    const label = input && form.querySelector('label[for="' + input.id + '"]');
    return label ? label.textContent : key;
  }

  function showErrors(errors) {
    // No chart rather than a wrong one: what is drawn is always what would run.
    chart.data.datasets[0].data = [];
    chart.options.plugins.windowBands.windows = [];
    chart.update("none");
    box.classList.add("has-errors");
    box.dataset.points = "0";
    if (summary) summary.textContent = "";
    errorList.replaceChildren(...Object.entries(errors).flatMap(([key, messages]) => messages.map((m) => {
      const li = document.createElement("li");
      const label = labelFor(key);
      li.textContent = label ? label + ": " + m : m;
      return li;
    })));
  }

  const initial = document.getElementById("profile-preview-data");
  const data = initial ? JSON.parse(initial.textContent) : null;
  if (data) draw(data);
  if (!form) return;

  let timer = null, sequence = 0;
  function refresh() {
    const mine = ++sequence;
    fetch(form.dataset.previewUrl, { method: "POST", body: new FormData(form), credentials: "same-origin" })
      .then((r) => r.json())
      .then((answer) => {
        if (mine !== sequence) return; // a newer answer is on its way
        if (answer.errors) showErrors(answer.errors); else draw(answer);
      })
      .catch(() => {});
  }
  function later() {
    clearTimeout(timer);
    timer = setTimeout(refresh, 300);
  }
  form.addEventListener("input", later);
  form.addEventListener("change", later);
  form.addEventListener("plan:levels", later);
  if (!data) refresh();
})();
