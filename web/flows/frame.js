// The noisy-numbers searches: the anchor frame and the paper's Algorithm 1. The wasm client's
// driver (`client::frame_search`, the CLI's too) privatizes the photo (placement,
// noise, the real row's position, all kept in wasm) and hands out the one request only after
// the release's receipt is recorded here (`spend`); this module moves the bytes and shows the
// real row's matches.
import { delta } from "../pkg/privatemail_client_wasm.js";
import { $, K, epsilon, protocol, state, status, timings } from "../page.js";
import { LIMITS } from "../api.js";
import { HostileAnswer, deadline, fetchBounded, serverMessage } from "../net.js";
import { holdOverBudget, spend } from "../budget.js";
import { drawPaperPlot, drawPlot } from "../plot.js";
import { searchFailed } from "../results.js";

function privatize() {
  const t = performance.now();
  // δ is this client's own (the server's configuration could only ask for less noise).
  const out = JSON.parse(protocol() === "paper"
    ? state.client.privatize_paper(epsilon(), delta(), $("mechanism").value, K)
    : state.client.privatize(epsilon(), delta(), $("mechanism").value, K, $("ranking").value));
  out.paper = protocol() === "paper";
  out.kind = "frame";
  timings.privatize_ms = performance.now() - t;
  return out;
}

// A search by noisy numbers (the frame or Algorithm 1), from the privatization on.
export async function onFrameSearch() {
  let out;
  try {
    $("progress").hidden = false;
    $("progress").value = 1;
    status("Adding noise to your photo's numbers…");
    out = privatize();
  } catch (e) {
    $("progress").hidden = true;
    searchFailed(`Could not prepare the search: ${e.message || e}`);
    return;
  }
  if (holdOverBudget(out)) {
    $("progress").hidden = true;
    return;
  }
  await send(out);
}

export async function send(out) {
  $("warning").hidden = true;
  $("progress").hidden = false;
  $("progress").value = 2;
  status("Searching the gallery…");
  const L = await LIMITS;
  let req;
  try {
    // The driver calls `spend` with the receipt and hands out the request only once it is
    // stored: whatever the server does with the request, the release is counted.
    req = JSON.parse(state.client.search_request((r) => spend(JSON.parse(r))));
  } catch (e) {
    $("progress").hidden = true;
    searchFailed(`The privacy spent could not be recorded, so nothing was sent: ${e.message || e}`);
    return;
  }
  const t = performance.now();
  const d = deadline(L.total_timeout_secs);
  let resp, text, bytes;
  try {
    ({ resp, bytes } = await fetchBounded(req.url, {
      maxBytes: req.max_bytes,
      signal: d.signal,
      init: { method: req.method, headers: { "content-type": req.content_type }, body: req.body },
    }));
    text = new TextDecoder().decode(bytes);
  } catch (e) {
    state.client.search_failed();
    $("progress").hidden = true;
    searchFailed(e instanceof HostileAnswer ? `The server's answer was refused: ${e.message}.`
      : d.signal.aborted ? "The search server did not answer in time."
      : "Cannot reach the search server. Check that it is running and try again.");
    return;
  } finally {
    d.done();
  }
  timings.roundtrip_ms = performance.now() - t;
  if (!resp.ok) {
    state.client.search_failed();
    $("progress").hidden = true;
    const msg = serverMessage(bytes, `HTTP ${resp.status}`, L);
    searchFailed(`The server refused the search: ${msg}`);
    return;
  }
  let picked;
  try {
    picked = JSON.parse(state.client.pick(text));
    picked.paper = out.paper;
  } catch (e) {
    $("progress").hidden = true;
    searchFailed(`The server's answer could not be read: ${e.message || e}`);
    return;
  }
  $("progress").value = 3;
  $("progress").hidden = true;
  showResults(picked);
  status(`Done: privatized in ${timings.privatize_ms.toFixed(1)} ms, answered in ${Math.round(timings.roundtrip_ms)} ms.`);
}

function showResults(picked) {
  const same = picked.matches.filter((m) => m.label === state.image.label).length;
  $("results-summary").textContent =
    `${same} of ${picked.matches.length} matches are in the category the model sees in your ` +
    `photo (${state.image.class_name}), at ε = ${epsilon()}.`;
  $("results").replaceChildren(...picked.matches.map((m) => {
    const li = document.createElement("li");
    const img = document.createElement("img");
    const name = state.config.class_names[m.label] ?? `class ${m.label}`;
    img.src = `data:image/png;base64,${m.thumbnail_png_base64}`;
    img.alt = name;
    const cap = document.createElement("div");
    cap.textContent = name;
    if (m.label === state.image.label) cap.className = "same";
    li.dataset.label = m.label;
    li.dataset.id = m.id;
    li.append(img, cap);
    return li;
  }));
  if (picked.paper) drawPaperPlot(picked);
  else drawPlot(picked);
}
