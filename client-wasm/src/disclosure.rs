//! What a search tells the server, in figures for the page's words
//! (`dp::posterior`, `publish::plan::disclosure`). Public: from a plan or ε
//! only, never the photo.

use publish::plan::Plan;
use wasm_bindgen::prelude::*;

use crate::js_err;

/// What a search with `plan_json` (a `Plan` as `Client::plan` or `Client::whole_plan` returned
/// it) tells the server: JSON `publish::plan::Disclosure` — whether it learns nothing,
/// the yes/no bound e^ε/(1 + e^ε), and the posterior that the photo is in the L released
/// blocks of B (the plan's inclusion probability).
#[wasm_bindgen]
pub fn disclosure(plan_json: &str) -> Result<String, JsError> {
    let plan: Plan = serde_json::from_str(plan_json)
        .map_err(|e| js_err(format!("the search plan is malformed: {e}")))?;
    serde_json::to_string(&publish::plan::disclosure(&plan)).map_err(js_err)
}

/// The highest chance of answering a yes/no question about the photo correctly (even odds
/// beforehand) after an (ε, δ)-DP release: `(e^ε + δ)/(1 + e^ε)`
/// (`dp::posterior::yes_no_bound`).
#[wasm_bindgen]
pub fn yes_no_bound(epsilon: f64, delta: f64) -> f64 {
    dp::posterior::yes_no_bound(epsilon, delta)
}
