// The private information retrieval search on the page: `../pir.js` moves the bytes, the wasm
// client makes the queries, checks the answers and ranks; this shows progress and the matches.
import { $, K, state, status, timings } from "../page.js";
import { pirSearch } from "../pir.js";
import { fmtKiB } from "../format.js";
import { loadPartition, loadPirDoc } from "../protocol.js";
import { updatePlan } from "../plan.js";
import { renderResults, searchFailed } from "../results.js";

export async function onPirSearch() {
  if (!state.pirPlan) {
    searchFailed($("plan").textContent || "No private-retrieval search fits these settings. Choose a larger data budget or another way to search.");
    return;
  }
  $("progress").hidden = false;
  $("progress").value = 2;
  $("results").replaceChildren();
  let out;
  try {
    out = await pirSearch(state.client, state.pirPlan, status);
  } catch (e) {
    // Only a fault of this page (the driver answers every server fault itself).
    $("progress").hidden = true;
    searchFailed(`The private search could not run: ${e.message || e}.`);
    return;
  }
  $("progress").hidden = true;
  const done = out.done;
  if (!done.ok) {
    status("Search failed.");
    if (done.kind === "hostile" || done.kind === "locked") {
      showStopped(done.message);
      return;
    }
    searchFailed(done.message);
    if (done.status === 404 || done.status === 410 || done.status === 503) { await loadPartition(); await loadPirDoc(); updatePlan(); }
    return;
  }
  $("progress").value = 3;
  Object.assign(timings, { pir_client_ms: out.timings.client_ms, pir_search_ms: out.timings.total_ms, pir_prepared: out.timings.prepared });
  showPirResults({ results: done.results, thumb_side: done.thumb_side });
  status(`Done in ${Math.round(out.timings.total_ms)} ms: ${fmtKiB(out.bytes.up)} up, ${fmtKiB(out.bytes.down)} down` +
    filesWords(out.files) +
    `; queries and checks took ${Math.round(out.timings.client_ms)} ms here. Every request was the same whatever your photo, and every answer passed its checks.`);
}

// The public files of this search in the plan's terms: downloaded (what came over the network,
// as the browser measured it) or read from the browser's cache; none when the page already
// held them checked from an earlier search.
function filesWords(f) {
  if (!f.files) return "";
  const n = (k) => `${k} public file${k === 1 ? "" : "s"}`;
  if (f.cached === f.files) return `; the ${n(f.files)} (${fmtKiB(state.pirPlan.one_time_bytes)} in the plan) came from your browser's cache (${fmtKiB(f.wire)} over the network) and were checked`;
  if (!f.cached) return `, ${fmtKiB(f.wire)} of public files downloaded once and checked (${fmtKiB(state.pirPlan.one_time_bytes)} in the plan)`;
  return `, ${fmtKiB(f.wire)} of public files downloaded and ${n(f.cached)} from your browser's cache, all checked (${fmtKiB(state.pirPlan.one_time_bytes)} in the plan)`;
}

// After an answer failed a check that involved the photo: the driver's words, and the only
// way on — clearing the stop by hand.
export function showStopped(message) {
  $("stopped-text").textContent = message;
  $("stopped").hidden = false;
  $("results").replaceChildren();
  $("results-summary").textContent = "";
}

function showPirResults(ranked) {
  const same = ranked.results.filter((m) => m.label === state.image.label).length;
  // What the plan's kind makes true, never the gallery's published figure: only the table
  // ranks the whole gallery, and scores are the server's to compute (encrypted).
  const kind = state.pirPlan.ranking.kind;
  $("results-summary").textContent =
    `The ${ranked.results.length} nearest images ${kind === "table" ? "in the whole gallery" : "in your photo's part of the gallery"}, ` +
    (kind === "scores" ? "ranked in your browser by the scores the server computed encrypted" : "ranked exactly in your browser") +
    "; the server computed its answers without learning which images you asked for. " +
    `${same} ${same === 1 ? "is" : "are"} in the category the model sees in your photo (${state.image.class_name}).`;
  renderResults(ranked);
}
