//! The evaluation's seeded generators (the table's and the block evaluation's).

use rand::SeedableRng;
use rand_chacha::ChaCha20Rng;

/// A per-query generator, independent across seeds, queries, methods and ε.
pub(crate) fn query_rng(seed: u64, q: usize, method: u64, eps: f64) -> ChaCha20Rng {
    let mut key = [0u8; 32];
    key[..8].copy_from_slice(&seed.to_le_bytes());
    key[8..16].copy_from_slice(&(q as u64).to_le_bytes());
    key[16..24].copy_from_slice(&method.to_le_bytes());
    key[24..].copy_from_slice(&eps.to_bits().to_le_bytes());
    ChaCha20Rng::from_seed(key)
}
