// The search page. All privacy-relevant work happens in WebAssembly (`pkg/`, built from
// client-wasm): the model, the block release (which blocks to download, in what order), the
// ranking, and for the frame protocol the placement, the noise and the choice of the real row.
// This file only moves bytes between the page, the wasm client and the server.
//
// Block retrieval (the default): everything this page requests after a release is a function of
// the release alone. It fetches exactly the released URLs, all at once, in the order the wasm
// client gave (a fresh random order), by one code path whatever block it is; thumbnails come
// from the blocks; it never retries a block and requests nothing after ranking.
import init, { Client, compose_budget, limits } from "./pkg/privatemail_client_wasm.js";
import { SAMPLES } from "./samples.js";
import { loadPir, pirSearch } from "./pir.js";
import { HostileAnswer, deadline, fetchBounded, serverMessage, setLimits } from "./net.js";

const EPSILONS = [0.1, 0.25, 0.5, 1, 2, 4, 8, 16, 30, 100];
const K = 8;
const RECEIPTS_KEY = "privatemail.receipts";
const LIMIT_KEY = "privatemail.limit";
// Tableau 10: distinguishable, and readable on white.
const COLOURS = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f",
                 "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#5b5b5b"];

const $ = (id) => document.getElementById(id);
const timings = (window.pmTimings = {});
const t0 = performance.now();
let client = null;
let config = null;
let image = null; // what the model said about the loaded photo
let map = null; // gallery sample in the frame, for the plot
let partition = null; // the public partition document (block retrieval), or null
let currentPlan = null; // the plan the next block search uses (public)
let pirDoc = null; // the public PIR document, or null where the server offers none
let pirPlan = null; // the plan the next PIR search uses (public)
let partitionProblem = ""; // why block download is unavailable, shown while it is

function status(text) { $("status").textContent = text; }
function showError(text) {
  const e = $("error");
  e.textContent = text;
  e.hidden = !text;
}

// ---- what a server may send: bounded sizes, a deadline, one origin -------------------------
// The limits are the CLI's (`shared::params::limits`), read from the wasm client once it is up.
const wasmReady = init();
const LIMITS = wasmReady.then(() => JSON.parse(limits()));
setLimits(LIMITS);

// A JSON answer from this page's server, as text, within its limit and the deadline.
async function getJson(path, maxBytes) {
  const L = await LIMITS;
  const d = deadline(L.total_timeout_secs);
  let got;
  try {
    got = await fetchBounded(path, { maxBytes: maxBytes ?? L.max_json_bytes, signal: d.signal });
  } catch (e) {
    if (e instanceof HostileAnswer) throw new Error(`The server's answer for ${path} was refused: ${e.message}.`);
    if (e?.name === "TimeoutError" || d.signal.aborted) throw new Error(`The server did not answer ${path} in time.`);
    throw new Error("Cannot reach the search server. Check that it is running and try again.");
  } finally {
    d.done();
  }
  if (!got.resp.ok) throw new Error(`The server could not provide ${path} (HTTP ${got.resp.status}).`);
  return new TextDecoder().decode(got.bytes);
}

async function start() {
  try {
    const [, weights, configText, anchorsText, mapText] = await Promise.all([
      wasmReady,
      fetch("pkg/model.bin").then((r) => {
        if (!r.ok) throw new Error("The on-device model is missing from this page.");
        return r.arrayBuffer();
      }),
      getJson("/api/v1/config"),
      getJson("/api/v1/anchors"),
      getJson("/api/v1/gallery-map"),
    ]);
    config = JSON.parse(configText);
    map = JSON.parse(mapText);
    client = new Client(new Uint8Array(weights), configText, anchorsText);
  } catch (e) {
    status("The page could not start.");
    showError(String(e.message || e));
    return;
  }
  await loadPartition();
  await loadPirDoc();
  $("delta").textContent = config.privacy_defaults.delta.toExponential(0);
  renderSamples();
  renderLegend();
  drawPlot(null);
  updateEpsilon();
  updateBudget();
  updateProtocol();
  timings.ready_ms = performance.now() - t0;
  status(`Ready (${Math.round(timings.ready_ms)} ms). Choose a photo to search with.`);
  document.body.dataset.ready = "true";
}

