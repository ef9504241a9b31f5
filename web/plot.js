// The page's plots (SVG): the plan curve (predicted fidelity against data downloaded), the
// anchor frame drawn flat with the rows a frame search sent, Algorithm 1's aligned embedding,
// and the frame plot's legend (and the SVG helper the block map shares).
import { $, state } from "./page.js";
import { fmtKiB, kib, pct } from "./format.js";

// Tableau 10: distinguishable, and readable on white.
export const COLOURS = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f",
                 "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#5b5b5b"];

export function renderLegend() {
  $("legend").replaceChildren(...state.config.class_names.map((name, c) => {
    const li = document.createElement("li");
    const dot = document.createElement("span");
    dot.style.background = COLOURS[c % COLOURS.length];
    li.append(dot, name);
    return li;
  }));
}

// ---- plot: predicted fidelity against KiB downloaded (the public Pareto curve) ---------------

const PLAN_DESC = "Each dot is a plan (how many blocks of which size), placed at the most data it can download; the line joins " +
  "the best ones; the ringed dot is the plan this search uses. More data buys a better chance of the exact answer at the same " +
  "privacy; the whole gallery (top right, where offered) is exact and costs no privacy.";
const NO_PLAN_DESC = "Each dot is a plan (how many blocks of which size), placed at the most data it can download; the line " +
  "joins the best ones. No plan fits these settings, so none is ringed.";
const NO_PIR_DESC = (eps) => "No private-retrieval plan fits this data budget, so nothing is ringed; the dots are " +
  `block-download plans at privacy loss ε = ${eps}, for comparison (how many blocks of which size), the line joining the best ones.`;
const PIR_DESC = (eps) => "The ringed red square is this search: private information retrieval, at its bytes per search (up and down; " +
  "the public files fetched once are not counted), exact, and it spends no privacy (ε = 0). The dots are block-download plans " +
  `at privacy loss ε = ${eps}, for comparison only (how many blocks of which size); the line joins the best ones.`;

// A plan's place on the plot: the most it can download (a ceiling), or its exact bytes.
const bytesOf = (p) => p.max_bytes ?? p.expected_bytes;

