//! The LWE parameters of our SimplePIR-style scheme, the public matrix `A`, the error sampler
//! and the correctness bound.
//!
//! # Parameters and their security
//! Secret dimension `N = 1024`, modulus `q = 2³²` (native `u32` wrapping arithmetic), error a
//! discrete Gaussian of standard deviation `σ = 6.4`, secrets uniform in `Z_q^N`.
//!
//! **Where "128-bit" comes from — and only from.** These are the parameters of SimplePIR
//! (Henzinger, Hong, Corrigan-Gibbs, Meiklejohn, Vaikuntanathan, USENIX Security 2023, §4.2
//! and Appendix C), which chose them with the lattice estimator (Albrecht, Player & Scott
//! 2015) for 128-bit security against an attacker holding a *bounded* number of samples, at
//! most 2²⁰ (SimplePIR's published parameter table, `pir/params.csv` of its code, pairs
//! `n = 2¹⁰`, `log q = 32`, `σ = 6.4` with every sample count from 2¹³ to 2²¹). We did not rerun
//! the estimator: [`SECURITY_BITS`] is SimplePIR's figure, not ours.
//!
//! It does *not* follow from the Homomorphic Encryption Standard (Albrecht et al. 2018,
//! Table 1): for `n = 1024` with `σ ≈ 3.2` and an unbounded number of samples, 128-bit
//! classical security allows only `log q ≈ 29`, and `q = 2³²` is past that. Our claim rests on
//! SimplePIR's estimate, which credits the bounded sample count and the doubled `σ`. The
//! margin option, should that estimate move: a larger dimension with the same `q` — HintlessPIR
//! (Li, Micciancio, Raykova, Schultz-Wu, CRYPTO 2024) uses `n = 1408`, also set with the
//! lattice estimator — at 1.375× the hint and the client's work; YPIR's implementation (Menon &
//! Wu 2024) instead keeps `n = 1024`, `q = 2³²` with a wider error, `σ = 11`.
//!
//! **The samples a database gives.** Each query has its own fresh secret, and the server sees
//! one LWE sample per column of the database it queries: at most [`MAX_COLS`] = 2²⁰ =
//! [`ESTIMATE_MAX_SAMPLES`] (checked at compile time below, and by
//! [`super::layout::Shape::validate`] for every shape, the served thumbnail and level shapes
//! included). The hint (`rows × N`, a function of `A` and the database) and the answer depend
//! on no secret and add no samples.
//!
//! Plaintexts are bytes (`p = 2⁸`, scaling `Δ = q/p = 2²⁴`): one database byte per matrix
//! entry, which keeps the layout byte-aligned. SimplePIR would allow a larger `p` at our
//! sizes (≈ 2¹⁰ up to 5,000 columns); bytes trade ~20 % of hint and download for simplicity.
//!
//! # Correctness
//! A decoded entry is `Δ·(d − 128) + E` with `E = Σ_j d'_j e_j`, `d'_j = d_j − 128 ∈ [−128, 127]`
//! and `e_j` independent centered discrete Gaussians, each sub-Gaussian with variance proxy
//! `σ²` (Micciancio–Peikert 2012, Lemma 2.8). So `E` is sub-Gaussian with proxy
//! `σ²·Σ d'_j² ≤ σ²·128²·n` and `P(|E| ≥ Δ/2) ≤ 2·exp(−(Δ/2)² / (2σ²·128²·n))`. Rounding
//! recovers the byte exactly when `|E| < Δ/2`; a union bound over the `m` entries of one
//! answer gives [`failure_log2`]. At `n = 2²⁰` columns and `m = 2²⁰` rows it is below 2⁻⁵⁰, and
//! [`super::layout::Shape::new`] refuses any shape above 2⁻⁴⁰ per query.
//!
//! The table sampler below differs from the exact discrete Gaussian by at most 2⁻⁵² in
//! statistical distance per sample (its probabilities are f64); LWE hardness is robust to that
//! (the Rényi-divergence argument of Bai et al. 2015), and the correctness bound uses the
//! truncation at |e| ≤ 60 = 9.4σ only to its advantage.

