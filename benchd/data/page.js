// benchd runbook page: draws the Vega-Lite specs embedded in the page, lets the reader choose the Pareto
// axes, and copies lock commands. No request leaves the page (its Content-Security-Policy forbids it).
(function () {
  "use strict";
  const page = JSON.parse(document.getElementById("benchd-charts").textContent);
  const views = {};
  const options = { actions: false, renderer: "svg", mode: "vega-lite" };

  function render(chart) {
    const el = document.getElementById(chart.id);
    if (!el) return Promise.resolve();
    if (views[chart.id]) views[chart.id].finalize();
    return window.vegaEmbed(el, chart.spec, options).then(function (result) {
      views[chart.id] = result;
      el.dataset.rendered = "true";
    }).catch(function (err) {
      el.innerHTML = "";
      const p = document.createElement("p");
      p.className = "nochart";
      p.textContent = "chart failed to draw: " + err + " (the table below has the same figures)";
      el.appendChild(p);
      console.warn(err);
    });
  }

  // Which candidates a Pareto chart cannot draw on the chosen axes (null there), with the reason.
  function undrawn(chart, xAxis, yAxis) {
    const out = document.getElementById(chart.id + "-undrawn");
    if (!out) return;
    const missing = chart.spec.data.values.filter(function (d) {
      return d[xAxis] === null || d[xAxis] === undefined || d[yAxis] === null || d[yAxis] === undefined;
    }).map(function (d) {
      const axis = (d[xAxis] === null || d[xAxis] === undefined) ? xAxis : yAxis;
      return d.candidate + " (" + (d["tip_" + axis] || "null") + ")";
    });
    out.textContent = missing.length ? "Not drawn on these axes: " + missing.join("; ") : "";
  }

  function setAxes(xAxis, yAxis) {
    const jobs = [];
    page.charts.filter(function (c) { return c.kind === "pareto"; }).forEach(function (chart) {
      chart.spec.params.forEach(function (p) {
        if (p.name === "xAxis") p.value = xAxis;
        if (p.name === "yAxis") p.value = yAxis;
      });
      chart.spec.layer.forEach(function (layer) {
        layer.encoding.x.title = page.labels[xAxis];
        layer.encoding.y.title = page.labels[yAxis];
      });
      undrawn(chart, xAxis, yAxis);
      if (typeof window.vegaEmbed === "function") jobs.push(render(chart));
    });
    document.body.dataset.axes = xAxis + "," + yAxis;
    return Promise.all(jobs);
  }

  const xs = document.getElementById("x-axis");
  const ys = document.getElementById("y-axis");
  const first = page.charts.find(function (c) { return c.kind === "pareto"; });
  if (first && xs && ys) {
    first.spec.params.forEach(function (p) {
      if (p.name === "xAxis") xs.value = p.value;
      if (p.name === "yAxis") ys.value = p.value;
    });
    const change = function () { setAxes(xs.value, ys.value); };
    xs.addEventListener("change", change);
    ys.addEventListener("change", change);
  }

  if (typeof window.vegaEmbed === "function") {
    Promise.all(page.charts.map(render)).then(function () {
      if (first && xs && ys) page.charts.filter(function (c) { return c.kind === "pareto"; })
        .forEach(function (c) { undrawn(c, xs.value, ys.value); });
      document.body.dataset.chartsReady = "true";
    });
  } else {
    if (first && xs && ys) page.charts.filter(function (c) { return c.kind === "pareto"; })
      .forEach(function (c) { undrawn(c, xs.value, ys.value); });
    document.body.dataset.chartsReady = "absent";
  }

  // The priority selector: every answer is in the page; choosing one shows it and hides the others.
  const priority = document.getElementById("priority-choice");
  function showPriority(name) {
    document.querySelectorAll("article.priority").forEach(function (a) { a.hidden = a.dataset.priority !== name; });
    document.body.dataset.priority = name;
  }
  if (priority) {
    priority.addEventListener("change", function () { showPriority(priority.value); });
    showPriority(priority.value);
  }

  document.querySelectorAll("button.copy").forEach(function (button) {
    button.addEventListener("click", function () {
      const code = document.getElementById(button.dataset.target);
      const text = code.textContent;
      const done = function () { button.textContent = "copied"; };
      const fallback = function () {
        const range = document.createRange();
        range.selectNodeContents(code);
        const sel = window.getSelection();
        sel.removeAllRanges();
        sel.addRange(range);
        try { document.execCommand("copy"); done(); } catch (e) { button.textContent = "selected: press Ctrl/Cmd-C"; }
      };
      if (navigator.clipboard && window.isSecureContext) navigator.clipboard.writeText(text).then(done, fallback);
      else fallback();
    });
  });
  window.benchdPage = { setAxes: setAxes, showPriority: showPriority, views: views };
})();
