// The page's shared state and DOM helpers. Every module reads the session from `state` (set as
// the page starts and as public documents arrive) and the user's choices from the controls
// (`protocol()`, `epsilon()`); nothing here talks to the server or the wasm client.

const EPSILONS = [0.1, 0.25, 0.5, 1, 2, 4, 8, 16, 30, 100];
export const K = 8;

export const $ = (id) => document.getElementById(id);
export const timings = (window.pmTimings = {});
export const state = {
  client: null,
  config: null,
  image: null, // what the model said about the loaded photo
  map: null, // gallery sample in the frame, for the plot
  partition: null, // the public partition document (block retrieval), or null
  currentPlan: null, // the plan the next block search uses (public)
  pirDoc: null, // the public PIR document, or null where the server offers none
  pirPlan: null, // the plan the next PIR search uses (public)
  partitionProblem: "", // why block download is unavailable, shown while it is
  pending: null, // a privatized request waiting for the user's go-ahead
};

export function status(text) { $("status").textContent = text; }
export function showError(text) {
  const e = $("error");
  e.textContent = text;
  e.hidden = !text;
}

export function protocol() { return $("protocol").value; }
// The PIR ranking a person chose, or undefined for the plan's own choice.
export function pirRanking() { return $("pir-ranking").value || undefined; }

export function epsilon() { return EPSILONS[Number($("epsilon").value)]; }
