// The block map: the blocks of the plan's level drawn flat, each at its centroid's place on the
// level's two main directions (computed in the wasm client from public data:
// publish::map), dot size by block size. After a block search: rings on the blocks
// downloaded — the release, all the server saw — and a filled diamond on the photo's own block,
// which only this page knows (the wasm client hands it out with the ranking, after every
// request of the search was made). Nothing here sends anything.
import { $, protocol, state } from "./page.js";
import { COLOURS, el } from "./plot.js";
import { fetchCentroids } from "./net.js";

const cache = new Map(); // "version/level" → {points, sizes}
const loading = new Set(); // "version/level" whose centroids are being fetched
let marks = null; // {version, level, released, own} of the last block search

function levelMap(level) {
  const key = `${state.partition.version}/${level}`;
  if (!cache.has(key)) cache.set(key, JSON.parse(state.client.block_map(level)));
  return cache.get(key);
}

// The last block search's marks (its level, released blocks and own block), drawn at once.
export function markBlocks(ranked) {
  marks = { version: state.partition.version, level: ranked.level, released: ranked.released, own: ranked.own_block };
  drawBlockMap(state.currentPlan);
}

// A new photo: the last search's marks are not about it.
export function clearBlockMarks() {
  marks = null;
  if (state.currentPlan) drawBlockMap(state.currentPlan);
}

// Draw the map for a block plan (hidden for the whole gallery, other protocols, or no plan).
export function drawBlockMap(plan) {
  const fig = $("map-figure");
  const show = !!plan && !plan.whole && protocol() === "blocks" && !!state.partition;
  fig.hidden = !show;
  if (!show) return;
  // The level's centroids (public: the plan's level, fetched once per version, checked by the
  // wasm client) are needed to draw it; the map is drawn when they arrive.
  if (state.client.centroids_request(plan.level)) {
    $("block-map").replaceChildren();
    $("map-note").textContent = "Loading the map of the gallery's blocks…";
    const key = `${state.partition.version}/${plan.level}`;
    if (!loading.has(key)) {
      loading.add(key);
      fetchCentroids(state.client, plan.level)
        .then(() => drawBlockMap(state.currentPlan))
        .catch((e) => { $("map-note").textContent = `The map cannot be drawn: ${e.message || e}`; })
        .finally(() => loading.delete(key));
    }
    return;
  }
  let map;
  try { map = levelMap(plan.level); } catch (e) {
    $("block-map").replaceChildren();
    $("map-note").textContent = `The map cannot be drawn: ${e.message || e}`;
    return;
  }
  const big = Math.max(1, ...map.sizes);
  const radius = (b) => 0.015 + 0.055 * Math.sqrt(map.sizes[b] / big);
  const at = (b) => [map.points[b][0], -map.points[b][1]];
  const nodes = map.points.map((_, b) => {
    const [x, y] = at(b);
    return el("circle", { cx: x, cy: y, r: radius(b), fill: COLOURS[0], "fill-opacity": 0.45, class: "block", "data-block": b },
      `Block ${b}: ${map.sizes[b]} images`);
  });
  const m = marks && marks.version === state.partition.version && marks.level === plan.level ? marks : null;
  if (m) {
    for (const b of m.released) {
      const [x, y] = at(b);
      nodes.push(el("circle", { cx: x, cy: y, r: radius(b) + 0.03, fill: "none", stroke: "#111", "stroke-width": 0.014,
        class: "released", "data-block": b }, `Block ${b}: downloaded (the server saw this)`));
    }
    if (m.own !== null && m.own !== undefined) {
      const [x, y] = at(m.own);
      const s = 0.055;
      nodes.push(el("polygon", { points: `${x},${y - s} ${x + s},${y} ${x},${y + s} ${x - s},${y}`, fill: "#ffd400",
        stroke: "#111", "stroke-width": 0.01, class: "own", "data-block": m.own },
        `Block ${m.own}: your photo's own block (only this page knows which)`));
    }
  }
  $("block-map").replaceChildren(...nodes);
  const n = plan.blocks;
  $("map-note").textContent = m && m.own !== null && m.own !== undefined
    ? `Rings: ${m.released.length === 1 ? "the block" : `the ${m.released.length} blocks`} this search downloaded — all the server saw. Diamond: your photo's own ` +
      `block, which only this page knows; it was ${m.released.includes(m.own) ? "among them" : "not among them, so the matches come from other blocks"}.`
    : m ? `Rings: ${m.released.length === 1 ? "the block" : `the ${m.released.length} blocks`} this search downloaded — all of them, so the server learned nothing.`
    : `This plan downloads ${plan.size} of these ${n} block${n === 1 ? "" : "s"}. After a search, rings mark the ones downloaded and a diamond your photo's own block.`;
}
