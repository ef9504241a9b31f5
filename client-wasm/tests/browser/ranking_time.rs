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
    /// `performance.now()` (ms): coarsened by the browser (100 µs here, not cross-origin
    /// isolated), so each sample is a batch of rankings long enough for that to be < 1 %.
    #[wasm_bindgen(js_namespace = performance, js_name = now)]
    fn performance_now() -> f64;
}

#[wasm_bindgen_test]
fn a_level_records_ranking_takes_the_same_time_whatever_its_size_in_wasm() {
    let cases = cases::Cases::new();
    cases.check_outcomes();
    let now = || performance_now() * 1e3;
    // Batches of at least 20 ms (the clock's step is 100 µs), calibrated on the longest record.
    let one = cases.medians(5, 4, now)[cases::SIZES.len() - 1];
    let batch = ((20_000.0 / one).ceil() as usize).max(1);
    let medians = cases.medians(41, batch, now);
    console_log!(
        "ranking medians in wasm (µs), records of {:?} items and a failed check, batches of \
         {batch}: {medians:.1?}",
        cases::SIZES
    );
    cases::assert_equal_within_noise(&medians);
}
