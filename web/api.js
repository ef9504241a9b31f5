// The page's server API: the wasm client's start (whose limits bound every answer) and the
// bounded, deadlined JSON GETs of `/api/v1/*`.
import init, { limits } from "./pkg/privatemail_client_wasm.js";
import { HostileAnswer, deadline, fetchBounded, setLimits } from "./net.js";

// ---- what a server may send: bounded sizes, a deadline, one origin -------------------------
// The limits are the CLI's (`shared::params::limits`), read from the wasm client once it is up.
export const wasmReady = init();
export const LIMITS = wasmReady.then(() => JSON.parse(limits()));
setLimits(LIMITS);

// A JSON answer from this page's server, as text, within its limit and the deadline.
export async function getJson(path, maxBytes) {
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
