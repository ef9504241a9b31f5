// What a search tells the server, in words. The figures come from the wasm client (computed in
// Rust: dp::posterior and publish::plan::disclosure, each with its proof);
// this module only words them. Public: from ε and the plan, never the photo.
import { disclosure, yes_no_bound } from "./pkg/privatemail_client_wasm.js";
import { pct, pctFine } from "./format.js";

// The figures for a block plan (JSON publish::plan::Disclosure).
export function planDisclosure(plan) {
  return JSON.parse(disclosure(JSON.stringify(plan)));
}

// "a yes/no question about your photo is answered correctly … at most" for an (ε, δ) release.
export function yesNoWords(eps, delta = 0) {
  return `a yes/no question about your photo can be answered correctly ${pctFine(yes_no_bound(eps, delta))}% ` +
    "of the time at most (50% is a coin toss)";
}

// The posterior sentence for a plan that releases something.
export function posteriorWords(d) {
  const where = d.regions === 1 ? `this one region (of ${d.of})` : `one of these ${d.regions} regions (of ${d.of})`;
  return `the server learns that your photo is in ${where} ` +
    `with probability ${pct(d.posterior)}% (by chance alone: ${pct(d.prior)}%)`;
}

// The slider's hint for the blocks protocol, following the plan's figures.
export function blockHint(eps, plan) {
  if (!plan) return `ε = ${eps}: ${yesNoWords(eps)}.`;
  const d = planDisclosure(plan);
  if (d.learns_nothing) {
    return plan.whole
      ? "With this data budget the whole gallery fits: the server learns nothing about your photo, whatever ε."
      : "With this data budget every block is downloaded: the server learns nothing about your photo, whatever ε.";
  }
  return `ε = ${eps}: ${yesNoWords(eps)}; with this plan the server learns your photo is in ` +
    `${d.regions === 1 ? `a single one of the ${d.of} regions` : `one of ${d.regions} of ${d.of} regions`} with probability ${pct(d.posterior)}%.`;
}

// The slider's hint for the noisy-numbers searches (ε, δ): the yes/no bound still applies.
// What the results are worth at this ε is the plan's (web/evaluation.js: the committed
// evaluation's figures), not this hint's.
export function frameHint(eps, delta, paper) {
  const after = "";
  if (paper) {
    return `ε = ${eps}, δ = ${delta.toExponential(0)}: given the category the model sees in your photo, ` +
      `${yesNoWords(eps, delta).replace("about your photo", "about its features")}; the category itself ` +
      `is hidden only among nine decoys.${after}`;
  }
  return `ε = ${eps}, δ = ${delta.toExponential(0)}: ${yesNoWords(eps, delta)}.${after}`;
}
