//! The LWE parameters of our SimplePIR-style scheme, the public matrix `A` and the correctness
//! bound (the error sampler is `lattice::lwe`'s).
//!
//! # Parameters and their security
//! Secret dimension `N = 1,408`, modulus `q = 2³²` (native `u32` wrapping arithmetic), error a
//! discrete Gaussian of standard deviation `σ = 6.4`, secrets drawn from the same Gaussian
//! (LWE in *normal form*).
//!
//! **Where "128-bit" comes from.** `crates/pir/tests/security_estimate.rs` estimates every
//! parameter set in use from these constants, in the suite: the primal-uSVP attack at its best
//! sample count (at most [`MAX_COLS`]), costed by core-SVP and calibrated on the
//! Homomorphic Encryption Standard's 128-bit points (Albrecht et al. 2018; the model's block
//! size there is at most β₁₂₈ = 347). This set needs β = 500: 184 calibrated bits (core-SVP
//! 146), against the test's required margin of β ≥ 1.125·β₁₂₈. `N = 1,408` is HintlessPIR's
//! dimension at the same `q` (Li, Micciancio, Raykova, Schultz-Wu, CRYPTO 2024, set with the
//! lattice estimator). The set before, SimplePIR's `N = 1,024` (Henzinger et al., USENIX
//! Security 2023), needs β = 326 by the same model: about 128 bits with nothing to spare, and
//! the HE standard admits only `log q ≤ 29` at `n = 1,024`. The larger dimension costs 1.375×
//! the hint and the client's hint work; queries and answers are unchanged (their sizes follow
//! the database's shape, not `N`).
//!
//! **Normal form costs nothing but samples.** LWE with the secret drawn from the error
//! distribution is at least as hard as LWE with a uniform secret given `N` + a few more samples
//! (Applebaum, Cash, Peikert, Sahai, CRYPTO 2009, Lemma 2: take `N` samples whose `A`-rows are
//! invertible modulo `q` — modulo 2³² that is invertible modulo 2, so a few more than `N`
//! random rows suffice — and use them to map every other sample to one under the error-shaped
//! secret). The estimate above models the normal-form secret directly (the secret as narrow as
//! the error). A small secret is what lets the hint be rounded (below).
//!
//! **The samples a database gives.** Each query has its own fresh secret, and the server sees
//! one LWE sample per column of the database it queries: at most [`MAX_COLS`] = 2²⁰ (checked
//! at compile time below against [`ESTIMATE_MAX_SAMPLES`] less the normal form's `N` + slack,
//! and by [`super::layout::Shape::validate`] for every shape, the served thumbnail and level
//! shapes included). The hint (`rows × N`, a function of `A` and the database) and the answer
//! depend on no secret and add no samples.
//!
//! Plaintexts are bytes (`p = 2⁸`, scaling `Δ = q/p = 2²⁴`): one database byte per matrix
//! entry, which keeps the layout byte-aligned. SimplePIR would allow a larger `p` at our
//! sizes (≈ 2¹⁰ up to 5,000 columns); bytes trade ~20 % of hint and download for simplicity.
//!
//! # Rounded hint and answers (what the wire carries)
//! The hint's entries travel as their top [`HINT_BITS`] bits and the answers' as their top
//! `a` = [`wire_bits`]`.1` bits (8 to 16, the fewest the shape's failure bound allows; each
//! rounded to the nearest multiple of `2^(32 − bits)`): the client reads `H' = H − ε_H` with
//! `|ε_H| ≤ 2^(31 − HINT_BITS)` entrywise and `a' = a − ε_a` with `|ε_a| ≤ 2^(31 − a)`.
//! Rounding is a public function of public values, so it changes nothing the server sees. It
//! saves 37.5 % of the hint and half or more of the answer.
//!
//! # Rounded queries (what the client sends)
//! A query value `b_j = (A·s + e)_j + Δ·u_j` travels without its low `k` =
//! [`query_drop_bits`] bits: the client rounds `(A·s + e)_j` at random to a multiple of `2^k`
//! ([`round_at_random`]: down, or up with probability `(b_j mod 2^k)/2^k`, fresh coins from its
//! CSPRNG, so the rounding error `r_j` has mean zero given everything else and lies in an
//! interval of length `2^k`), adds `Δ·u_j` (a multiple of `2^k`: `k < 24`), and sends the top
//! `32 − k` bits, packed end to end ([`crate::bits`]). **Privacy is unchanged**: the rounded
//! vector is a randomised function, with coins independent of everything, of the LWE vector
//! the guarantee is about, so it is indistinguishable from the same function of a uniform one
//! whatever `u` is. **Correctness**: the server's answer is computed on `b + r`, which adds
//! `Σ_j d'_j r_j` to the error below; by Hoeffding's lemma each `r_j` is sub-Gaussian with
//! proxy `4^(k−1)` conditionally on the errors and secrets, so the sum's proxy adds
//! `4^(k−1)·128²·n`. Query and answer precision share the margin: [`wire_bits`] picks, for the
//! shape, the `(k, a)` with the fewest bits a query (`n·(32 − k) + m·a`) among those that keep
//! the bound within 2⁻⁴⁰ — at the 1,000,000-image thumbnails (9,408 × 31,250), `k = 6` and
//! `a = 12`: 26 bits a query value and 12 an answer entry (unrounded queries and 16-bit
//! answers are at 2⁻¹⁷⁷), 20 % fewer bytes a query.
//!
//! # Correctness
//! The client computes `a' − H'·s = Δ·(d − 128) + E + ε_H·s − ε_a` with
//! `E = Σ_j d'_j e_j`, `d'_j = d_j − 128 ∈ [−128, 127]`, `e_j` independent centered discrete
//! Gaussians, and `s`'s entries the same, drawn after the hint is fixed (independently of
//! `ε_H`). Each is sub-Gaussian with variance proxy `σ²` (Micciancio–Peikert 2012, Lemma 2.8),
//! so `E + ε_H·s` is sub-Gaussian with proxy `σ²·(Σ d'_j² + Σ ε_{H,i}²) ≤
//! σ²·(128²·n + N·4^(31 − HINT_BITS))`, and rounding recovers the byte exactly when
//! `|E + ε_H·s| < Δ/2 − 2^(31 − a)`, which fails with probability at most
//! `2·exp(−(Δ/2 − 2^(31 − a))² / (2·proxy))`. A union bound over the `m` entries of
//! one answer gives [`failure_log2_at`] (with the rounded query's term above, [`failure_log2`]).
//! [`super::layout::Shape::new`] refuses any shape above 2⁻⁴⁰ per query even unrounded: at
//! `m = 2²⁰` rows that allows about 869,000 columns (at 2²⁰ columns the bound is 2⁻³²), far past
//! what is served. (At `N` = 1,024 these were 900,000 columns and 2⁻³⁶: the rounded hint's
//! term grows with `N`.)
//!
//! The errors and secrets come from `lattice::lwe`'s table sampler (σ = [`SIGMA`], truncated at
//! |e| ≤ 60 = 9.4σ; its docs bound its distance from the exact discrete Gaussian); the
//! correctness bound uses the truncation only to its advantage.

