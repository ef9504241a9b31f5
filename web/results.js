// The matches as the wasm client ranked them (block download and PIR): grey thumbnails drawn
// from bytes already downloaded, so showing them fetches nothing.
import { $, showError, state, status } from "./page.js";
import { clearBlockMarks } from "./map.js";
import { drawPlot } from "./plot.js";

// A search that failed: its reason shown, and nothing of an earlier search left on screen as
// if it were this one's (matches, their summary, the rows and rings drawn for them).
export function searchFailed(message) {
  showError(message);
  status("Search failed.");
  $("results").replaceChildren();
  $("results-summary").textContent = "No matches: the search failed (the reason is shown above).";
  clearBlockMarks();
  if (state.map) drawPlot(null);
  $("paper-plot").replaceChildren();
}

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
