// The dashboard's sweep pages: the list, and one sweep with its trials table, every trial's
// objective curve overlaid, and the objective against each parameter. Plain JS, like app.js,
// which hands in its helpers (no third-party script).
"use strict";

window.EpochalSweeps = (function () {
  const STATE_COLOR = { complete: "#16a34a", pruned: "#f97316", failed: "#dc2626", running: "#2563eb", queued: "#9ca3af", cancelled: "#a16207" };
  const svgNode = (testid) => {
    const svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
    svg.setAttribute("data-testid", testid);
    return svg;
  };

  async function listView(ui) {
    const { h, show, getJson, badge, when, num } = ui;
    const body = h("tbody", { "data-testid": "sweeps" });
    show(h("div", { class: "toolbar" }, h("h1", {}, "Sweeps")),
      h("table", {}, h("thead", {}, h("tr", {}, ["Name", "Status", "Trials", "Objective", "Best", "Created"].map((c) => h("th", {}, c)))), body));
    const { items } = await getJson("/v1/sweeps?limit=100");
    body.replaceChildren(...items.map((s) => h("tr", { "data-sweep": s.id },
      h("td", {}, h("a", { href: `#/sweeps/${s.id}` }, s.name), h("div", { class: "muted" }, s.id.slice(0, 8))),
      h("td", {}, badge(s.status)),
      h("td", {}, `${s.trials_launched}/${s.max_trials}`),
      h("td", {}, `${s.objective.metric} (${s.objective.mode})`),
      h("td", { "data-testid": "sweep-best" }, s.best_objective === null || s.best_objective === undefined ? "–" : `${s.objective.metric} ${num(s.best_objective)}`),
      h("td", {}, when(s.created_at)))));
    if (!items.length) body.replaceChildren(h("tr", {}, h("td", { colspan: 6, class: "muted" }, "No sweeps yet: POST /v1/sweeps or epochal sweep submit.")));
  }

  // x position of a parameter value: log10 for a log range, the choice's index for a category.
  function axisFor(dist) {
    if (dist.type === "categorical") {
      const labels = dist.choices.map((c) => JSON.stringify(c));
      return { x: (v) => labels.indexOf(JSON.stringify(v)) + 1, range: [0.5, labels.length + 0.5], label: labels.map((l, i) => `${i + 1}=${l}`).join(" "), float: false };
    }
    if (dist.type === "loguniform" || dist.log) {
      return { x: (v) => Math.log10(v), range: [Math.log10(dist.low), Math.log10(dist.high)], label: "log10", float: true };
    }
    return { x: (v) => v, range: [dist.low, dist.high], label: "", float: true };
  }

  async function sweepView(ui, sweepId) {
    const { h, show, getJson, badge, num, signal } = ui;
    let sweep = await getJson(`/v1/sweeps/${encodeURIComponent(sweepId)}`);
    const curves = new Map(); // job id -> metric rows, re-read while the trial runs
    const status = h("span"), facts = h("dl", { class: "facts" }), trialsBody = h("tbody", { "data-testid": "trials" });
    const curveSvg = svgNode("curves-chart"), paramCharts = h("div", { class: "charts" });
    const errorBox = h("p", { class: "error" });
    const cancel = h("button", { class: "danger", type: "button", "data-testid": "cancel-sweep", on: { click: async () => {
      if (!confirm(`Cancel sweep ${sweep.name}?`)) return;
      try { sweep = await getJson(`/v1/sweeps/${sweepId}/cancel`, { method: "POST" }); paint(); }
      catch (err) { errorBox.textContent = err.message; }
    } } }, "Cancel sweep");
    const paramSvgs = Object.keys(sweep.spec.parameters).map((path) => {
      const svg = svgNode(`param-chart`);
      svg.setAttribute("data-parameter", path);
      paramCharts.append(h("div", { class: "card" }, svg));
      return [path, svg];
    });

    function paint() {
      const metric = sweep.objective.metric, best = sweep.best;
      status.replaceChildren(badge(sweep.status), ` ${sweep.trials_launched}/${sweep.max_trials} trials`);
      cancel.hidden = Boolean(sweep.finished_at) || sweep.status !== "running";
      facts.replaceChildren(
        h("dt", {}, "objective"), h("dd", {}, `${metric} (${sweep.objective.mode})`),
        h("dt", {}, "best trial"), h("dd", { "data-testid": "best" }, best ? [h("a", { href: `#/jobs/${best.job_id}` }, `#${best.number}`), ` ${num(best.objective)} `, JSON.stringify(best.params)] : "–"),
        h("dt", {}, "epochs"), h("dd", { "data-testid": "epochs" }, `${sweep.epochs_spent} trained of ${sweep.epochs_full} at full length`),
        h("dt", {}, "trials"), h("dd", {}, Object.entries(sweep.counts).map(([k, v]) => `${v} ${k}`).join(", ") || "–"));
      trialsBody.replaceChildren(...sweep.trials.map((t) => h("tr", { "data-trial": t.number },
        h("td", {}, `${t.number}${best && best.number === t.number ? " ★" : ""}`),
        h("td", {}, h("span", { class: `badge ${t.state}`, "data-testid": "trial-state" }, t.state)),
        h("td", {}, `${t.epochs_run}/${t.epochs}`),
        h("td", {}, num(t.objective)),
        h("td", {}, Object.entries(t.params).map(([k, v]) => `${k}=${JSON.stringify(v)}`).join(", ")),
        h("td", {}, h("a", { href: `#/jobs/${t.job_id}` }, t.job_id.slice(0, 8))))));
      const series = sweep.trials.map((t) => ({ name: `#${t.number}`, color: STATE_COLOR[t.state] || "#6b7280",
        points: (curves.get(t.job_id) || []).map((r) => [r.epoch, r[metric]]).filter((p) => p[1] !== null) }));
      EpochalChart.draw(curveSvg, { title: `${metric} per epoch, every trial (orange: pruned)`, series, legend: false });
      for (const [path, svg] of paramSvgs) {
        const axis = axisFor(sweep.spec.parameters[path]);
        const done = sweep.trials.filter((t) => t.objective !== null);
        const groups = ["complete", "pruned", "failed"].map((state) => ({ name: state, color: STATE_COLOR[state], scatter: true,
          points: done.filter((t) => t.state === state).map((t) => [axis.x(t.params[path]), t.objective]) }));
        EpochalChart.draw(svg, { title: `${metric} against ${path}`, series: groups, xRange: axis.range, xFloat: axis.float, xLabel: `${path} ${axis.label}`.trim() });
      }
    }

    async function refresh() {
      sweep = await getJson(`/v1/sweeps/${encodeURIComponent(sweepId)}`);
      await Promise.all(sweep.trials.filter((t) => t.state !== "queued").map(async (t) => {
        const cached = curves.get(t.job_id);
        if (cached && ["complete", "pruned", "failed", "cancelled"].includes(t.state) && cached.length >= t.epochs_run) return;
        curves.set(t.job_id, (await getJson(`/v1/jobs/${t.job_id}/metrics`)).items);
      }));
      paint();
    }

    show(h("div", { class: "toolbar" }, h("h1", {}, `Sweep ${sweep.name}`), status, cancel), errorBox,
      h("div", { class: "charts" }, h("div", { class: "card" }, curveSvg), h("div", {}, h("h2", {}, "Sweep"), facts)),
      h("h2", {}, "Trials"),
      h("table", {}, h("thead", {}, h("tr", {}, ["#", "State", "Epochs", sweep.objective.metric, "Parameters", "Job"].map((c) => h("th", {}, c)))), trialsBody),
      h("h2", {}, "Objective against each parameter"), paramCharts,
      h("h2", {}, "Spec"), h("pre", {}, JSON.stringify(sweep.spec, null, 2)));
    paint();
    await refresh();
    const timer = setInterval(() => { if (!sweep.finished_at) refresh().catch(() => {}); }, 2000);
    signal.addEventListener("abort", () => clearInterval(timer));
  }

  return { listView, sweepView };
})();
