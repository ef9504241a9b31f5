// The user's photo: from a file, a drop or a sample, decoded by the browser, reduced and framed
// by the wasm client (the CLI's code from the decoded pixels on: `embed::reduce`, then
// `embed::photo`), which runs the model; the page shows what the model saw and predicted.
import { $, showError, state, status, timings } from "./page.js";
import { SAMPLES, SAMPLES_MODEL } from "./samples.js";
import { article } from "./format.js";
import { clearResults } from "./results.js";
import { getModel, PHOTO_LIMITS } from "./api.js";
import { PhotoReducer } from "./pkg/privatemail_client_wasm.js";

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
    b.addEventListener("click", () => loadSample(s));
    box.append(b);
  }
}

// Pixels drawn and read at a time: a 100-megapixel photo is read in strips of about this many
// (16 MiB of RGBA), never whole.
const STRIP_PIXELS = 1 << 22;

// An image with nothing to see in it (embed::ood::look, in the wasm client: too small, one
// solid colour, noise): never classified, never searched.
class NothingToSee extends Error {}
// A photo past the limits both clients apply (embed::reduce), in the CLI's words.
class TooLarge extends Error {}

// The familiarity model (embed::ood::FamiliarityModel), one of the page's own files: fetched
// with the first photo rather than on the first load (not at all when the query model's file
// is the same bytes: the wasm client took it from there), and refused by the wasm client unless
// it is the file whose SHA-256 the client was built with. Fetched once, the status line saying
// so meanwhile; a failed fetch is tried again with the next photo, and no photo is loaded
// without it (NoFamiliarityCheck, its reason in plain words).
class NoFamiliarityCheck extends Error {}
let familiar = null;
function familiarityReady() {
  if (state.client.has_familiarity_model()) return Promise.resolve();
  if (!familiar) {
    status("Loading the check that a photo shows clothing (once, before the first photo)…");
    familiar = getModel("pkg/familiarity.bin", "max_model_bytes", false)
      .then((bytes) => state.client.set_familiarity_model(bytes))
      .catch((e) => {
        throw new NoFamiliarityCheck(`the page could not load its check that a photo shows clothing (${e.message || e}). Try again.`);
      })
      .finally(() => {
        familiar = null;
      });
  }
  return familiar;
}

// `sample`: a sample's published features (see loadSample). Samples are 28×28: drawn whole.
function loadBitmap(bitmap, sample) {
  const { width: w, height: h } = bitmap;
  const canvas = document.createElement("canvas");
  canvas.width = w;
  canvas.height = h;
  const ctx = canvas.getContext("2d");
  ctx.drawImage(bitmap, 0, 0);
  const rgba = new Uint8Array(ctx.getImageData(0, 0, w, h).data.buffer);
  const t = performance.now();
  show(state.client.load_sample(rgba, w, h, new Float32Array(sample.features), SAMPLES_MODEL), t);
}

// The wasm client's answer about a loaded image: kept and shown, or refused.
function show(json, t) {
  const info = JSON.parse(json);
  if (info.refused) throw new NothingToSee(info.refused);
  state.image = info;
  timings.infer_ms = performance.now() - t;
  showImage();
}

// A photo the browser decoded (as shown: EXIF orientation applied), at full resolution, strip
// by strip into the wasm client's reducer (`embed::reduce`, the CLI's): no browser resampling,
// so the reduced image is the CLI's whenever the two decoders give the same pixels. A strip
// is a whole number of the reducer's blocks high. The reducer refuses a photo past the limits
// with the CLI's words before any pixel is read.
function loadPhotoBitmap(bitmap) {
  const { width: w, height: h } = bitmap;
  let reducer;
  try {
    reducer = new PhotoReducer(w, h);
  } catch (e) {
    throw new TooLarge(e.message || String(e));
  }
  const f = reducer.factor();
  const rows = Math.min(h, Math.max(f, Math.floor(STRIP_PIXELS / w / f) * f));
  const canvas = document.createElement("canvas");
  canvas.width = w;
  canvas.height = rows;
  const ctx = canvas.getContext("2d", { willReadFrequently: true });
  const t = performance.now();
  for (let y = 0; y < h; y += rows) {
    const n = Math.min(rows, h - y);
    ctx.clearRect(0, 0, w, rows);
    ctx.drawImage(bitmap, 0, y, w, n, 0, 0, w, n);
    reducer.push_rows(new Uint8Array(ctx.getImageData(0, 0, w, n).data.buffer));
  }
  bitmap.close();
  show(state.client.load_photo(reducer), t);
}

