// The plan view: what the next search will download and spend, from public documents only
// (ε, the byte budget, the partition and the PIR document; never the photo), as text and as a
// point on the plan plot.
import { $, K, epsilon, protocol, state } from "./page.js";
import { fmtKiB, pct } from "./format.js";
import { drawPlanPlot } from "./plot.js";

// The plan is public: a function of ε, the byte budget and the partition only, never the photo.
export function updatePlan() {
  if (!state.client) return;
  state.currentPlan = null;
  const p = protocol();
  if (p === "frame" || p === "paper") {
    $("plan").textContent = state.partition ? "" : state.partitionProblem;
    return;
  }
  if (!state.partition) return;
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
    drawPlanPlot(curve, null);
    return;
  }
  $("plan").replaceChildren(...planLines(state.currentPlan).map((t) => {
    const li = document.createElement("p");
    li.textContent = t;
    return li;
  }));
  drawPlanPlot(curve, state.currentPlan);
}

// The PIR plan is public too: from the documents, K and the byte budget.
function updatePirPlan() {
  state.pirPlan = null;
  let curve = [];
  try { curve = JSON.parse(state.client.plans(epsilon())); } catch { curve = []; }
  try {
    state.pirPlan = JSON.parse(state.client.pir_plan(K, Number($("budget").value)));
  } catch (e) {
    $("plan").textContent = `No private-retrieval search fits these settings: ${e.message || e}. Choose a larger data budget.`;
    drawPlanPlot(curve, null, null);
    return;
  }
  const how = state.pirPlan.ranking.kind === "table"
    ? "ranks the whole gallery in your browser from a public list of every image's numbers"
    : `asks for your photo's part of the gallery (level ${state.pirPlan.ranking.level}) without revealing which`;
  const lines = [
    "The server learns nothing about your photo: every request looks the same whatever the photo (lattice-based private information retrieval). Privacy spent: ε = 0.",
    `This search ${how}, then fetches the ${K} pictures the same way: ${fmtKiB(state.pirPlan.up_bytes)} up and ${fmtKiB(state.pirPlan.down_bytes)} down per search, plus ${fmtKiB(state.pirPlan.one_time_bytes)} of public files once per gallery version (kept by your browser).`,
    state.pirPlan.predicted_fidelity >= 0.9995
      ? "Results: your exact 8 nearest images in the whole gallery."
      : `Predicted: ${pct(state.pirPlan.predicted_fidelity)}% of your 8 exact nearest matches will be found.`,
  ];
  $("plan").replaceChildren(...lines.map((t) => {
    const li = document.createElement("p");
    li.textContent = t;
    return li;
  }));
  drawPlanPlot(curve, null, state.pirPlan);
}

function planLines(plan) {
  const eps = plan.epsilon === 0 ? "0 (nothing about your photo is released)" : String(plan.epsilon);
  const what = plan.whole
    ? "This search downloads the whole gallery"
    : plan.size === plan.blocks
      ? `This search downloads all ${plan.blocks} blocks of the gallery`
      : `This search downloads ${plan.size} of the gallery's ${plan.blocks} blocks (your photo's own block is among them with probability ${pct(plan.inclusion)}%, hidden among random others)`;
  return [
    `${what}: about ${fmtKiB(plan.expected_bytes)}, ${pct(plan.expected_pool_fraction)}% of the gallery.`,
    `Predicted: ${pct(plan.predicted_fidelity)}% of your 8 exact nearest matches in the gallery will be found (a prediction from the server's published coverage, not a promise).`,
    `Privacy spent by this search: ε = ${eps}.`,
  ];
}
