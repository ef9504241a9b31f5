// Private information retrieval (PIR) in the page: the server learns nothing about the photo
// and the results are exact. The wasm client makes the queries, checks every answer and ranks;
// this module only moves bytes.
//
// Leakage rule: every search makes the same requests of the same sizes in the same order,
// whatever the photo — the public files (hints, the ranking table: identical for everyone,
// immutable, cached by the browser), then the ranking query (a `level` plan), then exactly K
// thumbnail queries. The ranking step never throws on a bad answer (the wasm client keeps the
// error), so the thumbnail request goes out either way; nothing is ever retried.

const ANSWER_TYPE = { "content-type": "application/octet-stream" };

// Bytes of a public file (a hint or the table), from the browser's cache when it has them.
async function publicFile(url) {
  const r = await fetch(url, { credentials: "same-origin" });
  if (!r.ok) throw httpError(r, url);
  return new Uint8Array(await r.arrayBuffer());
}

function httpError(r, what) {
  const e = new Error(`the server answered HTTP ${r.status} for ${what}`);
  e.status = r.status;
  return e;
}

async function post(url, body, expect) {
  const r = await fetch(url, { method: "POST", headers: ANSWER_TYPE, body, credentials: "same-origin" });
  if (!r.ok) throw httpError(r, "a PIR query");
  const bytes = new Uint8Array(await r.arrayBuffer());
  if (expect !== undefined && bytes.length !== expect) {
    throw new Error(`the server's PIR answer has ${bytes.length} bytes, expected ${expect}`);
  }
  return bytes;
}

// The PIR document (public, the same for everyone), loaded into the wasm client; null when the
// server offers none (yet).
export async function loadPir(client) {
  try {
    const r = await fetch("/api/v1/pir");
    if (!r.ok) return null;
    const text = await r.text();
    client.load_pir(text);
    return JSON.parse(text);
  } catch {
    return null;
  }
}

// One PIR search for the loaded photo under `plan` (from `client.pir_plan`). Returns the
// results (checked) and what crossed the wire.
export async function pirSearch(client, doc, plan, k, onStep) {
  const t = { started: performance.now(), client_ms: 0 };
  const bytes = { up: 0, down: 0, once: 0 };
  const timed = (f) => { const s = performance.now(); const v = f(); t.client_ms += performance.now() - s; return v; };
  const hint = async (db, sha) => {
    if (client.pir_has_hint(sha)) return;
    const b = await publicFile(`${doc.answer_url}/${db}/hint`);
    bytes.once += b.length;
    timed(() => client.pir_set_hint(db, b));
  };
  onStep("Fetching the public search files (once per gallery version)…");
  await hint("thumbs", doc.thumbs.hint_sha256);
  const r = plan.ranking;
  if (r.kind === "table") {
    const table = await publicFile(`${doc.answer_url}/rank`);
    bytes.once += table.length;
    onStep("Ranking the whole gallery in your browser…");
    timed(() => client.pir_rank_table(table, k));
  } else {
    await hint(String(r.level), doc.levels[r.level].hint_sha256);
    onStep("Asking for your photo's part of the gallery without revealing which…");
    const body = timed(() => client.pir_rank_query(r.level));
    bytes.up += body.length;
    const answer = await post(`${doc.answer_url}/${r.level}`, body);
    bytes.down += answer.length;
    timed(() => client.pir_rank_answer(answer, k));
  }
  onStep("Fetching the pictures of the matches without revealing which…");
  const body = timed(() => client.pir_thumbs_query(k));
  bytes.up += body.length;
  const answer = await post(`${doc.answer_url}/thumbs`, body);
  bytes.down += answer.length;
  const ranked = JSON.parse(timed(() => client.pir_thumbs_answer(answer)));
  t.total_ms = performance.now() - t.started;
  return { ranked, bytes, timings: t };
}