use std::sync::OnceLock;

use rand::{RngCore, SeedableRng};
use rand_chacha::ChaCha20Rng;

/// LWE secret dimension.
pub const LWE_N: usize = 1024;
/// Error standard deviation.
pub const SIGMA: f64 = 6.4;
/// log2 of the ciphertext modulus (q = 2³², `u32` arithmetic).
pub const LOG_Q: u32 = 32;
/// Bits of plaintext per matrix entry (p = 2⁸).
pub const PLAINTEXT_BITS: u32 = 8;
/// Δ = q / p.
pub const DELTA: u32 = 1 << (LOG_Q - PLAINTEXT_BITS);
/// Estimated security of the parameter set, in bits: SimplePIR's lattice-estimator figure for
/// at most [`ESTIMATE_MAX_SAMPLES`] samples (module docs), not the HE standard's.
pub const SECURITY_BITS: u32 = 128;
/// The most LWE samples per secret SimplePIR's 128-bit estimate covers (module docs).
pub const ESTIMATE_MAX_SAMPLES: usize = 1 << 20;
/// Most columns (LWE samples per secret) a database may have.
pub const MAX_COLS: usize = 1 << 20;
// A database never gives an attacker more samples per secret than the estimate assumed.
const _: () = assert!(MAX_COLS <= ESTIMATE_MAX_SAMPLES);
/// Most rows (bytes per column) a database may have.
pub const MAX_ROWS: usize = 1 << 20;
/// Largest allowed log2 failure probability of one query.
pub const MAX_FAILURE_LOG2: f64 = -40.0;

/// Errors are sampled from [−TAIL, TAIL].
const TAIL: i32 = 60;

/// log2 of the probability that one query over `rows × cols` decodes any byte wrongly (the
/// union bound of the module's correctness argument).
pub fn failure_log2(rows: usize, cols: usize) -> f64 {
    let half = (DELTA / 2) as f64;
    let proxy = SIGMA * SIGMA * 128.0 * 128.0 * cols.max(1) as f64;
    let nats = half * half / (2.0 * proxy);
    (2.0 * rows.max(1) as f64).log2() - nats / std::f64::consts::LN_2
}

/// The public matrix `A` (`cols × N`, row `j` = the LWE vector of column `j`): ChaCha20 keyed
/// by the database's public seed, so neither side downloads it, and a server cannot choose
/// `A` beyond picking a seed (a trapdoor would need a seed whose output has one).
pub fn matrix_a(seed: &[u8; 32], cols: usize) -> Vec<u32> {
    let mut rng = ChaCha20Rng::from_seed(*seed);
    let mut a = vec![0u32; cols * LWE_N];
    for chunk in a.chunks_mut(LWE_N) {
        for v in chunk.iter_mut() {
            *v = rng.next_u32();
        }
    }
    a
}

/// Calls `f(j, row_j)` for every row of `A` in order without holding all of it (the client's
/// query generation needs each row once).
pub fn for_each_row_of_a(seed: &[u8; 32], cols: usize, mut f: impl FnMut(usize, &[u32])) {
    let mut rng = ChaCha20Rng::from_seed(*seed);
    let mut row = vec![0u32; LWE_N];
    for j in 0..cols {
        for v in row.iter_mut() {
            *v = rng.next_u32();
        }
        f(j, &row);
    }
}

/// Cumulative distribution of the error over [−TAIL, TAIL], scaled to 2⁶⁴.
fn cdt() -> &'static [u64] {
    static TABLE: OnceLock<Vec<u64>> = OnceLock::new();
    TABLE.get_or_init(|| {
        let w: Vec<f64> = (-TAIL..=TAIL)
            .map(|x| (-(x as f64).powi(2) / (2.0 * SIGMA * SIGMA)).exp())
            .collect();
        let total: f64 = w.iter().sum();
        let mut acc = 0.0;
        // Entry i: P(X ≤ i − TAIL) · 2⁶⁴ (the last entry saturates).
        w.iter()
            .map(|p| {
                acc += p / total;
                if acc >= 1.0 {
                    u64::MAX
                } else {
                    (acc * 18_446_744_073_709_551_616.0) as u64
                }
            })
            .collect()
    })
}

