// The search page. All privacy-relevant work happens in WebAssembly (`pkg/`, built from
// client-wasm): the model, the block release (which blocks to download, in what order), the
// ranking, and for the frame protocol the placement, the noise and the choice of the real row.
// The page's modules only move bytes between the page, the wasm client and the server.
//
// Block retrieval: everything this page requests after a release is a function of
// the release alone. It fetches exactly the released URLs, all at once, in the order the wasm
// client gave (a fresh random order), by one code path whatever block it is; thumbnails come
// from the blocks; it never retries a block and requests nothing after ranking.
//
// This module is the entry (`<script type="module">`, no bundler): it starts the page and wires
// the controls. The rest, one role a module, none importing another that imports it back:
// page.js (shared state, DOM helpers), api.js (wasm start, the API's JSON GETs), net.js
// (bounded fetches), photo.js, budget.js (ε and the spent budget), protocol.js (the ways to
// search offered), plan.js (the plan view), disclosure.js (what the server learns, in words),
// evaluation.js (what the noisy-numbers searches' results are worth, from results.csv),
// map.js (the block map), plot.js, results.js, format.js, gallery.js (which gallery, where
// the code came from), origin.js (saying so), assets.js (the page's own checked files), pir.js (PIR's
// transport), identity.js (the gallery's key, pinned, and the refusal keyed by it and by the
// gallery's origin), and flows/ with one search flow a protocol (frame.js: the anchor frame and
// Algorithm 1; blocks.js: blocks and the whole gallery; pir.js).
import { Client, delta } from "./pkg/privatemail_client_wasm.js";
import { $, protocol, showError, state, status, timings } from "./page.js";
import { LIMIT_KEY, RECEIPTS_KEY, forgetLastAddition, updateBudget, updateEpsilon } from "./budget.js";
import { getJson, getModel, wasmReady } from "./api.js";
import { loadFromFile, renderSamples } from "./photo.js";
import { drawPlot, renderLegend } from "./plot.js";
import { loadPartition, loadPirDoc, updateProtocol } from "./protocol.js";
import { onFrameSearch, send } from "./flows/frame.js";
import { fetchBlocks, onBlockSearch } from "./flows/blocks.js";
import { onPirSearch, showStopped } from "./flows/pir.js";
import { acceptKey, beforeContact, clearRefusal, gallery, meet } from "./identity.js";
import { loadEvaluation } from "./evaluation.js";
import { showCodeOrigin, useGalleryForm } from "./origin.js";
import { GALLERY, GALLERY_ORIGIN, GALLERY_PROBLEM, galleryUrl, narrowConnections } from "./gallery.js";

const t0 = performance.now();
// Room for every request of a long session: the page reads Resource Timing to tell what came
// from the browser's cache.
performance.setResourceTimingBufferSize?.(100000);

async function start() {
  showCodeOrigin();
  if (!GALLERY) {
    status("The page could not start.");
    showError(GALLERY_PROBLEM);
    return;
  }
  const evaluation = loadEvaluation();
  try {
    // Public reads only, the same for every photo: nothing here waits for the gallery's
    // identity, and no search is sent before it is checked.
    const [, weights, classWeights, configText, anchorsText, mapText, identityText] = await Promise.all([
      wasmReady,
      getModel("pkg/query.bin", "max_model_bytes", false),
      getModel("pkg/classifier.bin", "class_model_bytes", true),
      getJson("/api/v1/config"),
      getJson("/api/v1/anchors"),
      getJson("/api/v1/gallery-map"),
      getJson("/api/v1/identity", 1024),
    ]);
    // The gallery is the page's setting (gallery.js). The configuration is the one the
    // gallery's key signed, or the page goes no further; the key is pinned on first use, and a
    // refusal by the gallery's origin or its key, or a new key, stops every search.
    beforeContact(GALLERY);
    meet(identityText, configText);
    state.config = JSON.parse(configText);
    state.map = JSON.parse(mapText);
    state.client = new Client(
      weights,
      classWeights,
      configText,
      anchorsText,
    );
  } catch (e) {
    status("The page could not start.");
    showError(String(e.message || e));
    return;
  }
  await loadPartition();
  await loadPirDoc();
  // From here on the page connects only to its own origin, the gallery's and the blocks'.
  narrowConnections([GALLERY_ORIGIN, blocksOrigin()]);
  await evaluation;
  $("delta").textContent = delta().toExponential(0);
  renderSamples();
  renderLegend();
  drawPlot(null);
  updateEpsilon();
  updateBudget();
  updateProtocol();
  if (gallery.stop) showStop();
  timings.ready_ms = performance.now() - t0;
  status(`Ready (${Math.round(timings.ready_ms)} ms). Choose a photo to search with.`);
  document.body.dataset.ready = "true";
}

