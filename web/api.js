// The page's server API: the wasm client's start (whose limits bound every answer), the
// bounded, deadlined JSON GETs of the gallery's `/api/v1/*`, and the page's own files (the wasm
// client, the models, the evaluation's table), each checked against its hash in the release
// bundle (`assets.js`) by the browser before it is used.
import init, { limits, photo_limits } from "./pkg/privatemail_client_wasm.js";
import { HostileAnswer, deadline, fetchBounded, setLimits } from "./net.js";
import { asset } from "./assets.js";

// ---- what a server may send: bounded sizes, a deadline, one origin -------------------------
// The limits are the CLI's (`shared::params::limits`), read from the wasm client once it is up.
// The wasm file is this page's own, compiled only once the browser has checked its hash.
const wasmFile = asset("pkg/privatemail_client_wasm_bg.wasm");
export const wasmReady = init({
  module_or_path: fetch(wasmFile.url, { integrity: wasmFile.integrity, credentials: "same-origin" }),
});
export const LIMITS = wasmReady.then(() => JSON.parse(limits()));
// The photo limits both clients apply (`embed::reduce`: bytes, pixels, side, working side).
export const PHOTO_LIMITS = wasmReady.then(() => JSON.parse(photo_limits()));
setLimits(LIMITS);

// An answer as bytes, within `maxBytes` and the deadline: the gallery's for a path it names
// ("/api/v1/…"), or one of this page's own files (`own`: its `asset`, checked against its
// integrity when the bundle gives one). A page's own file that fails is named as such: it
// comes from the page's origin, which may not be the search server's.
async function getBytes(path, maxBytes, own) {
  const integrity = own?.integrity;
  const L = await LIMITS;
  const d = deadline(L.total_timeout_secs);
  let got;
  try {
    got = await fetchBounded(path, { maxBytes, signal: d.signal, init: integrity ? { integrity } : {} });
  } catch (e) {
    if (e instanceof HostileAnswer) throw new Error(`The server's answer for ${path} was refused: ${e.message}.`);
    if (e?.name === "TimeoutError" || d.signal.aborted) throw new Error(`The server did not answer ${path} in time.`);
    if (own) throw new Error(`This page's file ${path} could not be loaded${integrity ? " or does not match this version's hash" : ""}.`);
    throw new Error("Cannot reach the search server. Check that it is running and try again.");
  } finally {
    d.done();
  }
  if (!got.resp.ok) throw new Error(`The server could not provide ${path} (HTTP ${got.resp.status}).`);
  return got.bytes;
}

// A JSON answer from the gallery, as text, within its limit and the deadline.
export async function getJson(path, maxBytes) {
  const L = await LIMITS;
  return new TextDecoder().decode(await getBytes(path, maxBytes ?? L.max_json_bytes));
}

// One of this page's own text files (e.g. "pkg/results.csv"), checked by its hash, as text.
export async function getPageText(name, maxBytes) {
  const f = asset(name);
  return new TextDecoder().decode(await getBytes(f.url, maxBytes, f));
}

// One of the on-device models' files (`limits()`: `max_model_bytes`, the longest query model
// file, and `class_model_bytes`, the class model's exact length), this page's own, checked by
// its hash: not a byte more is read, and an `exact` file of another length is refused here (the
// wasm client refuses any file that does not parse, a query model of the wrong length for its
// header too). The two models before any photo is chosen, the familiarity model with the first.
export async function getModel(name, lengthKey, exact) {
  const want = (await LIMITS)[lengthKey];
  const f = asset(name);
  const bytes = await getBytes(f.url, want, f);
  if (exact && bytes.byteLength !== want) {
    throw new Error(`The server's answer for ${name} was refused: ${bytes.byteLength} bytes, not the ${want} of a model file.`);
  }
  return bytes;
}
