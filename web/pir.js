// Private information retrieval (PIR) in the page: the server learns nothing about the photo
// and the results are exact. The wasm client makes the queries, checks every answer and ranks;
// this module only moves bytes.
//
// Leakage rule: every search makes the same requests of the same sizes in the same order,
// whatever the photo — the public files (hints, the ranking table, the scores' public file, a
// level's centroids: identical for everyone, immutable, cached by the browser), then the
// ranking query (a `level` or `scores` plan), then exactly K
// thumbnail queries. The ranking step never throws on a bad answer (the wasm client keeps the
// error), so the thumbnail request goes out either way; nothing is ever retried.

import { clientLimits, deadline, fetchBounded, fetchCentroids } from "./net.js";

const ANSWER_TYPE = { "content-type": "application/octet-stream" };

function httpError(r, what) {
  const e = new Error(`the server answered HTTP ${r.status} for ${what}`);
  e.status = r.status;
  return e;
}

// A public file (a hint or the table) of exactly the published size, from the browser's cache
// when it has it; a PIR answer of exactly the size its query fixes. Never more is read.
async function exact(url, bytes, signal, init) {
  const { resp, bytes: got } = await fetchBounded(url, { maxBytes: bytes, signal, init });
  if (!resp.ok) throw httpError(resp, init ? "a PIR query" : url);
  if (got.length !== bytes) throw new Error(`the server sent ${got.length} bytes for ${url}, expected ${bytes}`);
  return got;
}

// The PIR document (public, the same for everyone), loaded into the wasm client; null when the
// server offers none (yet).
export async function loadPir(client) {
  const d = deadline((await clientLimits()).total_timeout_secs);
  try {
    const { resp, bytes } = await fetchBounded("/api/v1/pir", {
      maxBytes: (await clientLimits()).max_json_bytes,
      signal: d.signal,
    });
    if (!resp.ok) return null;
    const text = new TextDecoder().decode(bytes);
    client.load_pir(text);
    return JSON.parse(text);
  } catch {
    return null;
  } finally {
    d.done();
  }
}

// One PIR search for the loaded photo under `plan` (from `client.pir_plan`). Returns the
// results (checked) and what crossed the wire.
export async function pirSearch(client, doc, plan, k, onStep) {
  const d = deadline((await clientLimits()).total_timeout_secs);
  try {
    return await search(client, doc, plan, k, onStep, d.signal);
  } finally {
    d.done();
  }
}

// Hint bytes of a database (rows × N u32).
const hintBytes = (db) => 4 * db.shape.rows * 1024;
// Answer bytes of `n` query vectors.
const answerBytes = (db, n) => 4 * db.shape.rows * n;
const perRecord = (db) => Math.max(1, Math.floor(db.shape.record_len / db.shape.rows));

async function search(client, doc, plan, k, onStep, signal) {
  const t = { started: performance.now(), client_ms: 0 };
  const bytes = { up: 0, down: 0, once: 0 };
  const timed = (f) => { const s = performance.now(); const v = f(); t.client_ms += performance.now() - s; return v; };
  const hint = async (name, db) => {
    if (client.pir_has_hint(db.hint_sha256)) return;
    const b = await exact(`${doc.answer_url}/${name}/hint`, hintBytes(db), signal);
    bytes.once += b.length;
    timed(() => client.pir_set_hint(name, b));
  };
  const post = (name, body, expect) =>
    exact(`${doc.answer_url}/${name}`, expect, signal, { method: "POST", headers: ANSWER_TYPE, body });
  onStep("Fetching the public search files (once per gallery version)…");
  await hint("thumbs", doc.thumbs);
  const r = plan.ranking;
  if (r.kind === "table") {
    if (!client.pir_has_table(doc.rank_table.sha256)) {
      const table = await exact(`${doc.answer_url}/rank`, doc.rank_table.bytes, signal);
      bytes.once += table.length;
      timed(() => client.pir_set_table(table));
    }
    onStep("Ranking the whole gallery in your browser…");
    timed(() => client.pir_rank_table(k));
  } else if (r.kind === "scores") {
    const sd = doc.scores;
    if (!client.pir_has_scores(sd.public.sha256)) {
      const file = await exact(`${doc.answer_url}/scores/hint`, sd.public.bytes, signal);
      bytes.once += file.length;
      timed(() => client.pir_set_scores(file));
    }
    bytes.once += await fetchCentroids(client, sd.level);
    onStep("Scoring your photo's part of the gallery, encrypted, without revealing which…");
    const body = timed(() => client.pir_scores_query());
    bytes.up += body.length;
    const answer = await post("scores", body, sd.answer_bytes);
    bytes.down += answer.length;
    timed(() => client.pir_scores_answer(answer, k));
  } else {
    const db = doc.levels[r.level];
    await hint(String(r.level), db);
    bytes.once += await fetchCentroids(client, r.level);
    onStep("Asking for your photo's part of the gallery without revealing which…");
    const body = timed(() => client.pir_rank_query(r.level));
    bytes.up += body.length;
    const answer = await post(String(r.level), body, answerBytes(db, perRecord(db)));
    bytes.down += answer.length;
    timed(() => client.pir_rank_answer(answer, k));
  }
  onStep("Fetching the pictures of the matches without revealing which…");
  const body = timed(() => client.pir_thumbs_query(k));
  bytes.up += body.length;
  const answer = await post("thumbs", body, answerBytes(doc.thumbs, k));
  bytes.down += answer.length;
  const ranked = JSON.parse(timed(() => client.pir_thumbs_answer(answer)));
  t.total_ms = performance.now() - t.started;
  return { ranked, bytes, timings: t };
}
