// The privacy level (the ε slider and what it means, in figures) and the budget this browser has spent:
// receipts kept in localStorage, composed by the wasm client, and the warning before a search
// would pass the user's limit.
import { compose_budget, delta, release_words, total_words } from "./pkg/privatemail_client_wasm.js";
import { $, epsilon, protocol, state, status } from "./page.js";
import { updatePlan } from "./plan.js";
import { blockHint, frameHint } from "./disclosure.js";

export const RECEIPTS_KEY = "privatemail.receipts";
export const LIMIT_KEY = "privatemail.limit";

// The slider's hint: what the server can learn at this ε, in figures (web/disclosure.js).
function hint(eps) {
  const p = protocol();
  if (p === "pir") return "Private information retrieval spends no ε at all: this slider applies only to the other ways to search.";
  if (p === "whole") return "The whole gallery spends no ε: the server learns nothing about your photo, whatever this slider says.";
  if (p === "frame" || p === "paper") return frameHint(eps, delta(), p === "paper");
  return blockHint(eps, state.currentPlan);
}

export function updateEpsilon() {
  const e = epsilon();
  $("eps-value").textContent = String(e);
  $("epsilon").setAttribute("aria-valuetext", `epsilon ${e}`);
  updatePlan(); // first: the hint follows the plan's figures
  $("eps-hint").textContent = hint(e);
}

function receipts() {
  try { return JSON.parse(localStorage.getItem(RECEIPTS_KEY) || "[]"); } catch { return []; }
}

function total(list) {
  return JSON.parse(compose_budget(JSON.stringify(list), delta()));
}

// What a release was, in words: the way of searching, then the receipt's own mechanism and
// figures as the wasm client words them (client::words, the CLI's words too).
const VIA = { blocks: "A block search", frame: "An anchor-frame search", paper: "An Algorithm 1 search" };
export function releaseWords(r) {
  const via = VIA[r.via] ?? (r.mechanism === "block_subset" ? "A block search" : "A noisy-numbers search");
  return `${via}, ${release_words(JSON.stringify(r))}`;
}

// How a total was composed (the smallest of the valid compositions), in words with its
// figures, from the receipts (client::words::total): {method, text, short}.
export function totalWords(list) {
  return JSON.parse(total_words(JSON.stringify(list), delta()));
}

// The last addition this page made, for its explanation ("… added 4.31: 19.00 → 23.31").
let lastAddition = "";

export function updateBudget() {
  const list = receipts();
  const w = totalWords(list);
  $("spent").textContent = w.short;
  $("spent-method").textContent = `(${w.method})`;
  $("spent-how").textContent = (list.length ? `${w.text} ` : "") + lastAddition;
  const stored = localStorage.getItem(LIMIT_KEY);
  if (stored && document.activeElement !== $("limit")) $("limit").value = stored;
}

// Add a release's receipt to the budget this browser has spent: the ledger the wasm search
// drivers call before they hand out the request that carries it (it must throw if it cannot),
// with the protocol it came from (words only: the wasm client composes the receipt's figures).
export function spend(receipt) {
  const before = total(receipts());
  const r = { ...receipt, via: protocol() };
  localStorage.setItem(RECEIPTS_KEY, JSON.stringify([...receipts(), r]));
  const after = total(receipts());
  lastAddition = `The last search added ${(after.epsilon - before.epsilon).toFixed(2)} to the total ` +
    `(${before.epsilon.toFixed(2)} → ${after.epsilon.toFixed(2)}). ${releaseWords(r)}.`;
  updateBudget();
}

// Forget the explanation of the last addition (the receipts were forgotten).
export function forgetLastAddition() { lastAddition = ""; }

// If this release would bring the spent budget over the user's limit, keep it unsent and ask.
// Nothing has been sent or fetched yet: a release that is never used spends no budget.
export function holdOverBudget(out) {
  const before = total(receipts());
  const r = { ...out.receipt, via: protocol() };
  const list = [...receipts(), r];
  const after = total(list);
  const limit = Number($("limit").value);
  if (after.epsilon <= limit) return false;
  state.pending = out;
  $("warning-text").textContent =
    `This search would bring the privacy spent by this browser from ` +
    `ε = ${before.epsilon.toFixed(2)} to ε = ${after.epsilon.toFixed(2)}, above your limit of ${limit}. ` +
    `${releaseWords(r)}. How the total adds up: ${totalWords(list).text}`;
  $("warning").hidden = false;
  $("search-anyway").focus();
  status("Waiting for your decision.");
  return true;
}