use lattice::lwe::SIGMA;
use rand::{RngCore, SeedableRng};
use rand_chacha::ChaCha20Rng;

/// LWE secret dimension.
pub const LWE_N: usize = 1408;
/// log2 of the ciphertext modulus (q = 2³², `u32` arithmetic).
pub const LOG_Q: u32 = 32;
/// Bits of plaintext per matrix entry (p = 2⁸).
pub const PLAINTEXT_BITS: u32 = 8;
/// Δ = q / p.
pub const DELTA: u32 = 1 << (LOG_Q - PLAINTEXT_BITS);
/// Security of the parameter set claimed, in bits: at least 128 with margin by the estimate
/// `crates/pir/tests/security_estimate.rs` reproduces (module docs).
pub const SECURITY_BITS: u32 = 128;
/// The most LWE samples per secret an attacker is granted by the estimate (module docs: it
/// optimises the count below this).
pub const ESTIMATE_MAX_SAMPLES: usize = 1 << 21;
/// Most columns (LWE samples per secret) a database may have.
pub const MAX_COLS: usize = 1 << 20;
// A database never gives an attacker more samples per secret than the estimate assumed, with
// the normal form's `N` and a generous slack for finding an invertible block (module docs).
const _: () = assert!(MAX_COLS + 2 * LWE_N <= ESTIMATE_MAX_SAMPLES);
/// Bits of each hint entry on the wire (the rest rounded away; module docs).
pub const HINT_BITS: u32 = 20;
/// Most bits an answer entry keeps on the wire ([`wire_bits`]; the fewest is 8).
pub const MAX_ANSWER_BITS: u32 = 16;
const MIN_ANSWER_BITS: u32 = 8;
/// Most rows (bytes per column) a database may have.
pub const MAX_ROWS: usize = 1 << 20;
/// Largest allowed log2 failure probability of one query.
pub const MAX_FAILURE_LOG2: f64 = -40.0;
/// Most low bits a query value drops on the wire ([`query_drop_bits`]; below `log2 Δ`, so the
/// selected column's `Δ` is never rounded).
pub const MAX_QUERY_DROP: u32 = 8;
const _: () = assert!(MAX_QUERY_DROP < LOG_Q - PLAINTEXT_BITS);

