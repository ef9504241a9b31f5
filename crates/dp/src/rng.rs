//! Randomness for everything privacy-relevant: a ChaCha20 stream cipher keyed by the operating
//! system's CSPRNG (`getrandom`; in the browser, `crypto.getRandomValues` through the `wasm_js`
//! backend). ChaCha20 is a cryptographically secure generator, so outputs are computationally
//! indistinguishable from uniform bits — the assumption every sampler in [`crate::mechanism`]
//! makes.

use rand::SeedableRng;
use rand_chacha::ChaCha20Rng;

use shared::error::{Error, Result};

/// A fresh CSPRNG keyed from the OS.
pub fn secure_rng() -> Result<ChaCha20Rng> {
    let mut seed = [0u8; 32];
    getrandom::fill(&mut seed).map_err(|e| Error::Rng(e.to_string()))?;
    Ok(ChaCha20Rng::from_seed(seed))
}
