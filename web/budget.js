// The privacy level (the ε slider and what it means, in figures) and the budget this browser has spent:
// receipts kept in localStorage, composed by the wasm client, and the warning before a search
// would pass the user's limit.
import { compose_budget } from "./pkg/privatemail_client_wasm.js";
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
  if (p === "frame" || p === "paper") return frameHint(eps, state.config.privacy_defaults.delta, p === "paper");
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
  return JSON.parse(compose_budget(JSON.stringify(list), state.config.privacy_defaults.delta));
}

// What a release was, in words ("a frame search at ε = 8, δ = 1e-5").
const VIA = { blocks: "a block search", frame: "an anchor-frame search", paper: "an Algorithm 1 search" };
export function releaseWords(r) {
  const via = VIA[r.via] ?? (r.mechanism === "block_subset" ? "a block search" : "a noisy-numbers search");
  return r.mechanism === "block_subset"
    ? `${via} at ε = ${r.epsilon} (pure ε-DP)`
    : `${via} at ε = ${r.epsilon}, δ = ${r.delta.toExponential(0)} (discrete Gaussian noise, ρ = ${r.zcdp_rho.toFixed(2)} in zero-concentrated DP)`;
}

// How a total was composed (`dp::budget::Total`: the smallest of the valid
// compositions), in words with its figures.
export function compositionWords(t, list) {
  const d = t.delta.toExponential(0);
  const eps = list.map((r) => r.epsilon);
  const sum = eps.length <= 8 ? `${eps.join(" + ")} = ${t.basic_epsilon.toFixed(2)}` : `${t.basic_epsilon.toFixed(2)} in all`;
  switch (t.method) {
    case "basic":
      return `Each search's ε is added (basic composition; their δ's add up to ${t.basic_delta.toExponential(1)}, within δ = ${d}): ${sum}.`;
    case "zcdp":
      return `Each search's ρ is added (zero-concentrated DP): ρ = ${t.zcdp_rho.toFixed(2)} in all, which is ε = ${t.epsilon.toFixed(2)} at δ = ${d}. ` +
        `(Adding the ε's instead would give ${t.basic_epsilon.toFixed(2)}${t.basic_delta > t.delta ? `, and their δ's, ${t.basic_delta.toExponential(1)}, would pass δ = ${d}` : ""}.)`;
    case "pure_plus_zcdp": {
      const gauss = t.epsilon - t.pure_epsilon;
      return `The block searches' ε's are added (pure ε-DP): ${t.pure_epsilon.toFixed(2)}; the noisy-numbers searches' ρ's are added ` +
        `(zero-concentrated DP): ρ = ${t.gaussian_rho.toFixed(2)}, which is ε = ${gauss.toFixed(2)} at δ = ${d}; together ε = ${t.epsilon.toFixed(2)} at δ = ${d}. ` +
        `(Adding every ε would give ${t.basic_epsilon.toFixed(2)}${t.basic_delta > t.delta ? ` at δ = ${t.basic_delta.toExponential(1)}, above ${d}` : ""}.)`;
    }
    default:
      return "Nothing has been released by this browser yet.";
  }
}

// The last addition this page made, for its explanation ("… added 4.31: 19.00 → 23.31").
let lastAddition = "";

export function updateBudget() {
  const list = receipts();
  const t = total(list);
  $("spent").textContent = `ε = ${t.epsilon.toFixed(2)} over ${t.releases} search${t.releases === 1 ? "" : "es"}`;
  $("spent-how").textContent = (list.length ? `${compositionWords(t, list)} ` : "") + lastAddition;
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
  lastAddition = `The last search, ${releaseWords(r)}, added ${(after.epsilon - before.epsilon).toFixed(2)}: ` +
    `${before.epsilon.toFixed(2)} → ${after.epsilon.toFixed(2)}.`;
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
    `This search, ${releaseWords(r)}, would bring the privacy spent by this browser from ` +
    `ε = ${before.epsilon.toFixed(2)} to ε = ${after.epsilon.toFixed(2)}, above your limit of ${limit}. ` +
    `How: ${compositionWords(after, list)}`;
  $("warning").hidden = false;
  $("search-anyway").focus();
  status("Waiting for your decision.");
  return true;
}
