//! Browser client (wasm-bindgen bindings arrive with the browser-client issue).