/// log2 of the probability that one query over `rows × cols` decodes any byte wrongly (the
/// union bound of the module's correctness argument), at the shape's [`wire_bits`].
pub fn failure_log2(rows: usize, cols: usize) -> f64 {
    let (drop, answer) = wire_bits(rows, cols);
    failure_log2_at(rows, cols, drop, answer)
}

/// [`failure_log2`] with the query's values rounded at random to multiples of `2^drop` and
/// the answer's entries to their top `answer_bits`.
pub fn failure_log2_at(rows: usize, cols: usize, drop: u32, answer_bits: u32) -> f64 {
    let nats = bound_nats(cols, drop, answer_bits);
    (2.0 * rows.max(1) as f64).log2() - nats / std::f64::consts::LN_2
}

/// The exponent `(Δ/2 − 2^(31 − a))² / (2·proxy)` of the module's tail bound, with the query
/// rounded to multiples of `2^drop` and answers to `a` bits. Basic `f64` operations only
/// (correctly rounded on every target), so that client and server compute the same
/// [`wire_bits`].
fn bound_nats(cols: usize, drop: u32, answer_bits: u32) -> f64 {
    let margin = (DELTA / 2) as f64 - rounding_error(answer_bits) as f64;
    let hint = rounding_error(HINT_BITS) as f64;
    let entries = 128.0 * 128.0 * cols.max(1) as f64;
    // Randomised rounding to a multiple of 2^drop: mean zero, in an interval of length
    // 2^drop, so sub-Gaussian with proxy (2^drop)²/4 (Hoeffding's lemma).
    let rounding = if drop == 0 {
        0.0
    } else {
        (1u64 << (2 * drop - 2)) as f64
    };
    let proxy = SIGMA * SIGMA * (entries + LWE_N as f64 * hint * hint) + rounding * entries;
    margin * margin / (2.0 * proxy)
}

/// The wire precision of a `rows × cols` database: `(k, a)`, the low bits each query value
/// leaves off (at most [`MAX_QUERY_DROP`]) and the bits each answer entry keeps (8 to
/// [`MAX_ANSWER_BITS`]). Among the pairs that keep the failure bound within
/// [`MAX_FAILURE_LOG2`], the one with the fewest bits a query, `cols·(32 − k) + rows·a`
/// (ties: the smaller `k`); `(0, 16)` where none does (such shapes are refused). A public
/// function of the shape: both sides compute it, the server chooses nothing. The test is
/// `nats ≥ (40 + ⌈log2(2·rows)⌉)·ln 2`, at least as strict as the bound's own
/// `log2(2·rows)`, with no transcendental function, so every target gets the same answer.
pub fn wire_bits(rows: usize, cols: usize) -> (u32, u32) {
    let union = usize::BITS - (2 * rows.max(1) - 1).leading_zeros();
    let need = (-MAX_FAILURE_LOG2 + f64::from(union)) * std::f64::consts::LN_2;
    let mut best: Option<(usize, u32, u32)> = None;
    for drop in 0..=MAX_QUERY_DROP {
        // The fewest answer bits this drop allows (the bound grows with them).
        let fewest =
            (MIN_ANSWER_BITS..=MAX_ANSWER_BITS).find(|&a| bound_nats(cols, drop, a) >= need);
        if let Some(a) = fewest {
            let bits = cols * (LOG_Q - drop) as usize + rows * a as usize;
            if best.is_none_or(|(b, _, _)| bits < b) {
                best = Some((bits, drop, a));
            }
        }
    }
    best.map_or((0, MAX_ANSWER_BITS), |(_, d, a)| (d, a))
}

/// `v` rounded at random to a multiple of `2^drop`: down, or up with probability
/// `(v mod 2^drop)/2^drop`, so the mean is `v` (wrapping at 2³²). Branch-free in `v`.
#[inline]
pub fn round_at_random(v: u32, drop: u32, rng: &mut impl RngCore) -> u32 {
    if drop == 0 {
        return v; // public: the shape's
    }
    let low_mask = (1u32 << drop) - 1;
    let low = v & low_mask;
    let coin = rng.next_u32() & low_mask;
    // coin < low ⇔ coin − low < 0 (both below 2⁸): the sign bit.
    let up = ((coin as i32 - low as i32) >> 31) as u32 & 1;
    (v & !low_mask).wrapping_add(up << drop)
}

/// The most a value kept to its top `bits` bits is off by: `2^(31 − bits)`.
pub const fn rounding_error(bits: u32) -> u32 {
    1 << (LOG_Q - bits - 1)
}

