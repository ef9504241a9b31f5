// The plan view: what the next search will download and spend, from public documents only
// (ε, the byte budget, the partition and the PIR document; never the photo), as text — with
// what the server learns, in figures — as a point on the plan plot, and as the block map.
import { delta as clientDelta } from "./pkg/privatemail_client_wasm.js";
import { $, K, epsilon, pirRanking, protocol, state } from "./page.js";
import { fmtKiB, fmtKiBWhole, pct } from "./format.js";
import { drawPlanPlot } from "./plot.js";
import { drawBlockMap } from "./map.js";
import { preparePir } from "./pir.js";
import { planDisclosure, posteriorWords, yesNoWords } from "./disclosure.js";
import { frameWorth, paperWorth } from "./evaluation.js";

// The plan is public: a function of ε, the byte budget and the partition only, never the photo.
export function updatePlan() {
  if (!state.client) return;
  state.currentPlan = null;
  const p = protocol();
  if (p === "frame" || p === "paper") {
    $("plan").replaceChildren(...paragraphs(noisyPlanLines(p)));
    return;
  }
  if (!state.partition) return;
  labelBudgets(p);
  if (p === "pir") return updatePirPlan();
  let curve = [];
  try {
    if (p === "whole") {
      state.currentPlan = JSON.parse(state.client.whole_plan());
      try { curve = JSON.parse(state.client.plans(epsilon())); } catch { curve = []; }
    } else {
      curve = JSON.parse(state.client.plans(epsilon()));
      state.currentPlan = JSON.parse(state.client.plan(epsilon(), Number($("budget").value)));
    }
  } catch (e) {
    $("plan").textContent = `No search fits these settings: ${e.message || e}. Choose a larger data budget.`;
    drawPlanPlot(curve, null, null, false, epsilon());
    drawBlockMap(null);
    return;
  }
  $("plan").replaceChildren(...paragraphs(planLines(state.currentPlan)));
  drawPlanPlot(curve, state.currentPlan, null, false, epsilon());
  drawBlockMap(state.currentPlan);
}

// The noisy-numbers searches' plan: what is sent, what it spends, and what its results are
// worth at this ε in the committed evaluation's figures (web/evaluation.js).
function noisyPlanLines(p) {
  const eps = epsilon(), delta = clientDelta().toExponential(0);
  const lines = [];
  if (p === "frame") {
    lines.push(["This search sends ten rows of 10 noisy numbers — your photo's place among the public anchor images, and nine decoys — " +
      "and the server ranks the gallery for every row; only this page knows which row is yours."]);
  } else {
    lines.push(["This search embeds your photo's features with one public image of every other class (the decoys) and all public anchors, " +
      "releases one step of that embedding with Gaussian noise of a proven bound, and the server aligns it on the anchors and ranks the gallery for every row."]);
  }
  const worth = p === "frame" ? frameWorth(eps, $("ranking").value) : paperWorth(eps);
  lines.push([worth ?? "This page has no evaluation figures for this way of searching (docs/eval/results.csv was not built into it), so it cannot say what the results are worth.",
    "worth"]);
  const analytic = $("mechanism").value === "analytic_gaussian";
  lines.push([`Privacy this search will spend: ε = ${eps}, δ = ${delta} asked for` +
    (analytic ? " (the analytic calibration is exact only for noise no computer draws, so the δ its noise proves is somewhat larger; the search's receipt states it)" : "") +
    "; how it adds to this browser's total is explained under 2."]);
  if (!state.partition && state.partitionProblem) lines.push([state.partitionProblem]);
  return lines;
}