function renderSamples() {
  const box = $("samples");
  for (const s of SAMPLES) {
    const b = document.createElement("button");
    b.type = "button";
    const name = config.class_names[s.label];
    b.setAttribute("aria-label", `Sample photo: ${name}`);
    b.dataset.label = s.label;
    const img = document.createElement("img");
    img.src = s.png;
    img.alt = "";
    b.append(img);
    b.addEventListener("click", () => loadFromUrl(s.png));
    box.append(b);
  }
}

function renderLegend() {
  $("legend").replaceChildren(...config.class_names.map((name, c) => {
    const li = document.createElement("li");
    const dot = document.createElement("span");
    dot.style.background = COLOURS[c % COLOURS.length];
    li.append(dot, name);
    return li;
  }));
}

// ---- the photo -------------------------------------------------------------------------------

const MAX_SIDE = 1024; // large photos are scaled down by the browser first (speed, memory)

function loadBitmap(bitmap) {
  const scale = Math.min(1, MAX_SIDE / Math.max(bitmap.width, bitmap.height));
  const w = Math.max(1, Math.round(bitmap.width * scale));
  const h = Math.max(1, Math.round(bitmap.height * scale));
  const canvas = document.createElement("canvas");
  canvas.width = w;
  canvas.height = h;
  const ctx = canvas.getContext("2d");
  ctx.drawImage(bitmap, 0, 0, w, h);
  const data = ctx.getImageData(0, 0, w, h).data;
  const t = performance.now();
  image = JSON.parse(client.load_image(new Uint8Array(data.buffer), w, h));
  timings.infer_ms = performance.now() - t;
  showImage();
}

async function loadFromUrl(url) {
  showError("");
  try {
    const blob = await (await fetch(url)).blob();
    loadBitmap(await createImageBitmap(blob));
  } catch (e) {
    showError("That sample could not be opened.");
  }
}

async function loadFromFile(file) {
  showError("");
  if (!file) return;
  try {
    loadBitmap(await createImageBitmap(file));
  } catch (e) {
    image = null;
    $("search").disabled = true;
    $("query").hidden = true;
    showError(`“${file.name}” is not an image this browser can open. Try a JPEG or PNG photo.`);
  }
}

function showImage() {
  const ctx = $("preview").getContext("2d");
  const px = ctx.createImageData(28, 28);
  image.pixels.forEach((v, i) => px.data.set([v, v, v, 255], 4 * i));
  ctx.putImageData(px, 0, 0);
  $("prediction").textContent =
    `The model thinks this is a ${image.class_name.toLowerCase()} ` +
    `(${Math.round(100 * image.probability)}% sure). That stays in your browser.`;
  $("query").hidden = false;
  $("search").disabled = false;
  status(`Photo ready (model: ${timings.infer_ms.toFixed(1)} ms). Choose a privacy level and search.`);
}

// ---- privacy level and budget ----------------------------------------------------------------

function epsilon() { return EPSILONS[Number($("epsilon").value)]; }

function hint(eps) {
  if (protocol() === "pir") return "Private information retrieval spends no ε at all: this slider applies only to the other ways to search.";
  const frame = protocol() === "frame" || protocol() === "paper";
  if (eps <= 0.5) return "Strong privacy: the server learns practically nothing about your photo" + (frame ? " — and the matches are essentially random." : ".");
  if (eps <= 4) return "Good privacy: the server cannot tell your photo's category much better than by guessing" + (frame ? "; matches are still mostly random." : ".");
  if (eps <= 16) return frame
    ? "Moderate privacy: matches start to follow your photo, and the server could guess its category more often than by chance."
    : "Moderate privacy: the server could guess which part of the gallery your photo is from more often than by chance.";
  if (eps <= 30) return frame ? "Weak privacy: useful matches, but the server can often tell your photo's category." : "Weak privacy: the server can often tell which part of the gallery your photo is from.";
  return "No meaningful privacy — for trying the system out only.";
}

