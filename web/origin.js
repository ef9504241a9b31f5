// Saying where this page's code came from (`gallery.js`: CODE_FROM), how to get it from the
// person's own machine instead, and the form that sets the gallery. Words only: DOM text, never
// markup.
import { BUNDLED } from "./assets.js";
import { CODE_FROM, GALLERY } from "./gallery.js";

const $ = (id) => document.getElementById(id);

export function showCodeOrigin() {
  const here = location.origin;
  const gallery = GALLERY ?? "(no gallery set)";
  const words = {
    gallery: `This page's code came from the gallery's server (${here}): a server that changed it could see your photo.`,
    machine: `This page's code came from your machine (${here}); the gallery at ${gallery} serves it only data.`,
    elsewhere: `This page's code came from ${here}, not from the gallery at ${gallery}, which serves it only data.`,
  }[CODE_FROM];
  $("code-origin").textContent = words + (BUNDLED ? "" : " (A development copy: its files are not checked by their hashes.)");
  $("code-origin").dataset.from = CODE_FROM;
  $("run-locally").hidden = CODE_FROM === "machine";
  $("run-locally").open = false;
  $("gallery-for-cli").textContent = GALLERY ?? "URL";
  $("gallery-url").value = GALLERY ?? "";
  $("openapi").href = `${GALLERY ?? ""}/api/v1/openapi.json`;
}

// The gallery setting: `#gallery=URL` in the page's address, then a fresh start.
export function useGalleryForm() {
  $("gallery-form").addEventListener("submit", (e) => {
    e.preventDefault();
    const url = $("gallery-url").value.trim();
    location.hash = new URLSearchParams({ gallery: url }).toString();
    location.reload();
  });
}