// The PIR plan is public too: from the documents, K and the byte budget.
function updatePirPlan() {
  state.pirPlan = null;
  let curve = [];
  try { curve = JSON.parse(state.client.plans(epsilon())); } catch { curve = []; }
  const needs = labelPirRankings();
  try {
    state.pirPlan = JSON.parse(state.client.pir_plan(K, Number($("budget").value), pirRanking()));
    preparePir(state.client, state.pirPlan);
  } catch (e) {
    const need = needs[pirRanking() ?? ""];
    $("plan").textContent = need
      ? `No private-retrieval search fits this data budget: ${need.words}. Choose a larger data budget or another way to rank.`
      : "No private-retrieval search is offered by this server at these settings. Choose another way to search.";
    drawPlanPlot(curve, null, null, true, epsilon());
    return;
  }
  const how = {
    table: "ranks the whole gallery in your browser from a public list of every image's numbers",
    scores: "has the server score every image of your photo's part of the gallery, encrypted: it sees neither the part nor your photo, and only your browser can read the scores",
    level: `asks for your photo's part of the gallery (its group of similar images, at level ${state.pirPlan.ranking.level} of the gallery's groupings) without revealing which`,
  }[state.pirPlan.ranking.kind];
  const lines = [
    "The server learns nothing about your photo: every request looks the same whatever the photo (lattice-based private information retrieval). Privacy spent: none (privacy loss ε = 0).",
    "A server that cheats in its answers can at most make one search fail to learn one yes/no fact about that photo: if any answer fails its checks, this page says so and sends no further search to this server until you allow it. (This holds for this page's code as published; a server that changed the page itself could take the photo, which only a client installed from elsewhere, such as the command-line client, rules out.)" +
      (state.pirPlan.ranking.kind === "scores" ? " It could also return other matches than your nearest ones; their pictures are still checked." : ""),
    `This search ${how}, then fetches the ${K} pictures the same way: ${fmtKiB(state.pirPlan.up_bytes)} up and ${fmtKiB(state.pirPlan.down_bytes)} down per search, plus ${fmtKiB(state.pirPlan.one_time_bytes)} of public files once per gallery version (kept by your browser).` +
      (state.pirPlan.coded_picture_bytes ? ` To keep those bytes small, each picture travels coded in ${state.pirPlan.coded_picture_bytes} bytes, so it looks coarser than the gallery's own.` : ""),
    // Exact by construction only with the table; otherwise the figure is the gallery's own
    // (its published coverage), which nothing here can check.
    state.pirPlan.ranking.kind === "table"
      ? "Results: your exact 8 nearest images in the whole gallery."
      : `Predicted from the figures the gallery publishes (this page cannot check them): ${pct(state.pirPlan.predicted_fidelity)}% of your 8 exact nearest matches will be found.`,
  ];
  $("plan").replaceChildren(...paragraphs(lines.map((t) => [t])));
  drawPlanPlot(curve, null, state.pirPlan, false, epsilon());
}

// The PIR ranking choices: one that cannot fit the chosen data budget is greyed out with the
// reason in words (what it needs a search, from its own plan at an unbounded budget: public
// figures only). Returns, by option value, {words} for each that does not fit ("" for the
// plan's own choice when nothing fits).
function labelPirRankings() {
  const budget = Number($("budget").value);
  const out = {};
  let cheapest = null;
  for (const o of $("pir-ranking").options) {
    o.dataset.base ??= o.textContent;
    if (!o.value) continue;
    let need = null;
    try { const p = JSON.parse(state.client.pir_plan(K, Number.MAX_SAFE_INTEGER, o.value)); need = p.up_bytes + p.down_bytes; } catch { /* not offered */ }
    if (need !== null && need <= budget) {
      o.disabled = false;
      o.textContent = o.dataset.base;
      continue;
    }
    o.disabled = true;
    const words = need === null ? "this server does not offer it" : `needs ${fmtKiBWhole(need)} a search; raise the data budget`;
    o.textContent = `${o.dataset.base} — ${words}`;
    out[o.value] = { words: `this way of ranking ${words}` };
    if (need !== null && (cheapest === null || need < cheapest)) cheapest = need;
  }
  if (cheapest !== null) out[""] = { words: `the least any way of ranking needs is ${fmtKiBWhole(cheapest)} a search; raise the data budget` };
  return out;
}

// The budget choices: 8 and 16 MiB only where the gallery is large (no whole-gallery download,
// or one above 4 MiB), and for block download each labelled with the fidelity its plan
// predicts at this ε (public figures only).
function labelBudgets(p) {
  const sel = $("budget");
  const whole = state.partition.levels.find((l) => l.whole);
  const large = !whole || whole.transfer_bytes[0] > 4 * 1048576;
  for (const o of sel.options) {
    if (o.classList.contains("large-only")) {
      o.hidden = !large;
      o.disabled = !large;
      if (!large && o.selected) sel.value = "4194304";
    }
    let label = fmtBudget(Number(o.value));
    if (p === "blocks") {
      try {
        const plan = JSON.parse(state.client.plan(epsilon(), Number(o.value)));
        label += ` — predicted ${pct(plan.predicted_fidelity)}%`;
      } catch {
        label += " — nothing fits";
      }
    }
    o.textContent = label;
  }
}

function fmtBudget(bytes) {
  return bytes >= 1048576 ? `${bytes / 1048576} MiB` : `${bytes / 1024} KiB`;
}

function paragraphs(lines) {
  return lines.map(([t, cls]) => {
    const li = document.createElement("p");
    li.textContent = t;
    if (cls) li.className = cls;
    return li;
  });
}