/// One error sample (as a `u32` mod q). Constant time in the value: the whole table is read
/// and compared, and the clamp is arithmetic (a `min` may compile to a branch).
pub fn sample_error(rng: &mut impl RngCore) -> u32 {
    let u = rng.next_u64();
    let below = cdt().iter().map(|&c| u64::from(c <= u)).sum::<u64>() as i32;
    // `below` entries have cumulative mass ≤ u, so X = below − TAIL; `below` reaches
    // 2·TAIL + 1 only when u = 2⁶⁴ − 1 (the saturated last entry), clamped to 2·TAIL.
    (below - i32::from(below > 2 * TAIL) - TAIL) as u32
}

/// A uniform secret in Z_q^N.
pub fn sample_secret(rng: &mut impl RngCore) -> Vec<u32> {
    (0..LWE_N).map(|_| rng.next_u32()).collect()
}

/// `Σ a_i·b_i mod 2³²`.
#[inline]
pub fn dot(a: &[u32], b: &[u32]) -> u32 {
    // Four accumulators so the loop vectorises.
    let mut acc = [0u32; 4];
    let (ca, ra) = a.split_at(a.len() / 4 * 4);
    let (cb, rb) = b.split_at(ca.len());
    for (x, y) in ca.chunks_exact(4).zip(cb.chunks_exact(4)) {
        for k in 0..4 {
            acc[k] = acc[k].wrapping_add(x[k].wrapping_mul(y[k]));
        }
    }
    let mut s = acc.iter().fold(0u32, |s, &v| s.wrapping_add(v));
    for (x, y) in ra.iter().zip(rb) {
        s = s.wrapping_add(x.wrapping_mul(*y));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_have_the_stated_spread_and_are_centered() {
        let mut rng = ChaCha20Rng::seed_from_u64(7);
        let n = 200_000;
        let xs: Vec<f64> = (0..n)
            .map(|_| sample_error(&mut rng) as i32 as f64)
            .collect();
        let mean = xs.iter().sum::<f64>() / n as f64;
        let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n as f64;
        assert!(mean.abs() < 0.05, "mean {mean}");
        assert!((var.sqrt() - SIGMA).abs() < 0.05, "std {}", var.sqrt());
        assert!(xs.iter().all(|x| x.abs() <= TAIL as f64));
    }

    #[test]
    fn failure_bound_is_tiny_at_our_sizes_and_grows_with_columns() {
        assert!(failure_log2(1 << 20, MAX_COLS) < -50.0);
        assert!(failure_log2(4096, 10_000) < -1000.0);
        assert!(failure_log2(4096, 100) < failure_log2(4096, 10_000));
    }

    #[test]
    fn no_shape_gives_more_samples_than_the_estimate_assumes() {
        use crate::layout::Shape;
        // Every shape is validated, and a column more than the estimate covers is refused
        // (the served thumbnail and level shapes: `shared::pir::doc`'s tests).
        let at = Shape {
            record_len: 1,
            records: ESTIMATE_MAX_SAMPLES,
            rows: 1,
            cols: ESTIMATE_MAX_SAMPLES,
        };
        assert!(at.validate().is_ok());
        let past = Shape {
            records: ESTIMATE_MAX_SAMPLES + 1,
            cols: ESTIMATE_MAX_SAMPLES + 1,
            ..at
        };
        assert!(past.validate().is_err());
    }

    #[test]
    fn a_rows_are_the_same_streamed_or_held() {
        let seed = [3u8; 32];
        let a = matrix_a(&seed, 5);
        let mut rows = Vec::new();
        for_each_row_of_a(&seed, 5, |_, r| rows.extend_from_slice(r));
        assert_eq!(a, rows);
        assert_ne!(matrix_a(&[4u8; 32], 5), a);
    }

    #[test]
    fn dot_wraps() {
        let a = vec![u32::MAX; 9];
        let b = vec![2u32; 9];
        assert_eq!(dot(&a, &b), 0u32.wrapping_sub(18));
    }
}
