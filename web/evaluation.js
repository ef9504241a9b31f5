// What the noisy-numbers searches' results are worth at the chosen ε, in figures from the
// committed evaluation (`docs/eval/results.csv`, written by `bash scripts/eval.sh`; copied next
// to the wasm client by scripts/build-web.sh, so the page states the figures of the build it
// serves and nothing else; checked by its hash in the release bundle). Public and the same for everyone: fetched once as the page starts,
// never depending on the photo. Without the file the page says it has no figures.
import { getPageText } from "./api.js";
import { pct } from "./format.js";

let rows = null;

// Load the evaluation's table (small text, bounded like every JSON answer).
export async function loadEvaluation() {
  try {
    const text = await getPageText("pkg/results.csv", 256 << 10);
    rows = parse(text);
  } catch {
    rows = null;
  }
}

function parse(text) {
  const [head, ...lines] = text.trim().split("\n");
  const cols = head.split(",");
  const out = [];
  for (const line of lines) {
    const v = line.split(",");
    if (v.length !== cols.length) continue;
    const r = Object.fromEntries(cols.map((c, i) => [c, v[i]]));
    out.push({
      method: r.method,
      epsilon: r.epsilon === "" ? null : Number(r.epsilon),
      seeds: Number(r.seeds),
      recall: Number(r.recall_mean),
      recallStd: Number(r.recall_std),
      map: Number(r.map_mean),
      fidelity: Number(r.fidelity_mean),
    });
  }
  return out;
}

function row(method, eps) {
  return rows?.find((r) => r.method === method && r.epsilon === eps) ?? null;
}

// The evaluated ε nearest below or at `eps` (the evaluation's grid: 0.1 … 8), or null.
function evaluatedEpsilon(method, eps) {
  const grid = (rows ?? []).filter((r) => r.method === method && r.epsilon !== null).map((r) => r.epsilon);
  const below = grid.filter((e) => e <= eps);
  return below.length ? Math.max(...below) : null;
}

const share = (x) => `${x < 0.01 ? (100 * x).toFixed(1) : pct(x)}%`;

// The anchor frame at `eps`, for the ranking chosen ("proportional" or "posterior"): the
// category hit rate and the share of the exact nearest images found, against the random page
// of the same kind. Returns a sentence, or null without figures.
export function frameWorth(eps, ranking) {
  const method = ranking === "posterior" ? "anchor frame + posterior ranking" : "anchor frame + proportional page";
  const chance = row(ranking === "posterior" ? "chance: random class blocks" : "chance: random proportional page", null);
  const at = evaluatedEpsilon(method, eps);
  const r = at === null ? null : row(method, at);
  if (!r || !chance) return null;
  const where = at === eps ? `at ε = ${eps}` : `at ε = ${at} (the largest ε it measured; yours is ${eps})`;
  const beyond = r.recall - chance.recall > 2 * Math.max(r.recallStd, 0.01);
  return `What these results are worth, from the committed evaluation ${where} (${r.seeds} runs over held-out photos): ` +
    `at least one of the 8 matches is in the photo's category for ${share(r.recall)} of photos ` +
    `(a random page of the same kind: ${share(chance.recall)})${beyond ? "" : " — no clear gain over chance"}; ` +
    `of each photo's 8 exact nearest images, ${share(r.fidelity)} are found (chance: ${share(chance.fidelity)}). ` +
    "At best the matches follow the category, never your photo's own nearest images.";
}

// Algorithm 1: its figures at every evaluated ε, and whether they change with ε at all.
export function paperWorth(eps) {
  const method = "PrivateMail (Algorithm 1)";
  const all = (rows ?? []).filter((r) => r.method === method && r.epsilon !== null);
  const chance = row("chance: random order", null);
  if (!all.length || !chance) return null;
  const lo = (f) => Math.min(...all.map(f)), hi = (f) => Math.max(...all.map(f));
  const range = (f) => (share(lo(f)) === share(hi(f)) ? share(lo(f)) : `${share(lo(f))}–${share(hi(f))}`);
  const eps0 = Math.min(...all.map((r) => r.epsilon)), eps1 = Math.max(...all.map((r) => r.epsilon));
  const flat = hi((r) => r.recall) - lo((r) => r.recall) < 2 * Math.max(...all.map((r) => r.recallStd), 0.01) / Math.sqrt(all[0].seeds);
  return `What these results are worth, from the committed evaluation (${all[0].seeds} runs over held-out photos, ` +
    `ε = ${eps0} to ${eps1}): at least one of the 8 matches is in the photo's category for ${range((r) => r.recall)} of photos ` +
    `and ${range((r) => r.fidelity)} of the 8 exact nearest images are found, at ` +
    `${flat ? "every ε alike" : "these ε"} (a random order: ${share(chance.recall)} and ${share(chance.fidelity)}). ` +
    (flat
      ? "With the proven sensitivity bound the noise swamps the release at every ε measured, so the matches do not follow " +
        "your photo: they are no better than a random order." +
        (eps > eps1 ? ` (Your ε = ${eps} is beyond what the evaluation measured.)` : "")
      : "");
}