function updateEpsilon() {
  const e = epsilon();
  $("eps-value").textContent = String(e);
  $("epsilon").setAttribute("aria-valuetext", `epsilon ${e}`);
  $("eps-hint").textContent = hint(e);
  updatePlan();
}

function receipts() {
  try { return JSON.parse(localStorage.getItem(RECEIPTS_KEY) || "[]"); } catch { return []; }
}

function total(list) {
  return JSON.parse(compose_budget(JSON.stringify(list), config.privacy_defaults.delta));
}

function updateBudget() {
  const t = total(receipts());
  $("spent").textContent = `ε = ${t.epsilon.toFixed(2)} over ${t.releases} search${t.releases === 1 ? "" : "es"}`;
  const stored = localStorage.getItem(LIMIT_KEY);
  if (stored && document.activeElement !== $("limit")) $("limit").value = stored;
}

// ---- search ----------------------------------------------------------------------------------

let pending = null; // a privatized request waiting for the user's go-ahead

function privatize() {
  const t = performance.now();
  const delta = config.privacy_defaults.delta;
  const out = JSON.parse(protocol() === "paper"
    ? client.privatize_paper(epsilon(), delta, $("mechanism").value, K)
    : client.privatize(epsilon(), delta, $("mechanism").value, K, $("ranking").value));
  out.paper = protocol() === "paper";
  timings.privatize_ms = performance.now() - t;
  return out;
}

async function onSearch() {
  showError("");
  $("warning").hidden = true;
  if (!image) return;
  if (protocol() === "pir") return onPirSearch();
  if (protocol() === "blocks" || protocol() === "whole") return onBlockSearch();
  let out;
  try {
    $("progress").hidden = false;
    $("progress").value = 1;
    status("Adding noise to your photo's numbers…");
    out = privatize();
  } catch (e) {
    $("progress").hidden = true;
    showError(`Could not prepare the search: ${e.message || e}`);
    return;
  }
  if (holdOverBudget(out)) {
    $("progress").hidden = true;
    return;
  }
  await send(out);
}

// If this release would bring the spent budget over the user's limit, keep it unsent and ask.
// Nothing has been sent or fetched yet: a release that is never used spends no budget.
function holdOverBudget(out) {
  const after = total([...receipts(), out.receipt]);
  const limit = Number($("limit").value);
  if (after.epsilon <= limit) return false;
  pending = out;
  $("warning-text").textContent =
    `This search would bring the privacy spent by this browser to ε = ${after.epsilon.toFixed(2)}, ` +
    `above your limit of ${limit}.`;
  $("warning").hidden = false;
  $("search-anyway").focus();
  status("Waiting for your decision.");
  return true;
}

