// The matches as the wasm client ranked them (block download and PIR): grey thumbnails drawn
// from bytes already downloaded, so showing them fetches nothing.
import { $, state } from "./page.js";

export function renderResults(ranked) {
  const side = ranked.thumb_side;
  $("results").replaceChildren(...ranked.results.map((m) => {
    const li = document.createElement("li");
    const canvas = document.createElement("canvas");
    canvas.width = side;
    canvas.height = side;
    canvas.setAttribute("role", "img");
    canvas.setAttribute("aria-label", m.class_name);
    const ctx = canvas.getContext("2d");
    const px = ctx.createImageData(side, side);
    m.thumbnail.forEach((v, i) => px.data.set([v, v, v, 255], 4 * i));
    ctx.putImageData(px, 0, 0);
    const cap = document.createElement("div");
    cap.textContent = m.class_name;
    if (m.label === state.image.label) cap.className = "same";
    li.dataset.label = m.label;
    li.dataset.id = m.id;
    li.append(canvas, cap);
    return li;
  }));
}
