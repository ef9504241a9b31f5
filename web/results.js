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
  clearResults("No matches: the search failed (the reason is shown above).");
}

// A new photo, or one that could not be read: nothing of an earlier search stays on screen
// (its status, matches, summary, the rows and rings drawn for them).
export function clearResults(summary) {
  $("results").replaceChildren();
  $("results-summary").textContent = summary;
  delete $("results-summary").dataset.movedBytes;
  clearBlockMarks();
  if (state.map) drawPlot(null);
  $("paper-plot").replaceChildren();
}

export function renderResults(ranked) {
  const side = ranked.thumb_side;
  const n = ranked.results.length;
  $("results").replaceChildren(...ranked.results.map((m, rank) => {
    const li = document.createElement("li");
    const canvas = document.createElement("canvas");
    canvas.width = side;
    canvas.height = side;
    canvas.setAttribute("role", "img");
    // Its name says its place and class ("Match 2 of 8: Sneaker"), not the class alone.
    canvas.setAttribute("aria-label", `Match ${rank + 1} of ${n}: ${m.class_name}`);
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