async function send(out) {
  $("warning").hidden = true;
  $("progress").hidden = false;
  $("progress").value = 2;
  status("Searching the gallery…");
  const t = performance.now();
  const L = await LIMITS;
  const d = deadline(L.total_timeout_secs);
  let resp, text, bytes;
  try {
    ({ resp, bytes } = await fetchBounded("/api/v1/search", {
      maxBytes: L.max_json_bytes,
      signal: d.signal,
      init: { method: "POST", headers: { "content-type": "application/json" }, body: out.request },
    }));
    text = new TextDecoder().decode(bytes);
  } catch (e) {
    $("progress").hidden = true;
    showError(e instanceof HostileAnswer ? `The server's answer was refused: ${e.message}.`
      : d.signal.aborted ? "The search server did not answer in time."
      : "Cannot reach the search server. Check that it is running and try again.");
    status("Search failed.");
    return;
  } finally {
    d.done();
  }
  timings.roundtrip_ms = performance.now() - t;
  if (!resp.ok) {
    $("progress").hidden = true;
    const msg = serverMessage(bytes, `HTTP ${resp.status}`, L);
    showError(`The server refused the search: ${msg}`);
    status("Search failed.");
    return;
  }
  // The request reached the server: the budget is spent.
  localStorage.setItem(RECEIPTS_KEY, JSON.stringify([...receipts(), out.receipt]));
  updateBudget();
  let picked;
  try {
    picked = JSON.parse(client.pick(text));
    picked.paper = out.paper;
  } catch (e) {
    $("progress").hidden = true;
    showError(`The server's answer could not be read: ${e.message || e}`);
    return;
  }
  $("progress").value = 3;
  $("progress").hidden = true;
  showResults(picked);
  status(`Done: privatized in ${timings.privatize_ms.toFixed(1)} ms, answered in ${Math.round(timings.roundtrip_ms)} ms.`);
}

function showResults(picked) {
  const same = picked.matches.filter((m) => m.label === image.label).length;
  $("results-summary").textContent =
    `${same} of ${picked.matches.length} matches are in the category the model sees in your ` +
    `photo (${image.class_name}), at ε = ${epsilon()}.`;
  $("results").replaceChildren(...picked.matches.map((m) => {
    const li = document.createElement("li");
    const img = document.createElement("img");
    const name = config.class_names[m.label] ?? `class ${m.label}`;
    img.src = `data:image/png;base64,${m.thumbnail_png_base64}`;
    img.alt = name;
    const cap = document.createElement("div");
    cap.textContent = name;
    if (m.label === image.label) cap.className = "same";
    li.dataset.label = m.label;
    li.append(img, cap);
    return li;
  }));
  if (picked.paper) drawPaperPlot(picked);
  else drawPlot(picked);
}

// ---- block retrieval -------------------------------------------------------------------------

function protocol() { return $("protocol").value; }

const kib = (bytes) => bytes / 1024;
function fmtKiB(bytes) {
  const k = kib(bytes);
  return k >= 1024 ? `${(k / 1024).toFixed(1)} MiB` : `${Math.round(k)} KiB`;
}
const pct = (x) => (x >= 0.995 && x < 1 ? "over 99" : x < 0.01 && x > 0 ? "under 1" : String(Math.round(100 * x)));

// The partition document is public and the same for everyone; a stale one is refetched whole.
async function loadPartition() {
  partition = null;
  try {
    const text = await getJson("/api/v1/partition", (await LIMITS).max_partition_doc_bytes);
    client.load_partition(text);
    partition = JSON.parse(text);
  } catch (e) {
    partition = null;
    partitionProblem = `Block download is unavailable: ${e.message || e} The noisy-numbers search still works.`;
    $("plan").textContent = partitionProblem;
  }
  const whole = $("protocol").querySelector("option[value='whole']");
  const allowed = !!partition && partition.allow_full_download && partition.levels.some((l) => l.whole);
  whole.hidden = !allowed;
  whole.disabled = !allowed;
  if (!partition) $("protocol").value = "frame";
  else if (!allowed && protocol() === "whole") $("protocol").value = "blocks";
}

// The PIR document: public, the same for everyone. Where the server offers PIR it is the default.
async function loadPirDoc() {
  pirDoc = partition ? await loadPir(client) : null;
  const opt = $("protocol").querySelector("option[value='pir']");
  opt.hidden = !pirDoc;
  opt.disabled = !pirDoc;
  if (pirDoc && !$("protocol").dataset.chosen) $("protocol").value = "pir";
  else if (!pirDoc && protocol() === "pir") $("protocol").value = partition ? "blocks" : "frame";
}

