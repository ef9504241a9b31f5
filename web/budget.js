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

export function updateBudget() {
  const t = total(receipts());
  $("spent").textContent = `ε = ${t.epsilon.toFixed(2)} over ${t.releases} search${t.releases === 1 ? "" : "es"}`;
  const stored = localStorage.getItem(LIMIT_KEY);
  if (stored && document.activeElement !== $("limit")) $("limit").value = stored;
}

// Add a release's receipt to the budget this browser has spent (the request is leaving).
export function spend(receipt) {
  localStorage.setItem(RECEIPTS_KEY, JSON.stringify([...receipts(), receipt]));
  updateBudget();
}

// If this release would bring the spent budget over the user's limit, keep it unsent and ask.
// Nothing has been sent or fetched yet: a release that is never used spends no budget.
export function holdOverBudget(out) {
  const after = total([...receipts(), out.receipt]);
  const limit = Number($("limit").value);
  if (after.epsilon <= limit) return false;
  state.pending = out;
  $("warning-text").textContent =
    `This search would bring the privacy spent by this browser to ε = ${after.epsilon.toFixed(2)}, ` +
    `above your limit of ${limit}.`;
  $("warning").hidden = false;
  $("search-anyway").focus();
  status("Waiting for your decision.");
  return true;
}
