// The gallery's identity on this page. The rules are the wasm client's (`client::identity`,
// the CLI's too): the gallery's Ed25519 key signs its configuration; the page verifies it,
// pins the key on first use, and keys a refusal by that key and by the gallery's normalised
// origin (every spelling of one host is one origin), so a server cannot shed a refusal by
// answering under another name with the same key, nor under the same name with a new key
// (that is refused until the person accepts it). The book — pins and refusals — lives in
// localStorage; this module passes it to the wasm client and stores what comes back.
import {
  gallery_origin, identity_accept, identity_before, identity_clear, identity_meet,
  identity_record, identity_refusal, identity_verify,
} from "./pkg/privatemail_client_wasm.js";

export const BOOK_KEY = "privatemail.identities";
// Where an earlier page kept its one refusal (per origin): moved into the book.
const LEGACY_KEY = "privatemail.refusal";

// The gallery searched: its normalised origin, its verified key, and why nothing may be sent
// to it (`{kind: "refused" | "new_key", message, presented}`), or null.
export const gallery = { origin: null, key: null, stop: null };

const book = () => localStorage.getItem(BOOK_KEY) ?? "";
function apply(checked) {
  const r = JSON.parse(checked);
  localStorage.setItem(BOOK_KEY, r.book);
  gallery.stop = r.stop;
  return r.stop;
}
function check() {
  apply(identity_before(book(), gallery.origin));
  if (!gallery.stop && gallery.key) apply(identity_meet(book(), gallery.origin, gallery.key));
  return gallery.stop;
}

// Before the page reads anything of the gallery's at `url` (a wasm client must be ready).
export function beforeContact(url) {
  gallery.origin = gallery_origin(url);
  gallery.key = null;
  const legacy = localStorage.getItem(LEGACY_KEY);
  if (legacy) {
    localStorage.setItem(BOOK_KEY, identity_record(book(), gallery.origin, undefined, legacy));
    localStorage.removeItem(LEGACY_KEY);
  }
  return check();
}

// After `GET /api/v1/identity` and `GET /api/v1/config` (as text): throws when the signature
// does not verify over the configuration; else the stop, if any (the key is pinned on first use).
export function meet(identityText, configText) {
  gallery.key = identity_verify(identityText, new TextEncoder().encode(configText));
  return check();
}

// The refusal standing against this gallery (JSON text, as `pir_start` takes it), or null.
export function storedRefusal() {
  if (!gallery.origin) return null;
  return identity_refusal(book(), gallery.origin, gallery.key ?? undefined) ?? null;
}

// After a search failed a check: refused by the key and the origin, before the failure is shown.
export function recordRefusal(refusalText) {
  localStorage.setItem(BOOK_KEY, identity_record(book(), gallery.origin, gallery.key ?? undefined, refusalText));
  return check();
}

// The person lifts the refusal (by every name and key it is known by).
export function clearRefusal() {
  localStorage.setItem(BOOK_KEY, identity_clear(book(), gallery.origin));
  return check();
}

// The person accepts the key the gallery now presents (after a `new_key` stop).
export function acceptKey() {
  const presented = gallery.stop?.presented;
  if (!presented) return check();
  localStorage.setItem(BOOK_KEY, identity_accept(book(), gallery.origin, presented));
  return check();
}