async function updateProtocol() {
  // A partition that was unavailable (e.g. still being built) is fetched again, whole.
  const p = protocol();
  const blocks = p === "blocks" || p === "whole" || p === "pir";
  if (client && !partition && blocks) await loadPartition();
  document.querySelectorAll(".eps-only").forEach((e) => { e.hidden = p === "pir"; });
  document.querySelectorAll(".frame-only").forEach((e) => { e.hidden = p !== "frame"; });
  document.querySelectorAll(".paper-only").forEach((e) => { e.hidden = p !== "paper"; });
  document.querySelectorAll(".gaussian-only").forEach((e) => { e.hidden = blocks; });
  document.querySelectorAll(".blocks-only").forEach((e) => { e.hidden = p !== "blocks" && p !== "pir"; });
  $("frame-figure").hidden = p !== "frame";
  $("paper-figure").hidden = p !== "paper";
  $("plan-figure").hidden = !blocks;
  $("search").textContent = p === "whole" ? "Download and search" : "Search privately";
  updateEpsilon(); // the hint and the plan
}

// The plan is public: a function of ε, the byte budget and the partition only, never the photo.
function updatePlan() {
  if (!client) return;
  currentPlan = null;
  const p = protocol();
  if (p === "frame" || p === "paper") {
    $("plan").textContent = partition ? "" : partitionProblem;
    return;
  }
  if (!partition) return;
  if (p === "pir") return updatePirPlan();
  let curve = [];
  try {
    if (p === "whole") {
      currentPlan = JSON.parse(client.whole_plan());
      try { curve = JSON.parse(client.plans(epsilon())); } catch { curve = []; }
    } else {
      curve = JSON.parse(client.plans(epsilon()));
      currentPlan = JSON.parse(client.plan(epsilon(), Number($("budget").value)));
    }
  } catch (e) {
    $("plan").textContent = `No search fits these settings: ${e.message || e}. Choose a larger data budget.`;
    drawPlanPlot(curve, null);
    return;
  }
  $("plan").replaceChildren(...planLines(currentPlan).map((t) => {
    const li = document.createElement("p");
    li.textContent = t;
    return li;
  }));
  drawPlanPlot(curve, currentPlan);
}

// The PIR plan is public too: from the documents, K and the byte budget.
function updatePirPlan() {
  pirPlan = null;
  let curve = [];
  try { curve = JSON.parse(client.plans(epsilon())); } catch { curve = []; }
  try {
    pirPlan = JSON.parse(client.pir_plan(K, Number($("budget").value)));
  } catch (e) {
    $("plan").textContent = `No private-retrieval search fits these settings: ${e.message || e}. Choose a larger data budget.`;
    drawPlanPlot(curve, null, null);
    return;
  }
  const how = pirPlan.ranking.kind === "table"
    ? "ranks the whole gallery in your browser from a public list of every image's numbers"
    : `asks for your photo's part of the gallery (level ${pirPlan.ranking.level}) without revealing which`;
  const lines = [
    "The server learns nothing about your photo: every request looks the same whatever the photo (lattice-based private information retrieval). Privacy spent: ε = 0.",
    `This search ${how}, then fetches the ${K} pictures the same way: ${fmtKiB(pirPlan.up_bytes)} up and ${fmtKiB(pirPlan.down_bytes)} down per search, plus ${fmtKiB(pirPlan.one_time_bytes)} of public files once per gallery version (kept by your browser).`,
    pirPlan.predicted_fidelity >= 0.9995
      ? "Results: your exact 8 nearest images in the whole gallery."
      : `Predicted: ${pct(pirPlan.predicted_fidelity)}% of your 8 exact nearest matches will be found.`,
  ];
  $("plan").replaceChildren(...lines.map((t) => {
    const li = document.createElement("p");
    li.textContent = t;
    return li;
  }));
  drawPlanPlot(curve, null, pirPlan);
}

