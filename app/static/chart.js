// A small SVG line chart for per-epoch curves (no library: the page loads nothing from elsewhere).
"use strict";

window.EpochalChart = (function () {
  const NS = "http://www.w3.org/2000/svg";
  const W = 560, H = 260, M = { top: 28, right: 16, bottom: 34, left: 52 };

  function el(tag, attrs, text) {
    const node = document.createElementNS(NS, tag);
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, String(v));
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function niceTicks(lo, hi, count) {
    const span = hi - lo || 1;
    const step0 = span / count;
    const mag = Math.pow(10, Math.floor(Math.log10(step0)));
    const step = [1, 2, 2.5, 5, 10].map((m) => m * mag).find((s) => span / s <= count) || mag * 10;
    const ticks = [];
    for (let v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) ticks.push(v);
    return ticks;
  }

  function fmt(v) {
    const a = Math.abs(v);
    if (a !== 0 && (a < 0.01 || a >= 1e4)) return v.toExponential(1);
    return String(Math.round(v * 1000) / 1000);
  }

  // series: [{name, color, points: [[epoch, value], ...], scatter?}]; bestX: epoch to mark or
  // null. xRange [lo, hi] and xFloat (ticks between integers) serve axes other than epochs.
  function draw(svg, { title, series, bestX, xLabel, xRange, xFloat, legend = true }) {
    while (svg.firstChild) svg.removeChild(svg.firstChild);
    svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
    svg.setAttribute("class", "chart");
    const all = series.flatMap((s) => s.points.filter((p) => Number.isFinite(p[1])));
    svg.appendChild(el("text", { x: M.left, y: 16, "font-weight": 600 }, title));
    if (all.length === 0) {
      svg.appendChild(el("text", { x: W / 2, y: H / 2, "text-anchor": "middle" }, "waiting for the first epoch…"));
      return;
    }
    const xs = all.map((p) => p[0]), ys = all.map((p) => p[1]);
    let [x0, x1] = xRange || [1, Math.max(2, ...xs)];
    if (x0 === x1) { x0 -= 1; x1 += 1; }
    let y0 = Math.min(...ys), y1 = Math.max(...ys);
    const pad = (y1 - y0) * 0.08 || Math.abs(y1) * 0.1 || 1;
    y0 -= pad; y1 += pad;
    const px = (x) => M.left + ((x - x0) / (x1 - x0)) * (W - M.left - M.right);
    const py = (y) => H - M.bottom - ((y - y0) / (y1 - y0)) * (H - M.top - M.bottom);

    for (const t of niceTicks(y0, y1, 5)) {
      svg.appendChild(el("line", { class: "grid", x1: M.left, x2: W - M.right, y1: py(t), y2: py(t) }));
      svg.appendChild(el("text", { x: M.left - 6, y: py(t) + 4, "text-anchor": "end" }, fmt(t)));
    }
    for (const t of niceTicks(x0, x1, 8).filter((v) => xFloat || Number.isInteger(v))) {
      svg.appendChild(el("text", { x: px(t), y: H - M.bottom + 16, "text-anchor": "middle" }, xFloat ? fmt(t) : String(t)));
    }
    svg.appendChild(el("line", { class: "axis", x1: M.left, x2: M.left, y1: M.top, y2: H - M.bottom }));
    svg.appendChild(el("line", { class: "axis", x1: M.left, x2: W - M.right, y1: H - M.bottom, y2: H - M.bottom }));
    svg.appendChild(el("text", { x: W - M.right, y: H - 4, "text-anchor": "end" }, xLabel || "epoch"));

    if (bestX) {
      svg.appendChild(el("line", { class: "best", "data-testid": "best-marker", x1: px(bestX), x2: px(bestX), y1: M.top, y2: H - M.bottom }));
      const right = px(bestX) > W - M.right - 50; // keep the label inside the plot
      svg.appendChild(el("text", { x: px(bestX) + (right ? -4 : 4), y: M.top + 10, fill: "#16a34a", "text-anchor": right ? "end" : "start" }, `best ${bestX}`));
    }
    let legendX = W - M.right;
    for (const s of series.slice().reverse()) {
      const pts = s.points.filter((p) => Number.isFinite(p[1]));
      const d = pts.map((p, i) => `${i ? "L" : "M"}${px(p[0]).toFixed(1)},${py(p[1]).toFixed(1)}`).join("");
      svg.appendChild(el("path", { d, fill: "none", stroke: s.scatter ? "none" : s.color, "stroke-width": 2, "data-series": s.name, "data-points": pts.length }));
      if (pts.length <= 60 || s.scatter) {
        for (const p of pts) svg.appendChild(el("circle", { cx: px(p[0]), cy: py(p[1]), r: 2.5, fill: s.color }));
      }
      if (!legend) continue;
      const label = el("text", { x: legendX, y: 16, "text-anchor": "end", fill: s.color }, s.name);
      svg.appendChild(label);
      legendX -= 8 + 7 * s.name.length;
    }
  }

  return { draw };
})();
