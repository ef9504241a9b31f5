//! The privacy budget: composing the receipts of the releases this browser made.

use client::ledger::LedgerError;
use dp::mechanism::Receipt;
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;

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

/// One release in words, from its receipt (JSON `dp::mechanism::Receipt`, as a search
/// recorded it): `client::words::release`, the CLI's words too.
#[wasm_bindgen]
pub fn release_words(receipt_json: &str) -> Result<String, JsError> {
    let r: Receipt = serde_json::from_str(receipt_json)
        .map_err(|e| js_err(format!("the receipt is malformed: {e}")))?;
    Ok(client::words::release(&r))
}

/// The total spent by a list of receipts, in words (JSON `client::words::TotalWords`:
/// `method`, `text`, `short`), composed as [`compose_budget`] composes it: the CLI's words
/// too.
#[wasm_bindgen]
pub fn total_words(receipts_json: &str, delta: f64) -> Result<String, JsError> {
    let receipts: Vec<Receipt> = serde_json::from_str(receipts_json)
        .map_err(|e| js_err(format!("stored receipts are malformed: {e}")))?;
    let total = dp::budget::compose(&receipts, delta).map_err(js_err)?;
    serde_json::to_string(&client::words::total(&total, &receipts)).map_err(js_err)
}

/// The page's ledger as the search drivers see it (`client::ledger`): a JavaScript
/// function called with the receipt's JSON, which stores it (`web/budget.js`, `spend`) and
/// throws if it cannot. The driver hands out a release's request only after it returned.
pub(crate) struct JsLedger<'a>(pub(crate) &'a js_sys::Function);

impl client::ledger::Ledger for JsLedger<'_> {
    fn record(&mut self, receipt: &Receipt) -> Result<(), LedgerError> {
        let json = serde_json::to_string(receipt).map_err(|e| LedgerError(e.to_string()))?;
        self.0
            .call1(&JsValue::NULL, &JsValue::from_str(&json))
            .map(|_| ())
            .map_err(|e| {
                let words = e
                    .dyn_ref::<js_sys::Error>()
                    .map(|e| String::from(e.message()))
                    .or_else(|| e.as_string())
                    .unwrap_or_else(|| "the page's ledger refused it".into());
                LedgerError(shared::text::excerpt(&words, 200))
            })
    }
}