async function onPirSearch() {
  if (!pirPlan) {
    showError("No private-retrieval plan fits these settings. Choose a larger data budget or another way to search.");
    return;
  }
  $("progress").hidden = false;
  $("progress").value = 2;
  let out;
  try {
    out = await pirSearch(client, pirDoc, pirPlan, K, status);
  } catch (e) {
    $("progress").hidden = true;
    showError(`The private search failed: ${e.message || e}. Nothing was retried; nothing about your photo was revealed.`);
    status("Search failed.");
    if (e.status === 404 || e.status === 410 || e.status === 503) { await loadPartition(); await loadPirDoc(); updatePlan(); }
    return;
  }
  $("progress").value = 3;
  $("progress").hidden = true;
  Object.assign(timings, { pir_client_ms: out.timings.client_ms, pir_search_ms: out.timings.total_ms });
  showPirResults(out);
  status(`Done in ${Math.round(out.timings.total_ms)} ms: ${fmtKiB(out.bytes.up)} up, ${fmtKiB(out.bytes.down)} down` +
    (out.bytes.once ? `, ${fmtKiB(out.bytes.once)} of public files read once` : "") +
    `; queries and checks took ${Math.round(out.timings.client_ms)} ms here. The server learned nothing about your photo.`);
}

function showPirResults(out) {
  const same = out.ranked.results.filter((m) => m.label === image.label).length;
  const exact = pirPlan.predicted_fidelity >= 0.9995;
  $("results-summary").textContent =
    `The ${out.ranked.results.length} nearest images ${exact ? "in the whole gallery" : "in your photo's part of the gallery"}, ` +
    "ranked exactly in your browser; the server computed its answers without learning which images you asked for. " +
    `${same} ${same === 1 ? "is" : "are"} in the category the model sees in your photo (${image.class_name}).`;
  renderResults(out.ranked);
}

function planLines(plan) {
  const eps = plan.epsilon === 0 ? "0 (nothing about your photo is released)" : String(plan.epsilon);
  const what = plan.whole
    ? "This search downloads the whole gallery"
    : plan.size === plan.blocks
      ? `This search downloads all ${plan.blocks} blocks of the gallery`
      : `This search downloads ${plan.size} of the gallery's ${plan.blocks} blocks (your photo's own block is among them with probability ${pct(plan.inclusion)}%, hidden among random others)`;
  return [
    `${what}: about ${fmtKiB(plan.expected_bytes)}, ${pct(plan.expected_pool_fraction)}% of the gallery.`,
    `Predicted: ${pct(plan.predicted_fidelity)}% of your 8 exact nearest matches in the gallery will be found (a prediction from the server's published coverage, not a promise).`,
    `Privacy spent by this search: ε = ${eps}.`,
  ];
}

async function onBlockSearch() {
  const t = performance.now();
  if (!currentPlan) {
    showError("No search plan fits these settings. Choose a larger data budget or another way to search.");
    return;
  }
  let out;
  try {
    out = JSON.parse(client.release_blocks(JSON.stringify(currentPlan)));
  } catch (e) {
    showError(`Could not prepare the search: ${e.message || e}`);
    return;
  }
  timings.release_ms = performance.now() - t;
  out.started = t;
  if (out.receipt) {
    if (holdOverBudget(out)) return;
  }
  await fetchBlocks(out);
}

