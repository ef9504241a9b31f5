//! The wasm client in headless Chromium, one test binary (one wasm module, one browser start):
//! `wasm-pack test --headless --chrome --chromedriver /usr/bin/chromedriver --mode no-install client-wasm`.
//! Natively it compiles to nothing: the layers beneath it have native tests of their own.
#![cfg(target_arch = "wasm32")]

use wasm_bindgen_test::wasm_bindgen_test_configure;

wasm_bindgen_test_configure!(run_in_browser);

mod algorithm1;
mod blocks;
mod client;
mod common;
mod parity;
mod pir_search;
mod ranking_time;
