// The page's server API: the wasm client's start (whose limits bound every answer) and the
// bounded, deadlined JSON GETs of `/api/v1/*`.
import init, { limits } from "./pkg/privatemail_client_wasm.js";
import { HostileAnswer, deadline, fetchBounded, setLimits } from "./net.js";

// ---- what a server may send: bounded sizes, a deadline, one origin -------------------------
// The limits are the CLI's (`shared::params::limits`), read from the wasm client once it is up.
export const wasmReady = init();
export const LIMITS = wasmReady.then(() => JSON.parse(limits()));
setLimits(LIMITS);

// An answer from this page's server, as bytes, within `maxBytes` and the deadline.
async function getBytes(path, maxBytes) {
  const L = await LIMITS;
  const d = deadline(L.total_timeout_secs);
  let got;
  try {
    got = await fetchBounded(path, { maxBytes, signal: d.signal });
  } catch (e) {
    if (e instanceof HostileAnswer) throw new Error(`The server's answer for ${path} was refused: ${e.message}.`);
    if (e?.name === "TimeoutError" || d.signal.aborted) throw new Error(`The server did not answer ${path} in time.`);
    throw new Error("Cannot reach the search server. Check that it is running and try again.");
  } finally {
    d.done();
  }
  if (!got.resp.ok) throw new Error(`The server could not provide ${path} (HTTP ${got.resp.status}).`);
  return got.bytes;
}

// A JSON answer from this page's server, as text, within its limit and the deadline.
export async function getJson(path, maxBytes) {
  const L = await LIMITS;
  return new TextDecoder().decode(await getBytes(path, maxBytes ?? L.max_json_bytes));
}

// One of the on-device models' files (`limits()`: `max_model_bytes`, the longest query model
// file, and `class_model_bytes`, the class model's exact length): not a byte more is read, and
// an `exact` file of another length is refused here (the wasm client refuses any file that
// does not parse, a query model of the wrong length for its header too). Before any photo is
// chosen.
export async function getModel(path, lengthKey, exact) {
  const want = (await LIMITS)[lengthKey];
  const bytes = await getBytes(path, want);
  if (exact && bytes.byteLength !== want) {
    throw new Error(`The server's answer for ${path} was refused: ${bytes.byteLength} bytes, not the ${want} of a model file.`);
  }
  return bytes;
}
