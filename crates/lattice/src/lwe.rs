//! The error distribution of LWE and Ring-LWE alike, and what is drawn from it: a discrete
//! Gaussian of standard deviation [`SIGMA`] = 6.4 truncated at |e| ≤ 60 (9.4σ), sampled in
//! constant time from a table; secrets in *normal form* (drawn from the same distribution); and
//! the `u32` inner product of LWE modulo 2³². The schemes' parameters (dimensions, moduli,
//! failure bounds) are theirs (`pir::lwe` for SimplePIR, [`crate`]'s docs for the ring).
//!
//! The table sampler below differs from the exact discrete Gaussian by at most 2⁻⁵² in
//! statistical distance per sample (its probabilities are f64); LWE hardness is robust to that
//! (the Rényi-divergence argument of Bai et al. 2015), and the correctness bound uses the
//! truncation at |e| ≤ 60 = 9.4σ only to its advantage.

use std::sync::OnceLock;

use rand::RngCore;

/// Error standard deviation.
pub const SIGMA: f64 = 6.4;

/// Errors are sampled from [−TAIL, TAIL].
pub const TAIL: i32 = 60;

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

/// A secret in normal form: `n` entries from the error distribution (`pir::lwe`'s docs: as
/// hard as a uniform secret, and small enough that the hint can be rounded).
pub fn sample_secret(n: usize, rng: &mut impl RngCore) -> Vec<u32> {
    (0..n).map(|_| sample_error(rng)).collect()
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
    use rand::SeedableRng;
    use rand_chacha::ChaCha20Rng;

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
    fn secrets_are_small_and_fresh() {
        let mut rng = ChaCha20Rng::seed_from_u64(3);
        let (a, b) = (sample_secret(1408, &mut rng), sample_secret(1408, &mut rng));
        assert_eq!(a.len(), 1408);
        assert!(a.iter().all(|&v| (v as i32).abs() <= TAIL));
        assert_ne!(a, b);
    }

    #[test]
    fn dot_wraps() {
        let a = vec![u32::MAX; 9];
        let b = vec![2u32; 9];
        assert_eq!(dot(&a, &b), 0u32.wrapping_sub(18));
    }
}
