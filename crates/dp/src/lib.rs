//! Privacy mechanisms and their accounting: every function here that touches a private value
//! states its guarantee and proof.
//!
//! Pure functions over plain data; randomness only through `rng` arguments ([`rng`] draws
//! them from the operating system's cryptographic source). Builds for x86_64 and
//! wasm32-unknown-unknown.

pub mod budget;
pub mod exact;
pub mod mechanism;
pub mod posterior;
pub mod randomized_response;
pub mod rng;
pub mod subset;