// A sample (a data: URL) is decoded as an image, not fetched: the Content-Security-Policy
// allows data: images but no connection except to this origin. It is searched with the
// gallery model's features published with it (embed::sample): a 28×28 dataset image
// through the query model, which is trained on photos, keeps only about three quarters of
// the gallery's own nearest neighbours of it.
async function loadSample(sample) {
  showError("");
  clearResults("No search yet for this photo.");
  try {
    const img = new Image();
    img.src = sample.png;
    await img.decode();
    await familiarityReady();
    loadBitmap(await createImageBitmap(img), sample);
  } catch (e) {
    if (e instanceof NothingToSee) {
      forgetImage("there is nothing in it to search for.");
      showError(`This image cannot be searched: ${e.message}.`);
      return;
    }
    if (e instanceof NoFamiliarityCheck) {
      forgetImage("the check that a photo shows clothing could not be loaded.");
      showError(`That sample cannot be used yet: ${e.message}`);
      return;
    }
    forgetImage("the sample could not be opened.");
    showError("That sample could not be opened.");
  }
}

// A photo that could not be used: nothing of the previous one stays (its preview, class,
// status, matches), so nothing on screen looks like this photo's.
function forgetImage(why) {
  state.image = null;
  $("search").disabled = true;
  $("query").hidden = true;
  $("prediction").textContent = "";
  $("unfamiliar").hidden = true;
  $("cut-off").textContent = "";
  $("cut-off").hidden = true;
  clearResults("No search yet: load a photo first.");
  status(`No photo loaded: ${why}`);
}

// A photo file, through the browser's decoder (the CLI decodes with `embed::photo_file`; the
// page leaves that decoder out of its first load): the file's own values (no colour
// conversion, no premultiplied alpha), turned as its EXIF orientation says, as the CLI does.
export async function loadFromFile(file) {
  showError("");
  if (!file) return;
  clearResults("No search yet for this photo.");
  const refuse = (why) => {
    forgetImage(why);
    showError(`“${file.name}” cannot be used: ${why}`);
  };
  const L = await PHOTO_LIMITS;
  if (file.size > L.max_bytes) return refuse(`it is larger than ${L.max_bytes / 1048576} MiB. Try a smaller copy of the photo.`);
  let bitmap;
  try {
    bitmap = await createImageBitmap(file, {
      colorSpaceConversion: "none",
      premultiplyAlpha: "none",
      imageOrientation: "from-image",
    });
  } catch {
    return refuse("it is not an image this page can open. Try a JPEG or PNG photo.");
  }
  try {
    await familiarityReady();
  } catch (e) {
    bitmap.close();
    return refuse(e.message);
  }
  try {
    loadPhotoBitmap(bitmap);
  } catch (e) {
    if (e instanceof NothingToSee) return refuse(`${e.message}. It was not classified or searched.`);
    if (e instanceof TooLarge) return refuse(`${e.message}: the page reads photos of ${L.words}. Try a smaller copy of the photo.`);
    refuse(`it could not be read (${e.message || e}).`);
  }
}

function showImage() {
  const ctx = $("preview").getContext("2d");
  const px = ctx.createImageData(28, 28);
  state.image.pixels.forEach((v, i) => px.data.set([v, v, v, 255], 4 * i));
  ctx.putImageData(px, 0, 0);
  const guess = `${article(state.image.class_name)} ${state.image.class_name.toLowerCase()} ` +
    `(${Math.round(100 * state.image.probability)}% sure)`;
  $("prediction").textContent = `The model thinks this is ${guess}. That stays in your browser.`;
  // The preview's text alternative: what it shows, and what the model made of it.
  $("preview").setAttribute("aria-label",
    `Your photo as the model sees it, 28 by 28 grey pixels: the model thinks it is ${guess}.`);
  // The model names a class for anything; the wasm client's out-of-distribution check
  // (embed::ood, computed in the browser) says when the photo looks like none.
  $("unfamiliar").textContent = state.image.unfamiliar_message || "";
  $("unfamiliar").hidden = !state.image.unfamiliar;
  // A garment cut by the photo's edge (embed::cut, in the wasm client): the CLI's words.
  $("cut-off").textContent = state.image.cut_off_message || "";
  $("cut-off").hidden = !state.image.cut_off;
  $("query").hidden = false;
  $("search").disabled = false;
  const what =
    state.image.features === "published"
      ? "Sample ready: it is searched with the gallery's own features of it, published with the page"
      : state.image.published_error
        ? `Sample ready: the features published with it were refused (${state.image.published_error}), so it is searched with the on-device model's, as a photo`
        : "Photo ready";
  status(`${what} (model: ${timings.infer_ms.toFixed(1)} ms). Choose a privacy level and search.`);
}
