// Private information retrieval (PIR) in the page: the server learns nothing about the photo
// and the results are exact. Every request of a search — which, in what order, of what size,
// and what follows a failed check — is decided by the wasm client's search driver
// (`client::pir_search::driver`, the same code the CLI runs); this module only moves
// bytes: it makes the request the driver names and hands back the answer, nothing else, and
// never retries.
//
// After an answer fails a check that involved the photo's secret, the driver returns a refusal:
// it is stored (identity.js: by the gallery's key and normalised origin) before the error is
// shown, and every later search — of any protocol, under any of the gallery's names — is
// refused until the person clears it.

import { clientLimits, deadline, fetchBounded, wireOf } from "./net.js";
import { recordRefusal, storedRefusal } from "./identity.js";

const ANSWER_TYPE = { "content-type": "application/octet-stream" };

function httpError(r, what) {
  const e = new Error(`the server answered HTTP ${r.status} for ${what}`);
  e.status = r.status;
  return e;
}

// A body of exactly `bytes` (after decompression), at most `wire` on the wire. Never more is
// read.
async function exact(url, bytes, wire, signal, init, follow = true) {
  const { resp, bytes: got } = await fetchBounded(url, { maxBytes: bytes, maxWire: wire, signal, init, follow });
  if (!resp.ok) throw httpError(resp, init ? "a PIR query" : url);
  if (got.length !== bytes) throw new Error(`the server sent ${got.length} bytes for ${url}, expected ${bytes}`);
  return got;
}

// Why the last PIR document was refused by the wasm client ("" when it was not).
export let pirRefused = "";

// The PIR document (public, the same for everyone), loaded into the wasm client; null when the
// server offers none (yet) or its document is refused (then `pirRefused` says why: e.g. a seed
// that is not the one the client derives — nothing about the photo was used).
export async function loadPir(client) {
  pirRefused = "";
  const d = deadline((await clientLimits()).total_timeout_secs);
  let text;
  try {
    const { resp, bytes } = await fetchBounded("/api/v1/pir", {
      maxBytes: (await clientLimits()).max_json_bytes,
      signal: d.signal,
    });
    if (!resp.ok) return null;
    text = new TextDecoder().decode(bytes);
  } catch {
    return null;
  } finally {
    d.done();
  }
  try {
    client.load_pir(text);
    return JSON.parse(text);
  } catch (e) {
    pirRefused = String(e.message || e);
    return null;
  }
}

// The plan whose next search's photo-independent work is done (secrets, masks, key bodies:
// `client.pir_prepare`), or null. A preparation is used by one search; the wasm client drops
// one made for another plan or gallery version.
let preparedFor = null;

// Prepares the next search under `plan` while the person is busy choosing a photo: once the
// current task ends (so the page stays responsive), and only if not already prepared.
export function preparePir(client, plan) {
  const key = plan ? JSON.stringify(plan) : null;
  if (!key || key === preparedFor) return;
  preparedFor = key;
  setTimeout(() => {
    if (preparedFor !== key) return;
    try { client.pir_prepare(key); } catch { preparedFor = null; }
  }, 0);
}

// One PIR search for the loaded photo under `plan` (from `client.pir_plan`). Returns
// {done, bytes, timings}: `done` is the driver's outcome ({ok: true, results, thumb_side} or
// {ok: false, kind, message, refusal}).
export async function pirSearch(client, plan, onStep) {
  const d = deadline((await clientLimits()).total_timeout_secs);
  try {
    return await drive(client, plan, onStep, d.signal);
  } finally {
    d.done();
  }
}

const STEP_WORDS = {
  get: "Fetching the public search files (once per gallery version)…",
  post: "Asking for your matches without revealing which…",
};

async function drive(client, plan, onStep, signal) {
  const t = { started: performance.now(), client_ms: 0 };
  const once = { wire: 0, files: 0, cached: 0 };
  const timed = (f) => { const s = performance.now(); const v = f(); t.client_ms += performance.now() - s; return v; };
  t.prepared = preparedFor === JSON.stringify(plan);
  preparedFor = null;
  let step = JSON.parse(timed(() => client.pir_start(JSON.stringify(plan), storedRefusal() ?? undefined)));
  while (step.send) {
    const req = step.send;
    onStep(STEP_WORDS[req.method]);
    let answer;
    try {
      if (req.method === "get") {
        // Public files: from the browser's cache when it has them. Centroids may live on the
        // blocks' origin, where no redirect is followed.
        answer = await exact(req.url, req.bytes, req.wire_bytes, signal, undefined, req.file.kind !== "centroids");
        // What came over the network, and what from the browser's cache (Resource Timing).
        const w = wireOf(req.url);
        once.files += 1;
        if (w.known && w.cached) { once.cached += 1; once.wire += w.transfer; } else once.wire += w.known ? w.transfer : answer.length;
      } else {
        const body = timed(() => client.pir_body());
        answer = await exact(req.url, req.answer_bytes, req.answer_bytes, signal,
          { method: "POST", headers: ANSWER_TYPE, body });
      }
    } catch (e) {
      step = JSON.parse(client.pir_transport_failed(String(e.message || e)));
      step.done.status = e.status;
      break;
    }
    step = JSON.parse(timed(() => client.pir_answer(answer)));
  }
  const done = step.done;
  if (done.refusal && done.kind === "hostile") recordRefusal(JSON.stringify(done.refusal));
  t.total_ms = performance.now() - t.started;
  preparePir(client, plan);
  const bytes = { up: done.traffic.up, down: done.traffic.down, once: done.traffic.once };
  return { done, bytes, files: once, timings: t };
}
