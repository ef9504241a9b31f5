// The ways to search the page offers and shows: which the server's public documents allow
// (the partition for block download, the PIR document for private retrieval) and the parts of
// the page for the chosen one.
import { $, K, pirRanking, protocol, showError, state } from "./page.js";
import { LIMITS, getJson } from "./api.js";
import { loadPir, pirRefused } from "./pir.js";
import { updateEpsilon } from "./budget.js";

// The partition document is public and the same for everyone; a stale one is refetched whole.
export async function loadPartition() {
  state.partition = null;
  try {
    const text = await getJson("/api/v1/partition", (await LIMITS).max_partition_doc_bytes);
    state.client.load_partition(text);
    state.partition = JSON.parse(text);
  } catch (e) {
    state.partition = null;
    state.partitionProblem = `Block download is unavailable: ${e.message || e} The noisy-numbers search still works.`;
    $("plan").textContent = state.partitionProblem;
  }
  const whole = $("protocol").querySelector("option[value='whole']");
  const allowed = !!state.partition && state.partition.allow_full_download && state.partition.levels.some((l) => l.whole);
  whole.hidden = !allowed;
  whole.disabled = !allowed;
  if (!state.partition) $("protocol").value = "frame";
  else if (!allowed && protocol() === "whole") $("protocol").value = "blocks";
}

// The smallest offered budget (from the current one up to 4 MiB, the per-search target) at
// which the PIR plan is light enough to be the default (its one-time download within the
// shared bound; `PirPlan.page_default`), or null. At 1,000,000 images the hintless plan needs
// about 3.8 MiB a search, above the page's 512 KiB default for blocks.
function pirDefaultBudget() {
  const fits = (v) => {
    try {
      return JSON.parse(state.client.pir_plan(K, Number(v), pirRanking())).page_default === true;
    } catch {
      return false;
    }
  };
  if (fits($("budget").value)) return $("budget").value;
  const options = [...$("budget").options].filter((o) => !o.disabled && Number(o.value) <= 4 << 20);
  const larger = options.filter((o) => Number(o.value) > Number($("budget").value));
  const o = larger.find((o) => fits(o.value));
  return o ? o.value : null;
}

// The PIR document: public, the same for everyone. Where the server offers PIR it is the
// default, unless its one-time download is large (the ranking table of a million images).
export async function loadPirDoc() {
  state.pirDoc = state.partition ? await loadPir(state.client) : null;
  // A refused document is said plainly; the page does not quietly move to another way of
  // searching as if nothing happened.
  if (pirRefused) {
    showError(`This server's private information retrieval was refused, so nothing was sent: ${pirRefused}. ` +
      "The other ways to search below protect your photo only as far as their plans say.");
  }
  const opt = $("protocol").querySelector("option[value='pir']");
  opt.hidden = !state.pirDoc;
  opt.disabled = !state.pirDoc;
  const budget = state.pirDoc && !$("protocol").dataset.chosen ? pirDefaultBudget() : null;
  if (budget) {
    $("budget").value = budget;
    $("protocol").value = "pir";
  }
  else if (!state.pirDoc && protocol() === "pir") $("protocol").value = state.partition ? "blocks" : "frame";
}

export async function updateProtocol() {
  // A partition that was unavailable (e.g. still being built) is fetched again, whole.
  const p = protocol();
  const blocks = p === "blocks" || p === "whole" || p === "pir";
  if (state.client && !state.partition && blocks) await loadPartition();
  // ε and the spent budget do not apply where nothing is released (PIR, the whole gallery).
  const releases = p !== "pir" && p !== "whole";
  document.querySelectorAll(".eps-only").forEach((e) => { e.hidden = !releases; });
  document.querySelectorAll(".no-eps-only").forEach((e) => { e.hidden = releases; });
  document.querySelectorAll(".frame-only").forEach((e) => { e.hidden = p !== "frame"; });
  document.querySelectorAll(".paper-only").forEach((e) => { e.hidden = p !== "paper"; });
  document.querySelectorAll(".pir-only").forEach((e) => { e.hidden = p !== "pir"; });
  document.querySelectorAll(".gaussian-only").forEach((e) => { e.hidden = blocks; });
  document.querySelectorAll(".blocks-only").forEach((e) => { e.hidden = p !== "blocks" && p !== "pir"; });
  $("frame-figure").hidden = p !== "frame";
  $("paper-figure").hidden = p !== "paper";
  $("plan-figure").hidden = !blocks;
  $("map-figure").hidden = p !== "blocks"; // and only for a plan of a few blocks (map.js)
  $("search").textContent = p === "whole" ? "Download and search" : "Search privately";
  updateEpsilon(); // the hint and the plan
}