/// `v` rounded to its top `bits` bits (to the nearest multiple of `2^(32 − bits)`, wrapping):
/// what the wire carries of a hint or answer entry.
#[inline]
pub fn round_top(v: u32, bits: u32) -> u32 {
    v.wrapping_add(rounding_error(bits)) >> (LOG_Q - bits)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failure_bound_is_tiny_at_our_sizes_and_grows_with_columns() {
        let at = |r, c| failure_log2_at(r, c, 0, MAX_ANSWER_BITS);
        assert!(at(1 << 20, 850_000) < MAX_FAILURE_LOG2);
        assert!(at(1 << 20, MAX_COLS) > MAX_FAILURE_LOG2);
        assert!(at(4704, 62_500) < -150.0);
        // At few columns the rounded hint's term dominates the proxy.
        assert!(at(4096, 10_000) < -180.0);
        assert!(at(4096, 100) < at(4096, 10_000));
    }

    #[test]
    fn the_wire_keeps_the_fewest_bits_the_bound_allows() {
        // The 1,000,000-image thumbnails (module docs).
        assert_eq!(wire_bits(9_408, 31_250), (6, 12));
        assert!((failure_log2_at(9_408, 31_250, 0, 16) - -177.4).abs() < 1.0);
        for (rows, cols) in [
            (9_408, 31_250),
            (4_704, 62_500),
            (1_568, 500),
            (1 << 20, 850_000),
        ] {
            let (d, a) = wire_bits(rows, cols);
            assert!(d <= MAX_QUERY_DROP && (MIN_ANSWER_BITS..=MAX_ANSWER_BITS).contains(&a));
            assert!(
                failure_log2(rows, cols) <= MAX_FAILURE_LOG2,
                "{rows} × {cols}"
            );
            // No pair with fewer bits a query is within the bound.
            let bits = |d: u32, a: u32| cols * (32 - d) as usize + rows * a as usize;
            for d2 in 0..=MAX_QUERY_DROP {
                for a2 in MIN_ANSWER_BITS..=MAX_ANSWER_BITS {
                    if bits(d2, a2) < bits(d, a) {
                        assert!(
                            failure_log2_at(rows, cols, d2, a2) > MAX_FAILURE_LOG2 - 1.0,
                            "{rows} × {cols}: ({d2}, {a2}) beats ({d}, {a})"
                        );
                    }
                }
            }
        }
        // Few columns: both rounded; past the unrounded bound: nothing changes.
        let (d, a) = wire_bits(1_568, 500);
        assert!(d > 0 && a < MAX_ANSWER_BITS, "({d}, {a})");
        assert_eq!(wire_bits(1 << 20, MAX_COLS), (0, MAX_ANSWER_BITS));
    }

    #[test]
    fn random_rounding_is_unbiased_and_lands_on_multiples() {
        let mut rng = ChaCha20Rng::seed_from_u64(9);
        for drop in [1u32, 6, 8] {
            for v in [0u32, 1, 37, 255, u32::MAX, u32::MAX - 3, 1 << 24] {
                let n = 40_000;
                let mut sum = 0f64;
                for _ in 0..n {
                    let r = round_at_random(v, drop, &mut rng);
                    assert_eq!(r % (1 << drop), 0);
                    let diff = r.wrapping_sub(v) as i32;
                    assert!(diff.unsigned_abs() < 1 << drop, "{v} → {r}");
                    sum += f64::from(diff);
                }
                let mean = sum / f64::from(n);
                // Standard error ≤ 2^drop / (2·√n) = 2^drop / 400.
                assert!(
                    mean.abs() < 5.0 * f64::from(1u32 << drop) / 400.0,
                    "{v}: {mean}"
                );
            }
        }
        assert_eq!(round_at_random(12_345, 0, &mut rng), 12_345);
    }

    #[test]
    fn no_shape_gives_more_samples_than_the_estimate_assumes() {
        use crate::layout::Shape;
        // Every shape is validated, and a column more than the estimate covers is refused
        // (the served thumbnail and level shapes: `publish::pir::doc`'s tests).
        let at = Shape {
            record_len: 1,
            records: MAX_COLS,
            rows: 1,
            cols: MAX_COLS,
        };
        assert!(at.validate().is_ok());
        let past = Shape {
            records: MAX_COLS + 1,
            cols: MAX_COLS + 1,
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
    fn rounding_keeps_the_top_bits_to_the_nearest() {
        for bits in [HINT_BITS, MAX_ANSWER_BITS, 12] {
            let r = rounding_error(bits);
            for v in [0u32, 1, r - 1, r, r + 1, u32::MAX, 0x8000_0000, 0x1234_5678] {
                let back = round_top(v, bits) << (LOG_Q - bits);
                let off = v.wrapping_sub(back) as i32;
                assert!(off >= -(r as i32) && off < r as i32, "{v:#x}: {off}");
            }
        }
        // Rounding a rounded value changes nothing.
        let v = round_top(0xdead_beef, HINT_BITS) << (LOG_Q - HINT_BITS);
        assert_eq!(round_top(v, HINT_BITS) << (LOG_Q - HINT_BITS), v);
    }
}
