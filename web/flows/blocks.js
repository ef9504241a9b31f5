// Block download (the blocks the wasm client released, or the whole gallery): everything this
// flow requests after a release is a function of the release alone. The wasm client's driver
// (`client::block_driver`, the CLI's too) hands out the block URLs only after the
// release's receipt is recorded here (`spend`); this module moves the bytes.
import { $, K, showError, state, status, timings } from "../page.js";
import { LIMITS } from "../api.js";
import { HostileAnswer, deadline, fetchBounded, fetchCentroids, wireOf } from "../net.js";
import { holdOverBudget, spend } from "../budget.js";
import { fmtKiB, pct } from "../format.js";
import { loadPartition } from "../protocol.js";
import { updatePlan } from "../plan.js";
import { renderResults, searchFailed } from "../results.js";
import { markBlocks } from "../map.js";

export async function onBlockSearch() {
  const t = performance.now();
  if (!state.currentPlan) {
    searchFailed("No search plan fits these settings. Choose a larger data budget or another way to search.");
    return;
  }
  let out;
  try {
    // The plan's level is public: its centroids are fetched (once per version) before the
    // release, which needs them to find the photo's block. Nothing is needed to download all.
    const plan = state.currentPlan;
    const centroidBytes = plan.size < plan.blocks ? await fetchCentroids(state.client, plan.level) : 0;
    out = JSON.parse(state.client.release_blocks(JSON.stringify(plan)));
    out.centroidBytes = centroidBytes;
  } catch (e) {
    searchFailed(`Could not prepare the search: ${e.message || e}`);
    // A replaced gallery version: fetch the (public, identical for everyone) partition anew.
    if (e.status === 404 || e.status === 410) { await loadPartition(); updatePlan(); }
    return;
  }
  timings.release_ms = performance.now() - t;
  out.started = t;
  out.kind = "blocks";
  if (out.receipt) {
    if (holdOverBudget(out)) return;
  }
  await fetchBlocks(out);
}

// One code path for every block: all requests at once, in the given (random) order, no retry.
export async function fetchBlocks(out) {
  $("warning").hidden = true;
  showError("");
  let reqs;
  try {
    // The driver calls `spend` with the receipt (if the plan releases anything) and hands out
    // the URLs only once it is stored: whatever the server answers, the release is counted.
    reqs = JSON.parse(state.client.block_requests((r) => spend(JSON.parse(r))));
  } catch (e) {
    searchFailed(`The privacy spent could not be recorded, so nothing was sent: ${e.message || e}`);
    return;
  }
  out.urls = reqs.urls;
  const t = performance.now();
  out.started = out.started ?? t;
  $("progress").hidden = false;
  $("progress").value = 2;
  status(`Downloading ${out.urls.length} block${out.urls.length === 1 ? "" : "s"}…`);
  let buffers;
  // One deadline for the whole search; the first failure stops every other download.
  const L = await LIMITS;
  const d = deadline(L.total_timeout_secs);
  try {
    buffers = await Promise.all(reqs.urls.map(async (u, i) => {
      const { resp, bytes } = await fetchBounded(u, {
        maxBytes: reqs.max_bytes[i],
        maxWire: reqs.max_wire_bytes[i],
        signal: d.signal,
        follow: false,
      });
      if (!resp.ok) {
        const err = new Error(`the server answered HTTP ${resp.status}`);
        err.status = resp.status;
        throw err;
      }
      return bytes;
    }).map((p) => p.catch((e) => { d.abort(); throw e; })));
  } catch (e) {
    state.client.blocks_failed();
    $("progress").hidden = true;
    const reason = e.status ? e.message
      : e instanceof HostileAnswer ? `${e.message}; refused`
      : e?.name === "TimeoutError" || d.signal.reason?.name === "TimeoutError"
        ? `no complete answer within ${L.total_timeout_secs} s`
        : "cannot reach the search server";
    searchFailed(
      `Downloading the gallery blocks failed (${reason}). Nothing was retried: retrying only some ` +
      "blocks could reveal which one you need. Search again to make a new private choice of blocks — " +
      "that spends privacy budget again.");
    // A replaced gallery version: fetch the (public, identical for everyone) partition anew.
    if (e.status === 404 || e.status === 410) { await loadPartition(); updatePlan(); }
    return;
  } finally {
    d.done();
  }
  timings.fetch_ms = performance.now() - t;
  const r0 = performance.now();
  let ranked;
  try {
    ranked = JSON.parse(state.client.rank_blocks(buffers, K));
  } catch (e) {
    $("progress").hidden = true;
    searchFailed(`The downloaded blocks could not be used: ${e.message || e}`);
    return;
  }
  timings.rank_ms = performance.now() - r0;
  $("progress").value = 3;
  $("progress").hidden = true;
  showBlockResults(ranked, out);
  timings.block_search_ms = performance.now() - out.started;
  status(`Done: ${movedWords(out, buffers)} in ${Math.round(timings.fetch_ms)} ms, ranked here in ${timings.rank_ms.toFixed(1)} ms.`);
}

// What this search actually moved: each block's body as it came over the network (Resource
// Timing's encoded size where the browser says, else the bytes read), none for a block the
// browser already held (its cache), beside the plan's ceiling and the person's limit.
function movedWords(out, buffers) {
  let bytes = 0, cached = 0;
  out.urls.forEach((u, i) => {
    const w = wireOf(u);
    if (w.known && w.cached) cached += 1;
    else bytes += w.known && w.encoded > 0 ? w.encoded : buffers[i].byteLength;
  });
  const fetched = out.urls.length - cached;
  const n = (k) => `${k} block${k === 1 ? "" : "s"}`;
  const plan = state.currentPlan;
  const ceiling = plan?.budget != null
    ? ` (at most ${fmtKiB(plan.max_bytes)} by the plan, within your limit of ${fmtKiB(plan.budget)})`
    : plan ? ` (at most ${fmtKiB(plan.max_bytes)} by the plan)` : "";
  $("results-summary").dataset.movedBytes = String(bytes);
  const moved = !cached ? `${n(fetched)} downloaded, ${fmtKiB(bytes)}${ceiling}`
    : !fetched ? `${n(cached)} read from your browser's cache (nothing downloaded)`
    : `${n(fetched)} downloaded, ${fmtKiB(bytes)}${ceiling}, and ${cached} read from your browser's cache`;
  const once = out.centroidBytes ? `; the map of the gallery's blocks, ${fmtKiB(out.centroidBytes)}, once for this gallery version` : "";
  return moved + once;
}

function showBlockResults(ranked, out) {
  const plan = state.currentPlan;
  const same = ranked.results.filter((m) => m.label === state.image.label).length;
  $("results-summary").textContent =
    `The ${ranked.results.length} nearest of the ${ranked.pool_items} gallery images downloaded ` +
    `(${out.urls.length} block${out.urls.length === 1 ? "" : "s"}), ranked exactly in your browser; ` +
    `${same} ${same === 1 ? "is" : "are"} in the category the model sees in your photo (${state.image.class_name}). ` +
    (plan && plan.predicted_fidelity < 1
      ? `Predicted before the search: ${pct(plan.predicted_fidelity)}% of these are your exact 8 nearest in the whole gallery.`
      : "These are your exact 8 nearest in the whole gallery.");
  renderResults(ranked);
  markBlocks(ranked);
}
