//! Issue #60, point 3, in the browser: a level's ranking record takes the same time whatever
//! its size in the page's own build — WebAssembly, serial (no `parallel` feature), Chromium's
//! clock. The cases and the 5 % tolerance are the native test's
//! (`crates/client/tests/ranking_time.rs`), whose build is the workspace's.

use wasm_bindgen::prelude::wasm_bindgen;
use wasm_bindgen_test::*;

#[path = "../../../crates/client/tests/common/ranking_cases.rs"]
mod cases;

#[wasm_bindgen]
extern "C" {
    /// `performance.now()` (ms), coarsened by the browser: to 5 µs in a cross-origin isolated
    /// page (the test runner's, by default), to 100 µs otherwise.
    #[wasm_bindgen(js_namespace = performance, js_name = now)]
    fn performance_now() -> f64;
}

#[wasm_bindgen_test]
fn a_level_records_ranking_takes_the_same_time_whatever_its_size_in_wasm() {
    let cases = cases::Cases::build();
    cases.check_outcomes();
    let now = || performance_now() * 1e3;
    let isolated = js_sys::Reflect::get(&js_sys::global(), &"crossOriginIsolated".into())
        .ok()
        .and_then(|v| v.as_bool())
        .unwrap_or(false);
    let step = if isolated { 5.0 } else { 100.0 };
    // A sample spans at least 100 of the clock's steps, so one step is 1 % of it: a few
    // rankings where the clock is fine (short samples, so the median over rounds passes over
    // the ones load interrupts).
    let one = cases.timing(5, 1, now).typical.max(1.0);
    let batch = ((100.0 * step / one).ceil() as usize).max(1);
    let timing = cases.timing(301, batch, now);
    console_log!(
        "ranking in wasm (µs), records of {:?} items and a failed check, batches of {batch} \
         (clock step {step} µs): {timing:.3?}",
        cases::SIZES
    );
    cases::assert_equal_within_noise(&timing);
}
