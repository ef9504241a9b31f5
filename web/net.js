// What a server may send the page: bounded sizes, a deadline, one origin. Every answer the page
// reads goes through `fetchBounded` (JSON, blocks, PIR hints, the table and PIR answers), each
// with its own published or fixed size. The limits are the CLI's (`shared::params::limits`),
// read from the wasm client once it is up (`setLimits`).

import { GALLERY_ORIGIN, galleryUrl } from "./gallery.js";

let limitsReady = null;

// The promise of the limits (JSON from the wasm client's `limits()`).
export function setLimits(p) { limitsReady = p; }
export function clientLimits() { return limitsReady; }

export class HostileAnswer extends Error {}

// A deadline for one task: `signal` aborts every fetch given it when the time is up (or when
// `abort()` is called, e.g. after another download of the same search failed).
export function deadline(secs) {
  const ctl = new AbortController();
  const timer = setTimeout(() => ctl.abort(new DOMException("deadline", "TimeoutError")), secs * 1000);
  return { signal: ctl.signal, abort: () => ctl.abort(), done: () => clearTimeout(timer) };
}

// Read a response body as bytes, stopping the moment it passes `maxBytes` (after the browser's
// decompression) or its Content-Length passes `maxWire`. Generic: JSON answers, blocks and
// (later) PIR answers all go through it, each with its own published or fixed size.
export async function readBounded(resp, maxBytes, maxWire = maxBytes) {
  const wire = Number(resp.headers.get("content-length"));
  if (wire > maxWire) {
    resp.body?.cancel();
    throw new HostileAnswer(`the answer is larger than ${maxWire} bytes`);
  }
  if (!resp.body) return new Uint8Array(0);
  const reader = resp.body.getReader();
  const chunks = [];
  let n = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    n += value.byteLength;
    if (n > maxBytes) {
      reader.cancel();
      throw new HostileAnswer(`the answer is larger than ${maxBytes} bytes`);
    }
    chunks.push(value);
  }
  const out = new Uint8Array(n);
  let at = 0;
  for (const c of chunks) { out.set(c, at); at += c.byteLength; }
  return out;
}

// `fetch` held to what this page accepts: an answer of at most `maxBytes`, by the deadline's
// signal, from the origin asked (`galleryUrl`: the gallery's paths are resolved against its
// URL), with credentials only for this page's own origin (never for a gallery elsewhere).
// Redirects: none when `follow` is false (blocks: a browser cannot keep a redirect within an
// origin or bound their number, so a redirected block is a failed download) or for an origin
// neither this page's nor the gallery's;
// otherwise the browser's (at most 20), and an answer that ends on another origin is refused.
// Returns {resp, bytes}; the caller checks resp.ok.
export async function fetchBounded(url, { maxBytes, maxWire, signal, follow = true, init: extra = {} }) {
  const L = await limitsReady;
  const target = new URL(galleryUrl(url));
  const own = target.origin === location.origin;
  const home = own || target.origin === GALLERY_ORIGIN;
  const resp = await fetch(target, {
    ...extra,
    signal,
    credentials: own ? "same-origin" : "omit",
    redirect: home && follow ? "follow" : "error",
  });
  if (new URL(resp.url).origin !== target.origin) {
    resp.body?.cancel();
    throw new HostileAnswer("the server redirected to another origin");
  }
  const limit = resp.ok ? maxBytes : L.max_error_body_bytes;
  const bytes = await readBounded(resp, limit, resp.ok ? (maxWire ?? maxBytes) : limit);
  return { resp, bytes };
}

// A server's error message for the page: short, one line, no control characters.
export function serverMessage(bytes, fallback, L) {
  let msg = fallback;
  try { msg = String(JSON.parse(new TextDecoder().decode(bytes)).error.message); } catch {}
  return msg.replace(/[\u0000-\u001f\u007f-\u009f\u200b-\u200f\u202a-\u202e\u2060-\u2069]/g, "")
    .slice(0, L.max_error_message_chars);
}


// A level's centroids file (public, the same for everyone; the level comes from the public
// plan, never the photo): fetched at most once per gallery version — the wasm client keeps
// verified centroids by their SHA-256 and asks for nothing it holds — within its published
// size, by the deadline, then checked (size, SHA-256, header) and kept by the wasm client,
// which throws on any mismatch. Returns the bytes fetched (0 when already held).
export async function fetchCentroids(client, level) {
  const need = client.centroids_request(level);
  if (!need) return 0;
  const req = JSON.parse(need);
  const d = deadline((await limitsReady).total_timeout_secs);
  try {
    const { resp, bytes } = await fetchBounded(req.url, {
      maxBytes: req.max_bytes,
      maxWire: req.max_wire_bytes,
      signal: d.signal,
      follow: false,
    });
    if (!resp.ok) {
      const err = new Error(`the server answered HTTP ${resp.status} for the gallery's centroids`);
      err.status = resp.status;
      throw err;
    }
    client.set_centroids(level, bytes);
    return bytes.length;
  } finally {
    d.done();
  }
}

// What the browser says it moved for the last request of `url` (Resource Timing): the bytes
// over the network (headers included; 0 from its cache), the body as sent (`encoded`) and whether the body came from its
// cache (unchanged, or revalidated with a 304). `known` is false where the browser does not
// say (no entry, or another origin without Timing-Allow-Origin).
export function wireOf(url) {
  const name = new URL(galleryUrl(url)).href;
  const e = performance.getEntriesByName(name, "resource").at(-1);
  if (!e || (e.transferSize === 0 && e.decodedBodySize === 0 && e.encodedBodySize === 0)) {
    return { known: false, transfer: 0, encoded: 0, cached: false };
  }
  return { known: true, transfer: e.transferSize, encoded: e.encodedBodySize,
    cached: e.transferSize === 0 || e.transferSize < e.encodedBodySize };
}
