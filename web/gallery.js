// Which gallery this page searches, and where the page's own code came from. The gallery is a
// setting of the page, not its origin: `#gallery=URL` in the page's address (a fragment, so the
// host that served the page never sees it), by default the page's own origin — the gallery that
// served it. The same bundle then runs from the gallery, from any static host, or from
// `privatemail page`, which serves it from the person's own machine (docs/page.md).
//
// Addresses the gallery hands out (its API, a document's block or answer URL) are absolute or
// start with "/": they are the gallery's, resolved against its URL as the CLI resolves them.
// Every other relative name (pkg/…) is one of this page's own files.

function parseGallery() {
  const asked = new URLSearchParams(location.hash.slice(1)).get("gallery");
  if (asked === null) return { url: location.origin, problem: "" };
  try {
    const u = new URL(asked);
    if (u.protocol !== "http:" && u.protocol !== "https:") throw new Error("not http(s)");
    if (u.username || u.password || u.search || u.hash) throw new Error("extra parts");
    return { url: (u.origin + u.pathname).replace(/\/+$/, ""), problem: "" };
  } catch {
    return { url: null, problem: `The gallery address ${JSON.stringify(asked.slice(0, 200))} is not an http(s) URL.` };
  }
}

const parsed = parseGallery();
// The gallery's base URL (no trailing slash), or null when the setting is unusable.
export const GALLERY = parsed.url;
export const GALLERY_PROBLEM = parsed.problem;
export const GALLERY_ORIGIN = GALLERY ? new URL(GALLERY).origin : null;

const LOOPBACK = new Set(["127.0.0.1", "localhost", "[::1]"]);

// Where this page's code came from: "gallery" (the gallery's own server served it), "machine"
// (a server on this machine that is not the gallery: `privatemail page`), or "elsewhere" (a
// static host). Only honest code says this truthfully: a server that changed the page could
// make it say anything, which is why the page's code should not come from the gallery.
export const CODE_FROM = GALLERY_ORIGIN === location.origin ? "gallery"
  : LOOPBACK.has(location.hostname) ? "machine" : "elsewhere";

// The gallery's address for `url` as a document or the page names it.
export function galleryUrl(url) {
  if (/^https?:\/\//i.test(url)) return url;
  if (url.startsWith("/")) return GALLERY + url;
  return new URL(url, location.href).href;
}

// Narrow where the page may connect to this page's origin and `origins` (the gallery's and the
// blocks'), with a second Content-Security-Policy the browser enforces beside the bundle's (a
// request must pass both). Called once, after the gallery's documents named their origins and
// before any photo is read.
let narrowed = false;
export function narrowConnections(origins) {
  if (narrowed) return;
  narrowed = true;
  const list = [...new Set(origins.filter(Boolean))].filter((o) => /^https?:\/\/[A-Za-z0-9.\-:[\]]+$/.test(o));
  const meta = document.createElement("meta");
  meta.httpEquiv = "Content-Security-Policy";
  meta.content = `connect-src 'self' ${list.join(" ")}`;
  document.head.append(meta);
}