// One code path for every block: all requests at once, in the given (random) order, no retry.
async function fetchBlocks(out) {
  $("warning").hidden = true;
  showError("");
  const t = performance.now();
  out.started = out.started ?? t;
  $("progress").hidden = false;
  $("progress").value = 2;
  status(`Downloading ${out.urls.length} block${out.urls.length === 1 ? "" : "s"}…`);
  // The requests leave now: the release is spent whatever happens next.
  if (out.receipt) {
    localStorage.setItem(RECEIPTS_KEY, JSON.stringify([...receipts(), out.receipt]));
    updateBudget();
  }
  let buffers;
  // One deadline for the whole search; the first failure stops every other download.
  const L = await LIMITS;
  const d = deadline(L.total_timeout_secs);
  try {
    buffers = await Promise.all(out.urls.map(async (u, i) => {
      const { resp, bytes } = await fetchBounded(u, {
        maxBytes: out.max_bytes[i],
        maxWire: out.max_wire_bytes[i],
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
    $("progress").hidden = true;
    const reason = e.status ? e.message
      : e instanceof HostileAnswer ? `${e.message}; refused`
      : e?.name === "TimeoutError" || d.signal.reason?.name === "TimeoutError"
        ? `no complete answer within ${L.total_timeout_secs} s`
        : "cannot reach the search server";
    showError(
      `Downloading the gallery blocks failed (${reason}). Nothing was retried: retrying only some ` +
      "blocks could reveal which one you need. Search again to make a new private choice of blocks — " +
      "that spends privacy budget again.");
    status("Search failed.");
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
    ranked = JSON.parse(client.rank_blocks(buffers, K));
  } catch (e) {
    $("progress").hidden = true;
    showError(`The downloaded blocks could not be used: ${e.message || e}`);
    status("Search failed.");
    return;
  }
  timings.rank_ms = performance.now() - r0;
  $("progress").value = 3;
  $("progress").hidden = true;
  showBlockResults(ranked, out);
  timings.block_search_ms = performance.now() - out.started;
  status(`Done: ${out.urls.length} block${out.urls.length === 1 ? "" : "s"} downloaded in ` +
    `${Math.round(timings.fetch_ms)} ms, ranked here in ${timings.rank_ms.toFixed(1)} ms.`);
}

function renderResults(ranked) {
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
    if (m.label === image.label) cap.className = "same";
    li.dataset.label = m.label;
    li.dataset.id = m.id;
    li.append(canvas, cap);
    return li;
  }));
}

function showBlockResults(ranked, out) {
  const plan = currentPlan;
  const same = ranked.results.filter((m) => m.label === image.label).length;
  $("results-summary").textContent =
    `The ${ranked.results.length} nearest of the ${ranked.pool_items} gallery images downloaded ` +
    `(${out.urls.length} block${out.urls.length === 1 ? "" : "s"}), ranked exactly in your browser; ` +
    `${same} ${same === 1 ? "is" : "are"} in the category the model sees in your photo (${image.class_name}). ` +
    (plan && plan.predicted_fidelity < 1
      ? `Predicted before the search: ${pct(plan.predicted_fidelity)}% of these are your exact 8 nearest in the whole gallery.`
      : "These are your exact 8 nearest in the whole gallery.");
  renderResults(ranked);
}

// ---- plot: predicted fidelity against KiB downloaded (the public Pareto curve) ---------------

function drawPlanPlot(curve, chosen, pir) {
  const svg = $("plan-plot");
  const W = 400, H = 260, L = 48, R = 12, T = 12, B = 40;
  const pts = [...curve];
  // PIR's point: its bytes per search (up and down), at ε = 0.
  const pirPoint = pir ? { expected_bytes: pir.up_bytes + pir.down_bytes, predicted_fidelity: pir.predicted_fidelity } : null;
  if (chosen && !pts.some((p) => p.level === chosen.level && p.size === chosen.size)) pts.push(chosen);
  const nodes = [];
  if (!pts.length && !pirPoint) { svg.replaceChildren(); return; }
  const xs = [...pts, ...(pirPoint ? [pirPoint] : [])].map((p) => Math.max(1, kib(p.expected_bytes)));
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
  xl.textContent = "data downloaded per search (log scale)";
  const yl = el("text", { x: 12, y: (T + H - B) / 2, "font-size": 11, "text-anchor": "middle", fill: "#222",
    transform: `rotate(-90 12 ${(T + H - B) / 2})` });
  yl.textContent = "predicted share of exact top 8";
  nodes.push(xl, yl);
  if (curve.length) {
    nodes.push(el("polyline", { points: curve.map((p) => `${x(p.expected_bytes)},${y(p.predicted_fidelity)}`).join(" "),
      fill: "none", stroke: COLOURS[0], "stroke-width": 1.5 }));
  }
  for (const p of pts) {
    const label = p.whole ? "the whole gallery" : `${p.size} of ${p.blocks} blocks`;
    nodes.push(el("circle", { cx: x(p.expected_bytes), cy: y(p.predicted_fidelity), r: 3, fill: p.whole ? COLOURS[4] : COLOURS[0] },
      `${label}: ${fmtKiB(p.expected_bytes)}, predicted ${pct(p.predicted_fidelity)}%, ε = ${p.epsilon}`));
  }
  if (pirPoint) {
    const px = x(pirPoint.expected_bytes), py = y(pirPoint.predicted_fidelity);
    nodes.push(el("rect", { x: px - 5, y: py - 5, width: 10, height: 10, fill: COLOURS[2], class: "pir-point" },
      `Private information retrieval: ${fmtKiB(pirPoint.expected_bytes)} per search, predicted ${pct(pirPoint.predicted_fidelity)}%, ε = 0`));
    nodes.push(el("circle", { cx: px, cy: py, r: 9, fill: "none", stroke: "#111", "stroke-width": 2, class: "chosen" },
      "The plan this search uses"));
  }
  if (chosen) {
    nodes.push(el("circle", { cx: x(chosen.expected_bytes), cy: y(chosen.predicted_fidelity), r: 8, fill: "none",
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
function el(name, attrs, title) {
  const e = document.createElementNS(SVG, name);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  if (title) {
    const t = document.createElementNS(SVG, "title");
    t.textContent = title;
    e.append(t);
  }
  return e;
}

// The real row: a filled star at (x, y).
function star(x, y) {
  const pts = Array.from({ length: 10 }, (_, i) => {
    const a = -Math.PI / 2 + (Math.PI * i) / 5;
    const rad = i % 2 ? 0.035 : 0.08;
    return `${x + rad * Math.cos(a)},${y + rad * Math.sin(a)}`;
  }).join(" ");
  return el("polygon", { points: pts, fill: "#ffd400", stroke: "#111", "stroke-width": 0.01 }, "Your real row");
}

function drawPlot(picked) {
  const svg = $("plot");
  const nodes = [];
  map.rows.forEach((r, i) => {
    const [x, y] = project(r);
    nodes.push(el("circle", { cx: x, cy: y, r: 0.012, fill: COLOURS[map.labels[i] % 10], "fill-opacity": 0.3 }));
  });
  const c = config.frame_dim;
  for (let i = 0; i < c; i++) {
    const v = Array.from({ length: c }, (_, j) => (j === i ? 1 : 0));
    const [x, y] = project(v);
    const name = config.class_names[i] ?? `class ${i}`;
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

function drawPaperPlot(picked) {
  const scale = Math.max(1e-9, ...picked.rows.flat().map((v) => Math.abs(v)));
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

// ---- wiring ----------------------------------------------------------------------------------

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
  if (!pending) return;
  const p = pending;
  pending = null;
  if (p.urls) { p.started = performance.now(); fetchBlocks(p); } else send(p);
});
$("cancel").addEventListener("click", () => {
  pending = null;
  $("warning").hidden = true;
  status("Search cancelled; nothing was sent.");
});
$("protocol").addEventListener("change", () => { $("protocol").dataset.chosen = "1"; updateProtocol(); });
$("budget").addEventListener("change", updatePlan);
$("limit").addEventListener("change", () => localStorage.setItem(LIMIT_KEY, $("limit").value));
$("reset").addEventListener("click", () => {
  localStorage.removeItem(RECEIPTS_KEY);
  updateBudget();
  status("Spent budget forgotten on this browser (the server never knew it).");
});

start();
