// The user's photo: from a file, a drop or a sample, scaled down by the browser, then given to
// the wasm client, which runs the model; the page shows what the model saw and predicted.
import { $, showError, state, status, timings } from "./page.js";
import { SAMPLES } from "./samples.js";
import { clearBlockMarks } from "./map.js";
import { article } from "./format.js";

export function renderSamples() {
  const box = $("samples");
  for (const s of SAMPLES) {
    const b = document.createElement("button");
    b.type = "button";
    const name = state.config.class_names[s.label];
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
  state.image = JSON.parse(state.client.load_image(new Uint8Array(data.buffer), w, h));
  timings.infer_ms = performance.now() - t;
  showImage();
  clearBlockMarks();
}

// A sample (a data: URL) is decoded as an image, not fetched: the Content-Security-Policy
// allows data: images but no connection except to this origin.
async function loadFromUrl(url) {
  showError("");
  try {
    const img = new Image();
    img.src = url;
    await img.decode();
    loadBitmap(await createImageBitmap(img));
  } catch (e) {
    showError("That sample could not be opened.");
  }
}

export async function loadFromFile(file) {
  showError("");
  if (!file) return;
  try {
    loadBitmap(await createImageBitmap(file));
  } catch (e) {
    state.image = null;
    $("search").disabled = true;
    $("query").hidden = true;
    showError(`“${file.name}” is not an image this browser can open. Try a JPEG or PNG photo.`);
  }
}

function showImage() {
  const ctx = $("preview").getContext("2d");
  const px = ctx.createImageData(28, 28);
  state.image.pixels.forEach((v, i) => px.data.set([v, v, v, 255], 4 * i));
  ctx.putImageData(px, 0, 0);
  $("prediction").textContent =
    `The model thinks this is ${article(state.image.class_name)} ${state.image.class_name.toLowerCase()} ` +
    `(${Math.round(100 * state.image.probability)}% sure). That stays in your browser.`;
  // The model names a class for anything; the wasm client's out-of-distribution check
  // (shared::embed::ood, computed in the browser) says when the photo looks like none.
  $("unfamiliar").textContent = state.image.unfamiliar_message || "";
  $("unfamiliar").hidden = !state.image.unfamiliar;
  $("query").hidden = false;
  $("search").disabled = false;
  status(`Photo ready (model: ${timings.infer_ms.toFixed(1)} ms). Choose a privacy level and search.`);
}
