// The dashboard's queue view: GET /v1/queue as the scheduler sees it, your queued jobs by
// position with why each waits and when it may start, other keys' as counts. Plain JS, like
// app.js, which hands in its helpers; eta() is app.js's too (a queued job's page).
"use strict";

window.EpochalQueue = (function () {
  // "in ~3 min (14:02:10)": how far off, then the clock time; "start unknown" without one.
  function eta(iso) {
    if (!iso) return "start unknown";
    const seconds = Math.max(0, (new Date(iso) - Date.now()) / 1000);
    const away = seconds < 90 ? `${Math.round(seconds)} s` : seconds < 5400 ? `${Math.round(seconds / 60)} min` : `${(seconds / 3600).toFixed(1)} h`;
    return `starts in ~${away} (${new Date(iso).toLocaleTimeString()})`;
  }

  async function queueView(ui) {
    const { h, show, getJson, when, signal } = ui;
    const body = h("tbody", { "data-testid": "queue-jobs" }), others = h("tbody", { "data-testid": "queue-others" });
    const summary = h("span", { class: "muted", "data-testid": "queue-summary" });
    show(h("div", { class: "toolbar" }, h("h1", {}, "Queue"), summary),
      h("table", {}, h("thead", {}, h("tr", {}, ["#", "Job", "Priority", "GPUs", "Waits because", "Estimated start", "Submitted"].map((c) => h("th", {}, c)))), body),
      h("h2", {}, "Other keys' queued jobs"),
      h("table", {}, h("thead", {}, h("tr", {}, ["Key", "Priority", "Jobs"].map((c) => h("th", {}, c)))), others));

    async function refresh() {
      const queue = await getJson("/v1/queue?limit=200");
      summary.textContent = `${queue.queued} queued in all${queue.truncated ? "; the first 200 of yours shown" : ""}`;
      body.replaceChildren(...queue.jobs.map((j) => h("tr", { "data-queued": j.id },
        h("td", { "data-testid": "queue-position" }, j.position ?? "–"),
        h("td", {}, h("a", { href: `#/jobs/${j.id}` }, j.name), h("div", { class: "muted" }, j.id.slice(0, 8))),
        h("td", {}, j.priority), h("td", {}, j.gpus),
        h("td", { "data-testid": "queue-reason" }, j.reason),
        h("td", { "data-testid": "queue-eta" }, eta(j.estimated_start)),
        h("td", {}, when(j.created_at)))));
      if (!queue.jobs.length) body.replaceChildren(h("tr", {}, h("td", { colspan: 7, class: "muted" }, "None of your jobs is queued.")));
      others.replaceChildren(...queue.others.map((c) => h("tr", {}, h("td", {}, c.owner_id || "–"), h("td", {}, c.priority), h("td", {}, c.jobs))));
      if (!queue.others.length) others.replaceChildren(h("tr", {}, h("td", { colspan: 3, class: "muted" }, "No other key's job is queued (an admin key lists every job above).")));
    }

    await refresh();
    const timer = setInterval(() => refresh().catch(() => {}), 3000);
    signal.addEventListener("abort", () => clearInterval(timer));
  }

  return { eta, queueView };
})();