export function drawPlanPlot(curve, chosen, pir, pirChosen = false, eps = null) {
  const svg = $("plan-plot");
  // The caption says what this plot shows, and at which ε (PIR itself has none).
  const pirMode = Boolean(pir) || pirChosen;
  $("plan-plot-title").textContent = pirMode
    ? "Predicted share of the exact 8 nearest matches against data per search."
    : `Predicted share of the exact 8 nearest matches against the most data downloaded, at privacy loss ε = ${eps}.`;
  $("plan-plot-desc").textContent = pir ? PIR_DESC(eps) : pirChosen ? NO_PIR_DESC(eps) : chosen ? PLAN_DESC : NO_PLAN_DESC;
  const W = 400, H = 260, L = 48, R = 12, T = 12, B = 40;
  const pts = [...curve];
  // PIR's point: its bytes per search (up and down), at ε = 0.
  const pirPoint = pir ? { max_bytes: pir.up_bytes + pir.down_bytes, predicted_fidelity: pir.predicted_fidelity } : null;
  if (chosen && !pts.some((p) => p.level === chosen.level && p.size === chosen.size)) pts.push(chosen);
  const nodes = [];
  if (!pts.length && !pirPoint) { svg.replaceChildren(); return; }
  const xs = [...pts, ...(pirPoint ? [pirPoint] : [])].map((p) => Math.max(1, kib(bytesOf(p))));
  let lo = Math.log10(Math.min(...xs)), hi = Math.log10(Math.max(...xs));
  if (hi - lo < 0.5) { lo -= 0.25; hi += 0.25; }
  const x = (bytes) => L + ((Math.log10(Math.max(1, kib(bytes))) - lo) / (hi - lo)) * (W - L - R);
  const y = (f) => T + (1 - f) * (H - T - B);
  // Axes, ticks and labels.
  nodes.push(el("line", { x1: L, y1: H - B, x2: W - R, y2: H - B, stroke: "#444" }));
  nodes.push(el("line", { x1: L, y1: T, x2: L, y2: H - B, stroke: "#444" }));
  for (const f of [0, 0.25, 0.5, 0.75, 1]) {
    nodes.push(el("line", { x1: L - 4, y1: y(f), x2: W - R, y2: y(f), stroke: "#ddd" }));
    const t = el("text", { x: L - 6, y: y(f) + 4, "font-size": 10, "text-anchor": "end", fill: "#333" });
    t.textContent = `${Math.round(100 * f)}%`;
    nodes.push(t);
  }
  for (let e = Math.ceil(lo); e <= Math.floor(hi); e++) {
    const b = 1024 * 10 ** e;
    nodes.push(el("line", { x1: x(b), y1: H - B, x2: x(b), y2: H - B + 4, stroke: "#444" }));
    const t = el("text", { x: x(b), y: H - B + 15, "font-size": 10, "text-anchor": "middle", fill: "#333" });
    t.textContent = fmtKiB(b);
    nodes.push(t);
  }
  const xl = el("text", { x: (L + W - R) / 2, y: H - 6, "font-size": 11, "text-anchor": "middle", fill: "#222" });
  xl.textContent = "most data per search (log scale)";
  const yl = el("text", { x: 12, y: (T + H - B) / 2, "font-size": 11, "text-anchor": "middle", fill: "#222",
    transform: `rotate(-90 12 ${(T + H - B) / 2})` });
  yl.textContent = "predicted share of exact top 8";
  nodes.push(xl, yl);
  if (curve.length) {
    nodes.push(el("polyline", { points: curve.map((p) => `${x(bytesOf(p))},${y(p.predicted_fidelity)}`).join(" "),
      fill: "none", stroke: COLOURS[0], "stroke-width": 1.5 }));
  }
  for (const p of pts) {
    const label = p.whole ? "the whole gallery" : `${p.size} of ${p.blocks} blocks`;
    nodes.push(el("circle", { cx: x(bytesOf(p)), cy: y(p.predicted_fidelity), r: 3, fill: p.whole ? COLOURS[4] : COLOURS[0] },
      `${label}: at most ${fmtKiB(bytesOf(p))}, predicted ${pct(p.predicted_fidelity)}%, ε = ${p.epsilon}`));
  }
  if (pirPoint) {
    const px = x(bytesOf(pirPoint)), py = y(pirPoint.predicted_fidelity);
    nodes.push(el("rect", { x: px - 5, y: py - 5, width: 10, height: 10, fill: COLOURS[2], class: "pir-point" },
      `Private information retrieval: ${fmtKiB(bytesOf(pirPoint))} per search, predicted ${pct(pirPoint.predicted_fidelity)}%, ε = 0`));
    nodes.push(el("circle", { cx: px, cy: py, r: 9, fill: "none", stroke: "#111", "stroke-width": 2, class: "chosen" },
      "The plan this search uses"));
  }
  if (chosen) {
    nodes.push(el("circle", { cx: x(bytesOf(chosen)), cy: y(chosen.predicted_fidelity), r: 8, fill: "none",
      stroke: "#111", "stroke-width": 2, class: "chosen" }, "The plan this search uses"));
  }
  svg.replaceChildren(...nodes);
}

// ---- plot: the 10-d frame drawn flat, each class at a corner of a regular polygon -------------

function project(row) {
  const c = row.length;
  let x = 0, y = 0;
  row.forEach((v, i) => {
    const a = Math.PI / 2 - (2 * Math.PI * i) / c;
    x += v * Math.cos(a);
    y += v * Math.sin(a);
  });
  const clamp = (v) => Math.max(-1.2, Math.min(1.2, v));
  return [clamp(x), clamp(-y)];
}

const SVG = "http://www.w3.org/2000/svg";
export function el(name, attrs, title) {
  const e = document.createElementNS(SVG, name);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  if (title) {
    const t = document.createElementNS(SVG, "title");
    t.textContent = title;
    e.append(t);
  }
  return e;
}

