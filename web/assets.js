// The files this page fetches itself besides its modules (the wasm client, the three models, the
// evaluation's table): name → {url, integrity}. In the source tree (web/) the table is empty and
// files are fetched by their own names, unchecked; the release bundle (crates/pagebundle, run by
// scripts/build-web.sh into web/dist/) replaces the line below with every file's hashed name and
// SHA-384, and `fetch(…, {integrity})` then makes the browser refuse any other bytes before the
// page uses them.
export const FILES = null;

// `{url, integrity}` for one of the page's own files, e.g. "pkg/query.bin".
export function asset(name) {
  return FILES?.[name] ?? { url: name, integrity: undefined };
}

// Whether this copy of the page is the release bundle (every file checked by its hash).
export const BUNDLED = FILES !== null;
