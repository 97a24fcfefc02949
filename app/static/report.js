// The evaluation report of a succeeded job: confusion-matrix heatmap, per-class table, top
// confusions (classification) or the error figures (regression). Plain DOM, no library.
"use strict";

window.EpochalReport = (function () {
  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, String(v));
    for (const c of children.flat()) if (c !== null && c !== undefined) node.append(c instanceof Node ? c : String(c));
    return node;
  }
  const num = (v) => (v === null || v === undefined ? "–" : Number(v).toFixed(3));

  // Rows are true classes, columns predictions; a cell's shade is its share of the true class
  // (blue on the diagonal, red off it). Colours go through the CSSOM: the page's CSP forbids
  // inline style attributes.
  // A class index to its label: the report's class names (Fashion-MNIST's), else the index.
  const labeller = (report) => (i) => (report.classes && report.classes[i] !== undefined ? report.classes[i] : i);

  function heatmap(matrix, label = (i) => i) {
    const k = matrix.length;
    const grid = el("div", { class: "heatmap", "data-testid": "heatmap", role: "table" });
    grid.style.gridTemplateColumns = `auto repeat(${k}, minmax(1.6rem, 2.4rem))`;
    grid.append(el("div", { class: "corner" }, "true \\ pred"));
    for (let p = 0; p < k; p++) grid.append(el("div", { class: "label", "data-testid": "heatmap-label" }, label(p)));
    matrix.forEach((row, t) => {
      const support = row.reduce((a, b) => a + b, 0) || 1;
      grid.append(el("div", { class: "label" }, label(t)));
      row.forEach((count, p) => {
        const cell = el("div", { class: "cell", "data-testid": "heatmap-cell", title: `true ${label(t)}, predicted ${label(p)}: ${count}` }, count || "");
        const share = count / support;
        const rgb = t === p ? "37, 99, 235" : "220, 38, 38";
        cell.style.backgroundColor = `rgba(${rgb}, ${count ? 0.08 + 0.92 * share : 0})`;
        if (share > 0.55) cell.style.color = "#fff";
        grid.append(cell);
      });
    });
    return grid;
  }

  function table(headers, rows, testid) {
    return el("table", { "data-testid": testid },
      el("thead", {}, el("tr", {}, headers.map((c) => el("th", {}, c)))),
      el("tbody", {}, rows.map((r) => el("tr", {}, r.map((c) => el("td", {}, c))))));
  }

  function classification(report) {
    const label = labeller(report);
    const perClass = table(["class", "precision", "recall", "F1", "support"],
      report.per_class.map((r) => [label(r.class), num(r.precision), num(r.recall), num(r.f1), r.support]), "per-class");
    const confusions = table(["true", "predicted as", "count"],
      report.top_confusions.map((c) => [label(c.true), label(c.predicted), c.count]), "top-confusions");
    return [
      el("p", { class: "muted" }, `on ${report.split} (${report.samples} samples): accuracy ${num(report.accuracy)}, macro F1 ${num(report.macro_f1)}`),
      el("div", { class: "charts" },
        el("div", { class: "card" }, el("h3", {}, "Confusion matrix"), heatmap(report.confusion_matrix, label)),
        el("div", {}, el("h3", {}, "Per class"), perClass, el("h3", {}, "Most frequent confusions"), confusions)),
    ];
  }

  function regression(report) {
    const rows = [["MAE", num(report.mae)], ["RMSE", num(report.rmse)], ["R²", num(report.r2)]];
    for (const [q, v] of Object.entries(report.residual_quantiles)) rows.push([`residual p${q}`, num(v)]);
    return [el("p", { class: "muted" }, `on ${report.split} (${report.samples} samples)`), table(["metric", "value"], rows, "regression-report")];
  }

  // Nodes for the report, or none when the job has none (not finished, or older than it).
  function render(report) {
    if (!report) return [];
    return [el("h2", {}, "Evaluation"), ...(report.task === "regression" ? regression(report) : classification(report))];
  }

  return { render, heatmap };
})();