// The exact ways to search this server offers, for the low-fidelity warning.
function exactChoices() {
  const out = [];
  if (state.pirDoc) out.push("private information retrieval (the server learns nothing, results exact)");
  try {
    const w = JSON.parse(state.client.whole_plan());
    out.push(`downloading the whole gallery (${fmtKiB(w.max_bytes)}, exact, no privacy cost)`);
  } catch { /* not allowed here */ }
  const slider = $("epsilon"), budget = $("budget");
  const moreEps = Number(slider.value) < Number(slider.max);
  const moreBytes = [...budget.options].some((o, i) => i > budget.selectedIndex && !o.disabled);
  if (moreEps || moreBytes) out.push(`a larger ${moreEps && moreBytes ? "ε or data budget" : moreEps ? "ε" : "data budget"}`);
  return out;
}

// Private information retrieval releases nothing: where it fits the limit, a block plan that
// spends ε says so.
function pirFits(budget) {
  if (!state.pirDoc || budget == null) return "";
  try {
    const p = JSON.parse(state.client.pir_plan(K, budget, undefined));
    return ` Private information retrieval (under "How to search") releases nothing and fits this limit (${fmtKiB(p.up_bytes + p.down_bytes)} a search): choose it to spend no privacy.`;
  } catch {
    return "";
  }
}

// Why the planner chose this plan (publish::plan::Why), in words.
function whyWords(plan) {
  const budget = plan.budget == null ? "" : fmtKiB(plan.budget);
  switch (plan.why?.kind) {
    case "nothing_released":
      return `Why this plan: it releases nothing about your photo and, at ${fmtKiB(plan.max_bytes)} at most, fits your limit of ${budget}; ` +
        "a search that releases nothing is always chosen over one that spends privacy when it fits.";
    case "best_within_budget":
      return `Why this plan: it has the best predicted result among the plans that can never download more than your limit of ${budget}.` +
        (plan.why.free_needs != null
          ? ` A search that releases nothing here needs up to ${fmtKiB(plan.why.free_needs)}; with that limit it would be chosen instead.`
          : "") + pirFits(plan.budget);
    default:
      return "";
  }
}

// The plan in words: what is downloaded (at most: a ceiling), why this plan, what the server
// learns (figures from Rust), the predicted fidelity, and plainly when the results will
// mostly not be the exact ones.
function planLines(plan) {
  const d = planDisclosure(plan);
  const size = `at most ${fmtKiB(plan.max_bytes)} (about ${fmtKiB(plan.expected_bytes)} on average), ${pct(plan.expected_pool_fraction)}% of the gallery`;
  const once = plan.one_time_bytes ? ` The first search of this gallery version also fetches the map of its blocks (their centres), at most ${fmtKiB(plan.one_time_bytes)}, once.` : "";
  const spent = `Privacy spent by this search: ${d.learns_nothing ? "none (nothing about your photo is released; privacy loss ε = 0)" : `privacy loss ε = ${plan.epsilon}`}.`;
  const why = whyWords(plan);
  if (plan.whole) {
    return [
      [`This search downloads the whole gallery: ${fmtKiB(plan.max_bytes)}.`],
      ...(why ? [[why]] : []),
      [(protocol() === "blocks" ? "The whole gallery fits this data budget, so it is downloaded instead of a few blocks. " : "") +
        `The results are exact (your ${K} exact nearest matches in the whole gallery) and it costs no privacy: ` +
        "every search downloads the same file, so the server learns nothing about your photo. " +
        "Your browser keeps the file (it never changes) for later searches of this gallery version.", "learns"],
      [spent],
    ];
  }
  const lines = [];
  if (d.learns_nothing) {
    lines.push([`This search downloads all ${plan.blocks} blocks of the gallery: ${size}.`]);
    if (why) lines.push([why]);
    lines.push(["The server learns nothing about your photo: every search downloads the same blocks.", "learns"]);
  } else {
    lines.push([`This search downloads ${plan.size} of the gallery's ${plan.blocks} blocks (groups of similar images): ${size}.${once}`]);
    if (why) lines.push([why]);
    const words = posteriorWords(d);
    lines.push([`${words[0].toUpperCase()}${words.slice(1)}. At privacy loss ε = ${plan.epsilon}, ${yesNoWords(plan.epsilon)}.`, "learns"]);
  }
  lines.push([`Predicted: ${pct(plan.predicted_fidelity)}% of your ${K} exact nearest matches in the gallery will be found (a prediction from the server's published coverage, not a promise).`]);
  if (plan.predicted_fidelity < 0.5) {
    const alt = exactChoices();
    lines.push([`At this ε and data budget the results will mostly not be your exact matches (predicted ` +
      `${pct(plan.predicted_fidelity)}% of the exact ${K}).` + (alt.length ? ` For exact results choose ${alt.join(", or ")}.` : ""),
    "warn"]);
  }
  lines.push([spent]);
  return lines;
}