// The origin blocks come from (the partition document's `blocks_url`), or null.
function blocksOrigin() {
  try {
    return state.partition ? new URL(galleryUrl(state.partition.blocks_url)).origin : null;
  } catch {
    return null;
  }
}

// ---- search ----------------------------------------------------------------------------------

// Why nothing is sent to this gallery (the wasm client's words, one text with the CLI's), with
// the one way on: clearing a refusal, or accepting a new key.
function showStop() {
  $("clear-refusal").hidden = gallery.stop.kind !== "refused";
  $("accept-key").hidden = gallery.stop.kind !== "new_key";
  showStopped(gallery.stop.message);
}

async function onSearch() {
  showError("");
  $("warning").hidden = true;
  if (!state.image) return;
  // After a failed check against this gallery (under any name, with its key), no search of
  // any kind is sent (no fallback to a less private protocol) until the person clears the
  // stop; nor after its name presented a new key, until the person accepts it.
  if (gallery.stop) return showStop();
  if (protocol() === "pir") return onPirSearch();
  if (protocol() === "blocks" || protocol() === "whole") return onBlockSearch();
  return onFrameSearch();
}

// ---- wiring ----------------------------------------------------------------------------------

useGalleryForm();
$("file").addEventListener("change", (e) => loadFromFile(e.target.files[0]));
const drop = $("drop");
drop.addEventListener("dragover", (e) => { e.preventDefault(); drop.classList.add("over"); });
drop.addEventListener("dragleave", () => drop.classList.remove("over"));
drop.addEventListener("drop", (e) => {
  e.preventDefault();
  drop.classList.remove("over");
  loadFromFile(e.dataTransfer.files[0]);
});
$("epsilon").addEventListener("input", updateEpsilon);
$("search").addEventListener("click", onSearch);
$("search-anyway").addEventListener("click", () => {
  if (!state.pending) return;
  const p = state.pending;
  state.pending = null;
  if (p.kind === "blocks") { p.started = performance.now(); fetchBlocks(p); } else send(p);
});
$("cancel").addEventListener("click", () => {
  state.pending = null;
  $("warning").hidden = true;
  status("Search cancelled; nothing was sent.");
});
$("protocol").addEventListener("change", () => { $("protocol").dataset.chosen = "1"; updateProtocol(); });
$("budget").addEventListener("change", updateEpsilon); // the plan, and the hint that follows it
$("pir-ranking").addEventListener("change", updateEpsilon);
$("ranking").addEventListener("change", updateEpsilon); // the frame's figures follow its ranking
$("clear-refusal").addEventListener("click", () => {
  if (clearRefusal()) return showStop();
  $("stopped").hidden = true;
  status("Searches against this server are allowed again. Do not search a photo you searched when the check failed.");
});
$("accept-key").addEventListener("click", () => {
  if (acceptKey()) return showStop();
  $("stopped").hidden = true;
  status("The gallery's new key is accepted; searches against it are allowed.");
});
$("limit").addEventListener("change", () => localStorage.setItem(LIMIT_KEY, $("limit").value));
$("reset").addEventListener("click", () => {
  localStorage.removeItem(RECEIPTS_KEY);
  forgetLastAddition();
  updateBudget();
  status("Spent budget forgotten on this browser (the server never knew it).");
});

start();