// The real row: a filled star at (x, y), of this outer radius (plot units).
const STAR_RADIUS = 0.08;
function star(x, y) {
  const pts = Array.from({ length: 10 }, (_, i) => {
    const a = -Math.PI / 2 + (Math.PI * i) / 5;
    const rad = i % 2 ? 0.035 : STAR_RADIUS;
    return `${x + rad * Math.cos(a)},${y + rad * Math.sin(a)}`;
  }).join(" ");
  return el("polygon", { points: pts, fill: "#ffd400", stroke: "#111", "stroke-width": 0.01 }, "Your real row");
}

export function drawPlot(picked) {
  const svg = $("plot");
  const nodes = [];
  state.map.rows.forEach((r, i) => {
    const [x, y] = project(r);
    nodes.push(el("circle", { cx: x, cy: y, r: 0.012, fill: COLOURS[state.map.labels[i] % 10], "fill-opacity": 0.3 }));
  });
  const c = state.config.frame_dim;
  for (let i = 0; i < c; i++) {
    const v = Array.from({ length: c }, (_, j) => (j === i ? 1 : 0));
    const [x, y] = project(v);
    const name = state.config.class_names[i] ?? `class ${i}`;
    nodes.push(el("circle", { cx: x, cy: y, r: 0.05, fill: COLOURS[i % 10], stroke: "#222", "stroke-width": 0.008 },
      `Anchors of class ${name}`));
    nodes.push(el("text", { x: x * 1.14, y: y * 1.14 + 0.025, "font-size": 0.07, "text-anchor": "middle", fill: "#222" }, null));
    nodes[nodes.length - 1].textContent = name;
  }
  if (picked) {
    for (const r of picked.rows) {
      const [x, y] = project(r);
      nodes.push(el("circle", { cx: x, cy: y, r: 0.035, fill: "none", stroke: "#111", "stroke-width": 0.012 }, "A row sent to the server"));
    }
    nodes.push(star(...project(picked.real_row)));
  }
  svg.replaceChildren(...nodes);
}

// ---- plot: Algorithm 1's aligned 2-d embedding ----------------------------------------------

const PAPER_DESC = "The ten rows your browser sent (your photo and nine decoys), as the server placed them in its " +
  "2-dimensional embedding after aligning on the public anchors (Kabsch–Umeyama), scaled to fit: rings are the rows, " +
  "the filled star your real one — only this page knows which.";

export function drawPaperPlot(picked) {
  // The caption says what the plot shows: when every row landed within the star's radius of
  // the others at this scale (the noise swamps the release), the rings hide under the star,
  // and the caption says so instead of promising rings.
  const scale = Math.max(1e-9, ...picked.rows.flat().map((v) => Math.abs(v)));
  const spread = Math.max(0, ...picked.rows.flatMap((a) => picked.rows.map((b) => Math.hypot(a[0] - b[0], a[1] - b[1]))));
  const together = spread / scale < STAR_RADIUS;
  $("paper-plot-desc").textContent = together
    ? "All ten rows your browser sent (your photo and nine decoys) landed on the same point of the server's embedding, " +
      "as far as this plot can show, after aligning on the public anchors: their rings are hidden under the star of your " +
      "real row. The noise swamps the release, so where a row lands — and the matches it gets — does not depend on the photo."
    : PAPER_DESC;
  $("paper-figure").dataset.together = String(together);
  const at = (r) => [r[0] / scale, -r[1] / scale];
  const nodes = [el("line", { x1: -1.2, y1: 0, x2: 1.2, y2: 0, stroke: "#ccc", "stroke-width": 0.006 }),
    el("line", { x1: 0, y1: -1.2, x2: 0, y2: 1.2, stroke: "#ccc", "stroke-width": 0.006 })];
  for (const r of picked.rows) {
    const [x, y] = at(r);
    nodes.push(el("circle", { cx: x, cy: y, r: 0.035, fill: "none", stroke: "#111", "stroke-width": 0.012 }, "A row sent to the server"));
  }
  nodes.push(star(...at(picked.real_row)));
  $("paper-plot").replaceChildren(...nodes);
}
