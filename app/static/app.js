// The epochal dashboard: job list, job page with live curves (SSE read with fetch), submit form.
// The API key lives in sessionStorage and travels only in the Authorization header.
"use strict";

(function () {
  const KEY = "epochal-api-key";
  const TERMINAL = new Set(["succeeded", "failed", "cancelled"]);
  const main = document.getElementById("main");
  let page = new AbortController(); // aborted when the view changes: stops streams and timers

  // ---------- helpers ----------
  function h(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === "on") for (const [ev, fn] of Object.entries(v)) node.addEventListener(ev, fn);
      else if (v !== null && v !== undefined && v !== false) node.setAttribute(k, v === true ? "" : String(v));
    }
    for (const c of children.flat()) if (c !== null && c !== undefined) node.append(c instanceof Node ? c : String(c));
    return node;
  }
  const show = (...nodes) => main.replaceChildren(...nodes);
  const badge = (status) => h("span", { class: `badge ${status}`, "data-testid": "status" }, status);
  const num = (v, digits = 4) => {
    if (v === null || v === undefined) return "–";
    if (Number.isInteger(v) || Math.abs(v) >= 1000) return Math.round(v).toLocaleString(); // best_epoch 2, replicas 1
    return Number(v).toFixed(digits);
  };
  // The epoch in progress by steps, [done, all]; null when the report is of an epoch that ended.
  const stepsOf = (j) => {
    const p = j.step_progress;
    return p && p.epoch === j.current_epoch + 1 && p.steps ? [Math.min(p.step, p.steps), p.steps] : null;
  };

  // The best epoch and the metric it was chosen by: "val_loss 0.3121 @ epoch 4".
  const bestText = (j) => (j.best_epoch ? `${j.best_metric_name || "best"} ${num(j.best_metric)} @ epoch ${j.best_epoch}` : "–");
  // Nested objects (export, timings) as dotted keys with their values, not as raw JSON.
  const flat = (value, prefix) => (value !== null && typeof value === "object" && !Array.isArray(value) && Object.keys(value).length
    ? Object.entries(value).flatMap(([k, v]) => flat(v, `${prefix}.${k}`))
    : [[prefix, value]]);
  const shown = (v) => (typeof v === "number" ? num(v) : Array.isArray(v) ? v.map(shown).join(", ") : v === null || v === undefined ? "–" : String(v));
  const when = (iso) => (iso ? new Date(iso).toLocaleString() : "–");

  class ApiError extends Error {
    constructor(status, problem) {
      const fields = (problem.errors || []).map((e) => `${e.field || "body"}: ${e.msg}`);
      super(fields.length ? fields.join("\n") : `${status} ${problem.title || ""}: ${problem.detail || ""}`);
      this.status = status;
    }
  }

  async function api(path, options = {}) {
    const headers = { Authorization: `Bearer ${sessionStorage.getItem(KEY) || ""}`, ...(options.headers || {}) };
    const response = await fetch(path, { ...options, headers, signal: options.signal || page.signal });
    if (response.status === 401) {
      sessionStorage.removeItem(KEY);
      render();
      throw new ApiError(401, { title: "Unauthorized", detail: "log in with an API key" });
    }
    if (!response.ok) {
      let problem = {};
      try { problem = await response.json(); } catch (_) { problem = { detail: response.statusText }; }
      throw new ApiError(response.status, problem);
    }
    return response;
  }
  const getJson = async (path, options) => (await api(path, options)).json();

  // Server-Sent Events over fetch, so the key goes in a header, never in the URL.
  async function streamEvents(jobId, onEvent, signal) {
    let lastId = null, failures = 0;
    while (!signal.aborted) {
      try {
        const headers = { Accept: "text/event-stream", ...(lastId ? { "Last-Event-ID": lastId } : {}) };
        const response = await api(`/v1/jobs/${encodeURIComponent(jobId)}/events`, { headers, signal });
        const reader = response.body.getReader();
        const decoder = new TextDecoder();
        let buffer = "";
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          buffer += decoder.decode(value, { stream: true }).replace(/\r\n?/g, "\n");
          let cut;
          while ((cut = buffer.indexOf("\n\n")) >= 0) {
            const block = buffer.slice(0, cut);
            buffer = buffer.slice(cut + 2);
            const event = { type: "message", data: [], id: null };
            for (const line of block.split("\n")) {
              if (!line || line.startsWith(":")) continue;
              const i = line.indexOf(":");
              const field = i < 0 ? line : line.slice(0, i);
              const val = i < 0 ? "" : line.slice(i + 1).replace(/^ /, "");
              if (field === "event") event.type = val;
              else if (field === "data") event.data.push(val);
              else if (field === "id") event.id = val;
            }
            if (!event.data.length) continue;
            lastId = event.id || lastId;
            failures = 0;
            const data = JSON.parse(event.data.join("\n"));
            onEvent(event.type, data);
            if (event.type === "transition" && TERMINAL.has(data.to_status)) return;
          }
        }
      } catch (err) {
        if (signal.aborted || (err instanceof ApiError && err.status !== 503)) return;
        failures += 1;
      }
      await new Promise((r) => setTimeout(r, Math.min(250 * 2 ** failures, 5000)));
    }
  }

  // ---------- views ----------
  function loginView() {
    const input = h("input", { type: "password", name: "key", autocomplete: "off", "data-testid": "api-key", placeholder: "ep_…" });
    const error = h("p", { class: "error" });
    const form = h("form", { class: "login", on: { submit: async (e) => {
      e.preventDefault();
      const key = input.value.trim();
      const response = await fetch("/v1/jobs?limit=1", { headers: { Authorization: `Bearer ${key}` } });
      if (response.ok) { sessionStorage.setItem(KEY, key); render(); }
      else error.textContent = `${response.status}: ${(await response.json().catch(() => ({}))).detail || response.statusText}`;
    } } },
      h("h1", {}, "Log in"),
      h("label", {}, "API key (kept in this tab only)", input),
      h("p", { class: "muted", "data-testid": "key-help" }, "make run (epochal up) wrote an admin key to the file api-key in its home: ",
        h("code", {}, ".epochal/api-key"), " in the directory it was started from, or ", h("code", {}, "$EPOCHAL_HOME/api-key"),
        " (its banner prints the full path; ", h("code", {}, "cat"), " it and paste the key here). ",
        h("code", {}, "epochal keys create NAME"), " makes a key of your own."),
      h("button", { class: "primary", type: "submit", "data-testid": "login" }, "Log in"), error);
    show(form);
    input.focus();
  }

  async function jobsView() {
    const filter = h("select", { "data-testid": "status-filter" },
      ["", "queued", "running", "cancelling", "succeeded", "failed", "cancelled"].map((s) => h("option", { value: s }, s || "all statuses")));
    const body = h("tbody", { "data-testid": "jobs" });
    show(h("div", { class: "toolbar" }, h("h1", {}, "Jobs"), filter, h("a", { class: "button", href: "#/submit" }, "New job")),
      h("table", {}, h("thead", {}, h("tr", {}, ["Name", "Status", "Framework", "Progress", "Best", "Created"].map((c) => h("th", {}, c)))), body));
    const signal = page.signal;
    async function refresh() {
      const query = filter.value ? `&status=${filter.value}` : "";
      const { items } = await getJson(`/v1/jobs?limit=100${query}`);
      body.replaceChildren(...items.map((j) => h("tr", { "data-job": j.id },
        h("td", {}, h("a", { href: `#/jobs/${j.id}` }, j.name), h("div", { class: "muted" }, j.id.slice(0, 8))),
        h("td", {}, badge(j.status)),
        h("td", {}, j.framework),
        h("td", {}, h("progress", { max: j.epochs, value: j.current_epoch }), ` ${j.current_epoch}/${j.epochs}`),
        h("td", { "data-testid": "job-best" }, bestText(j)),
        h("td", {}, when(j.created_at)))));
      if (!items.length) body.replaceChildren(h("tr", {}, h("td", { colspan: 6, class: "muted" }, "No jobs yet.")));
    }
    filter.addEventListener("change", refresh);
    await refresh();
    const timer = setInterval(() => refresh().catch(() => {}), 3000);
    signal.addEventListener("abort", () => clearInterval(timer));
  }

  async function jobView(jobId) {
    const signal = page.signal;
    let job = await getJson(`/v1/jobs/${encodeURIComponent(jobId)}`);
    const rows = new Map(); // epoch -> row (a resumed attempt may rewrite an epoch)
    const transitions = [];
    const regression = job.spec.task === "regression";
    const status = h("span"), progress = h("span"), facts = h("dl", { class: "facts" });
    const lossSvg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
    const metricSvg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
    lossSvg.setAttribute("data-testid", "loss-chart");
    metricSvg.setAttribute("data-testid", "metric-chart");
    const latest = h("tbody"), transBody = h("tbody", { "data-testid": "transitions" });
    const errorBox = h("p", { class: "error", "data-testid": "job-error" });
    const evaluation = h("section", { "data-testid": "evaluation" });
    let shownReport = null; // the report is drawn once, not on every repaint
    const cancel = h("button", { class: "danger", type: "button", "data-testid": "cancel", on: { click: async () => {
      if (!confirm(`Cancel job ${job.name}?`)) return;
      cancel.disabled = true;
      try { job = await getJson(`/v1/jobs/${jobId}/cancel`, { method: "POST" }); paint(); }
      catch (err) { errorBox.textContent = err.message; cancel.disabled = false; }
    } } }, "Cancel");
    const download = h("button", { class: "primary", type: "button", "data-testid": "download", on: { click: () => downloadModel("model") } }, "Download model");
    const downloadOnnx = h("button", { class: "primary", type: "button", "data-testid": "download-onnx", on: { click: () => downloadModel("onnx") } }, "Download ONNX");

    async function downloadModel(kind) {
      try {
        const response = await api(`/v1/jobs/${jobId}/artifacts/${kind}`);
        const match = /filename="?([^";]+)"?/.exec(response.headers.get("content-disposition") || "");
        const link = h("a", { href: URL.createObjectURL(await response.blob()), download: match ? match[1] : `${jobId}-model` });
        document.body.append(link); link.click(); link.remove();
      } catch (err) { errorBox.textContent = err.message; }
    }

    function paint() {
      const sorted = [...rows.values()].sort((a, b) => a.epoch - b.epoch);
      status.replaceChildren(badge(job.status));
      const steps = stepsOf(job);
      progress.replaceChildren(h("progress", { max: job.epochs, value: job.current_epoch + (steps ? steps[0] / steps[1] : 0) }),
        ` epoch ${job.current_epoch}/${job.epochs}`, h("span", { "data-testid": "steps" }, steps ? ` · epoch ${job.current_epoch + 1}: step ${steps[0]}/${steps[1]}` : ""));
      cancel.hidden = TERMINAL.has(job.status);
      download.hidden = job.status !== "succeeded";
      downloadOnnx.hidden = !(job.result && job.result.export);
      errorBox.textContent = job.error || "";
      const report = (job.result || {}).evaluation || null;
      if (report !== shownReport) { evaluation.replaceChildren(...EpochalReport.render(report)); shownReport = report; }
      facts.replaceChildren(
        h("dt", {}, "id"), h("dd", {}, job.id), h("dt", {}, "framework"), h("dd", {}, job.framework),
        h("dt", {}, "attempt"), h("dd", {}, job.attempt), h("dt", {}, "stop reason"), h("dd", {}, job.stop_reason || "–"),
        h("dt", {}, "best"), h("dd", { "data-testid": "best" }, bestText(job)),
        h("dt", {}, "priority"), h("dd", {}, job.priority ?? "–"),
        ...(job.queue ? [h("dt", {}, "queue"), h("dd", { "data-testid": "queue" },
          `#${job.queue.position ?? "–"}, ${EpochalQueue.eta(job.queue.estimated_start)}: ${job.queue.reason}`)] : []),
        ...Object.entries(job.result || {}).filter(([k]) => k !== "evaluation").flatMap(([k, v]) => flat(v, k))
          .flatMap(([k, v]) => [h("dt", {}, k), h("dd", { "data-result": k }, shown(v))]));
      const series = (key, name, color) => ({ name, color, points: sorted.map((r) => [r.epoch, r[key]]).filter((p) => p[1] !== null) });
      EpochalChart.draw(lossSvg, { title: "loss", bestX: job.best_epoch, series: [series("train_loss", "train", "#2563eb"), series("val_loss", "validation", "#f97316")] });
      const metric = regression ? "mae" : "accuracy";
      EpochalChart.draw(metricSvg, { title: metric, bestX: job.best_epoch, series: [series(`train_${metric}`, "train", "#2563eb"), series(`val_${metric}`, "validation", "#f97316")] });
      const last = sorted[sorted.length - 1];
      latest.replaceChildren(...(last ? ["epoch", "train_loss", "val_loss", `train_${metric}`, `val_${metric}`, "learning_rate", "epoch_seconds", "samples_per_second"]
        .map((k) => h("tr", {}, h("th", {}, k), h("td", { "data-metric": k }, k === "epoch" ? last.epoch : num(last[k])))) : []));
      transBody.replaceChildren(...transitions.map((t) => h("tr", {}, h("td", {}, when(t.at)), h("td", {}, `${t.from_status || "–"} → ${t.to_status}`), h("td", {}, t.reason), h("td", {}, t.attempt))));
    }

    show(h("div", { class: "toolbar" }, h("h1", {}, job.name), status, progress, cancel, download, downloadOnnx),
      errorBox,
      h("div", { class: "charts" }, h("div", { class: "card" }, lossSvg), h("div", { class: "card" }, metricSvg)),
      h("div", { class: "charts" },
        h("div", {}, h("h2", {}, "Latest epoch"), h("table", {}, latest)),
        h("div", {}, h("h2", {}, "Job"), facts)),
      evaluation,
      h("h2", {}, "Transitions"),
      h("table", {}, h("thead", {}, h("tr", {}, ["At", "Change", "Reason", "Attempt"].map((c) => h("th", {}, c)))), transBody),
      h("h2", {}, "Spec"), h("pre", { "data-testid": "spec" }, JSON.stringify(job.spec, null, 2)));
    paint();

    let refreshing = null; // the job row (best epoch, attempt) is re-read at most once a second
    const refresh = () => {
      refreshing = refreshing || setTimeout(async () => {
        refreshing = null;
        try {
          const fresh = await getJson(`/v1/jobs/${encodeURIComponent(jobId)}`);
          // The stream is newer than this read for what it carries: keep its status and epoch.
          job = { ...fresh, status: job.status, current_epoch: Math.max(fresh.current_epoch, job.current_epoch) };
          paint();
        } catch (_) {}
      }, 1000);
    };
    // Between events a queued job's place and the epoch in progress (job.step_progress) move: re-read.
    const stepTimer = setInterval(() => { if (!TERMINAL.has(job.status)) refresh(); }, 2000);
    signal.addEventListener("abort", () => { clearTimeout(refreshing); clearInterval(stepTimer); });
    await streamEvents(jobId, (type, data) => {
      if (type === "epoch") {
        rows.set(data.epoch, data);
        job.current_epoch = Math.max(job.current_epoch, data.epoch);
      } else if (type === "transition") {
        transitions.push(data);
        job.status = data.to_status;
        job.attempt = data.attempt;
      }
      paint();
      refresh();
    }, signal);
    clearTimeout(refreshing);
    clearInterval(stepTimer);
    if (!signal.aborted) { job = await getJson(`/v1/jobs/${encodeURIComponent(jobId)}`); paint(); }
  }

  async function submitView() {
    const defaults = await (await fetch("/ui/spec-defaults.json", { signal: page.signal })).json();
    const editor = h("textarea", { "data-testid": "spec-editor", spellcheck: "false" }, JSON.stringify(defaults, null, 2));
    const error = h("p", { class: "error", "data-testid": "submit-error" });
    const button = h("button", { class: "primary", type: "button", "data-testid": "submit", on: { click: async () => {
      error.textContent = "";
      let spec;
      try { spec = JSON.parse(editor.value); } catch (err) { error.textContent = `not JSON: ${err.message}`; return; }
      try {
        const job = await getJson("/v1/jobs", { method: "POST", body: JSON.stringify(spec), headers: { "Content-Type": "application/json" } });
        location.hash = `#/jobs/${job.id}`;
      } catch (err) { error.textContent = err.message; }
    } } }, "Submit");
    show(h("div", { class: "toolbar" }, h("h1", {}, "Submit a job"), button),
      h("p", { class: "muted" }, "Every field with its default; see /docs for bounds and meanings."), error, editor);
  }

  // ---------- routing ----------
  async function render() {
    page.abort();
    page = new AbortController();
    const loggedIn = Boolean(sessionStorage.getItem(KEY));
    document.getElementById("logout").hidden = !loggedIn;
    if (!loggedIn) return loginView();
    const route = location.hash.replace(/^#/, "") || "/";
    try {
      const match = route.match(/^\/jobs\/([A-Za-z0-9-]+)$/);
      const sweep = route.match(/^\/sweeps\/([A-Za-z0-9-]+)$/);
      const ui = { h, show, getJson, badge, num, when, signal: page.signal };
      if (match) await jobView(match[1]);
      else if (sweep) await EpochalSweeps.sweepView(ui, sweep[1]);
      else if (route === "/sweeps") await EpochalSweeps.listView(ui);
      else if (route === "/queue") await EpochalQueue.queueView(ui);
      else if (route === "/submit") await submitView();
      else await jobsView();
    } catch (err) {
      if (!page.signal.aborted && !(err instanceof DOMException)) show(h("p", { class: "error" }, err.message));
    }
  }

  document.getElementById("logout").addEventListener("click", () => { sessionStorage.removeItem(KEY); render(); });
  window.addEventListener("hashchange", render);
  render();
})();
