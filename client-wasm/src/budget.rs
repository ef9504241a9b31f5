//! The privacy budget: composing the receipts of the releases this browser made.

use dp::mechanism::Receipt;
use wasm_bindgen::prelude::*;

use crate::js_err;

/// The budget spent by a list of receipts (a JSON array, as `privatize` returned them), composed
/// by zCDP and reported at `delta` (see `dp::budget`). Returns JSON `dp::budget::Total`.
#[wasm_bindgen]
pub fn compose_budget(receipts_json: &str, delta: f64) -> Result<String, JsError> {
    let receipts: Vec<Receipt> = serde_json::from_str(receipts_json)
        .map_err(|e| js_err(format!("stored receipts are malformed: {e}")))?;
    let total = dp::budget::compose(&receipts, delta).map_err(js_err)?;
    serde_json::to_string(&total).map_err(js_err)
}
