// The search page. All privacy-relevant work happens in WebAssembly (`pkg/`, built from
// client-wasm): the model, the placement in the public frame, the noise, and the choice of the
// real row. This file only moves bytes between the page, the wasm client and the server.
import init, { Client, compose_budget } from "./pkg/privatemail_client_wasm.js";
import { SAMPLES } from "./samples.js";

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

function status(text) { $("status").textContent = text; }
function showError(text) {
  const e = $("error");
  e.textContent = text;
  e.hidden = !text;
}

async function getJson(path) {
  let resp;
  try {
    resp = await fetch(path);
  } catch {
    throw new Error("Cannot reach the search server. Check that it is running and try again.");
  }
  if (!resp.ok) throw new Error(`The server could not provide ${path} (HTTP ${resp.status}).`);
  return resp.text();
}

async function start() {
  try {
    const [, weights, configText, anchorsText, mapText] = await Promise.all([
      init(),
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
  $("delta").textContent = config.privacy_defaults.delta.toExponential(0);
  renderSamples();
  renderLegend();
  drawPlot(null);
  updateEpsilon();
  updateBudget();
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
  if (eps <= 0.5) return "Strong privacy: the server learns practically nothing about your photo — and the matches are essentially random.";
  if (eps <= 4) return "Good privacy: the server cannot tell your photo's category much better than by guessing; matches are still mostly random.";
  if (eps <= 16) return "Moderate privacy: matches start to follow your photo, and the server could guess its category more often than by chance.";
  if (eps <= 30) return "Weak privacy: useful matches, but the server can often tell your photo's category.";
  return "No meaningful privacy — for trying the system out only.";
}

function updateEpsilon() {
  const e = epsilon();
  $("eps-value").textContent = String(e);
  $("epsilon").setAttribute("aria-valuetext", `epsilon ${e}`);
  $("eps-hint").textContent = hint(e);
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
  const out = JSON.parse(client.privatize(epsilon(), config.privacy_defaults.delta, $("mechanism").value, K, $("ranking").value));
  timings.privatize_ms = performance.now() - t;
  return out;
}

async function onSearch() {
  showError("");
  $("warning").hidden = true;
  if (!image) return;
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
  const after = total([...receipts(), out.receipt]);
  const limit = Number($("limit").value);
  if (after.epsilon > limit) {
    // Nothing has been sent: a release that is never sent spends no budget.
    pending = out;
    $("progress").hidden = true;
    $("warning-text").textContent =
      `This search would bring the privacy spent by this browser to ε = ${after.epsilon.toFixed(2)}, ` +
      `above your limit of ${limit}.`;
    $("warning").hidden = false;
    $("search-anyway").focus();
    status("Waiting for your decision.");
    return;
  }
  await send(out);
}

async function send(out) {
  $("warning").hidden = true;
  $("progress").hidden = false;
  $("progress").value = 2;
  status("Searching the gallery…");
  const t = performance.now();
  let resp;
  try {
    resp = await fetch("/api/v1/search", {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: out.request,
    });
  } catch {
    $("progress").hidden = true;
    showError("Cannot reach the search server. Check that it is running and try again.");
    status("Search failed.");
    return;
  }
  const text = await resp.text();
  timings.roundtrip_ms = performance.now() - t;
  if (!resp.ok) {
    $("progress").hidden = true;
    let msg = `HTTP ${resp.status}`;
    try { msg = JSON.parse(text).error.message; } catch {}
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
  drawPlot(picked);
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
    const [x, y] = project(picked.real_row);
    const pts = Array.from({ length: 10 }, (_, i) => {
      const a = -Math.PI / 2 + (Math.PI * i) / 5;
      const rad = i % 2 ? 0.035 : 0.08;
      return `${x + rad * Math.cos(a)},${y + rad * Math.sin(a)}`;
    }).join(" ");
    nodes.push(el("polygon", { points: pts, fill: "#ffd400", stroke: "#111", "stroke-width": 0.01 }, "Your real row"));
  }
  svg.replaceChildren(...nodes);
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
$("search-anyway").addEventListener("click", () => { if (pending) { const p = pending; pending = null; send(p); } });
$("cancel").addEventListener("click", () => {
  pending = null;
  $("warning").hidden = true;
  status("Search cancelled; nothing was sent.");
});
$("limit").addEventListener("change", () => localStorage.setItem(LIMIT_KEY, $("limit").value));
$("reset").addEventListener("click", () => {
  localStorage.removeItem(RECEIPTS_KEY);
  updateBudget();
  status("Spent budget forgotten on this browser (the server never knew it).");
});

start();
