//! Exact samplers over uniformly random bits: integer arithmetic only, so every probability
//! they realise is the exact rational (or `exp(−rational)`) their documentation states — no
//! floating-point threshold that could bend a privacy ratio (Canonne, Kamath, Steinke 2020,
//! "The Discrete Gaussian for Differential Privacy", Algorithms 1–3).
//!
//! Every function takes the caller's RNG; privacy-relevant callers pass [`super::rng::secure_rng`].

use rand::RngCore;

use shared::error::{Error, Result};

/// Uniform integer in `0..n` by rejection from the next power of two: exact.
pub fn uniform_below(rng: &mut impl RngCore, n: u128) -> u128 {
    debug_assert!(n > 0);
    if n == 1 {
        return 0;
    }
    let bits = 128 - (n - 1).leading_zeros();
    let mask = if bits == 128 {
        u128::MAX
    } else {
        (1u128 << bits) - 1
    };
    loop {
        let v = ((rng.next_u64() as u128) << 64 | rng.next_u64() as u128) & mask;
        if v < n {
            return v;
        }
    }
}

/// Bernoulli(num/den), exact.
pub fn bernoulli(rng: &mut impl RngCore, num: u128, den: u128) -> bool {
    uniform_below(rng, den) < num
}

/// Bernoulli(exp(−num/den)) for `num ≤ den` (CKS20, Algorithm 1). If `den·K` would overflow
/// (K ≥ 2²⁰ here, probability below 1/2²⁰!) the loop stops as if A = 0; the distortion is far
/// below anything measurable and is covered by the slack noted in the module docs.
fn bernoulli_exp_le1(rng: &mut impl RngCore, num: u128, den: u128) -> bool {
    let mut k: u128 = 1;
    while let Some(kden) = den.checked_mul(k) {
        if !bernoulli(rng, num, kden) {
            break;
        }
        k += 1;
    }
    k % 2 == 1
}

/// Bernoulli(exp(−num/den)) for any `num/den ≥ 0` (CKS20, Algorithm 1, γ > 1 branch).
pub fn bernoulli_exp(rng: &mut impl RngCore, mut num: u128, den: u128) -> bool {
    while num > den {
        if !bernoulli_exp_le1(rng, 1, 1) {
            return false;
        }
        num -= den;
    }
    bernoulli_exp_le1(rng, num, den)
}

/// Discrete Laplace with scale `t`: `P(x) ∝ exp(−|x|/t)` (CKS20, Algorithm 2).
fn sample_discrete_laplace(rng: &mut impl RngCore, t: u128) -> i128 {
    loop {
        let u = uniform_below(rng, t);
        if !bernoulli_exp(rng, u, t) {
            continue;
        }
        let mut v: u128 = 0;
        while bernoulli_exp_le1(rng, 1, 1) {
            v += 1;
        }
        let x = u + t * v;
        let negative = bernoulli(rng, 1, 2);
        if negative && x == 0 {
            continue;
        }
        return if negative { -(x as i128) } else { x as i128 };
    }
}

/// Largest noise scale `N` the u128 arithmetic below supports: with `|Y| ≤` [`MAX_CANDIDATE`]
/// and `t = N + 1`, `|Y|·t < 2⁶⁴`, so the square of its distance from `N²` fits in u128 (at
/// `N = 2³⁰` it wrapped, and a far candidate was accepted as if near). The releases' grid puts
/// their scale near 2²⁵ (`mechanism`), well inside.
pub const MAX_DISCRETE_SCALE: u64 = 1 << 28;

/// Largest `|Y|` a candidate may have: more than `127·t` for every admitted scale.
const MAX_CANDIDATE: u128 = 1 << 35;

/// Exact sample from the discrete Gaussian `N_ℤ(0, N²)`: `P(z) ∝ exp(−z²/(2N²))`
/// (CKS20, Algorithm 3, with σ² = N² an integer so every quantity is an exact integer ratio).
///
/// Candidates with `|Y| >` [`MAX_CANDIDATE`] `> 127·t` are rejected outright instead of being
/// accepted with probability `exp(−γ)`, `γ = (|Y|·t − N²)²/(2N²t²) > 126²/2 > 7,900`: that
/// changes the output law by less than `e^(−7,900)` in total variation.
pub fn sample_discrete_gaussian(rng: &mut impl RngCore, scale: u64) -> i64 {
    assert!(
        (1..=MAX_DISCRETE_SCALE).contains(&scale),
        "scale out of range"
    );
    let n = scale as u128;
    let t = n + 1;
    let sigma2 = n * n;
    let den = 2 * sigma2 * t * t;
    loop {
        let y = sample_discrete_laplace(rng, t);
        let ay = y.unsigned_abs();
        if ay > MAX_CANDIDATE {
            continue;
        }
        let diff = (ay * t).abs_diff(sigma2);
        if bernoulli_exp(rng, diff * diff, den) {
            return y as i64;
        }
    }
}

/// `x = num/den` exactly, for a finite `x ≥ 0` in the range the callers allow
/// (`x = 0` or `2⁻⁶⁰ ≤ x < 2⁶⁴`). Every such f64 is a dyadic rational `m·2^e`, so this is exact.
pub fn exact_ratio(x: f64) -> Result<(u128, u128)> {
    if !(x.is_finite() && x >= 0.0) || (x != 0.0 && !(2f64.powi(-60)..2f64.powi(64)).contains(&x)) {
        return Err(Error::InvalidParameter {
            name: "epsilon",
            reason: format!("{x} cannot be represented as an exact ratio for the sampler"),
        });
    }
    if x == 0.0 {
        return Ok((0, 1));
    }
    let bits = x.to_bits();
    let exp = ((bits >> 52) & 0x7ff) as i32;
    let frac = bits & ((1u64 << 52) - 1);
    // Normal numbers only in this range: x = (2⁵² + frac)·2^(exp − 1075).
    let mut mant = (1u128 << 52) | frac as u128;
    let mut e = exp - 1075;
    let tz = mant.trailing_zeros() as i32;
    mant >>= tz;
    e += tz;
    Ok(if e >= 0 {
        (mant << e, 1)
    } else {
        (mant, 1u128 << (-e))
    })
}

/// Bernoulli(a / (a + b·e^(−ε))), exact, for integers `a ≥ 1`, `b ≥ 0` and ε as accepted by
/// [`exact_ratio`].
///
/// Each round draws `j` uniform in `0..a+b`: `j < a` answers true; otherwise a Bernoulli(e^(−ε))
/// coin (CKS20 Algorithm 1, exact for the rational ε) answers false on heads and repeats on
/// tails. A round ends true w.p. `a/(a+b)` and false w.p. `b·e^(−ε)/(a+b)`, so the answer is
/// true with exactly `a / (a + b·e^(−ε))`. Expected rounds ≤ `(a+b)/a`.
pub fn bernoulli_weighted_exp(
    rng: &mut impl RngCore,
    a: u64,
    b: u64,
    epsilon: f64,
) -> Result<bool> {
    if a == 0 {
        return Err(Error::InvalidParameter {
            name: "a",
            reason: "must be ≥ 1".into(),
        });
    }
    let (num, den) = exact_ratio(epsilon)?;
    let total = a as u128 + b as u128;
    loop {
        if uniform_below(rng, total) < a as u128 {
            return Ok(true);
        }
        if bernoulli_exp(rng, num, den) {
            return Ok(false);
        }
    }
}

/// `count` distinct values drawn uniformly from `0..n` without `exclude`, in uniformly random
/// order (a partial Fisher–Yates shuffle over the `n − 1` candidates, O(n) memory).
pub fn distinct_uniform_excluding(
    rng: &mut impl RngCore,
    n: u32,
    exclude: u32,
    count: usize,
) -> Vec<u32> {
    let mut pool: Vec<u32> = (0..n).filter(|&b| b != exclude).collect();
    debug_assert!(count <= pool.len());
    for i in 0..count.min(pool.len()) {
        let j = i + uniform_below(rng, (pool.len() - i) as u128) as usize;
        pool.swap(i, j);
    }
    pool.truncate(count);
    pool
}

#[cfg(test)]
mod tests {
    /// The sampler's products fit their integers at every admitted scale: `|Y|·t < 2⁶⁴` (so
    /// its distance from `N²` squared fits u128) and `2N²t² < 2¹²⁸`; and the cut-off leaves
    /// more than 127 standard deviations.
    #[test]
    fn the_samplers_arithmetic_fits_at_the_largest_scale() {
        let t = MAX_DISCRETE_SCALE as u128 + 1;
        let n2 = (MAX_DISCRETE_SCALE as u128).pow(2);
        let far = MAX_CANDIDATE.checked_mul(t).expect("|Y|·t fits");
        assert!(far < 1 << 64);
        let diff = far.abs_diff(n2);
        assert!(diff.checked_mul(diff).is_some());
        assert!((2 * n2).checked_mul(t * t).is_some());
        assert!(MAX_CANDIDATE > 127 * t);
        // At the largest scale the sampler runs (a debug build checks every operation).
        let mut rng = crate::rng::secure_rng().unwrap();
        for _ in 0..100 {
            let z = sample_discrete_gaussian(&mut rng, MAX_DISCRETE_SCALE);
            assert!(z.unsigned_abs() <= MAX_CANDIDATE as u64);
        }
    }

    use super::*;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    #[test]
    fn exact_ratio_is_exact() {
        for &x in &[0.0, 0.1, 1.0, 2.5, 8.0, 1e-6, 100.0, 1.0 / 3.0] {
            let (n, d) = exact_ratio(x).unwrap();
            assert_eq!(n as f64 / d as f64, x, "{x}");
            assert!(d.is_power_of_two());
        }
        for &x in &[-1.0, f64::NAN, f64::INFINITY, 1e-30, 1e30] {
            assert!(exact_ratio(x).is_err(), "{x}");
        }
    }

    #[test]
    fn weighted_bernoulli_matches_its_probability() {
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        for &(a, b, eps) in &[(1u64, 3u64, 1.0f64), (2, 6, 0.5), (1, 63, 4.0)] {
            let n = 200_000;
            let hits = (0..n)
                .filter(|_| bernoulli_weighted_exp(&mut rng, a, b, eps).unwrap())
                .count() as f64;
            let p = a as f64 / (a as f64 + b as f64 * (-eps).exp());
            let se = (p * (1.0 - p) / n as f64).sqrt();
            assert!((hits / n as f64 - p).abs() < 5.0 * se, "{a} {b} {eps}");
        }
        assert!(bernoulli_weighted_exp(&mut rng, 0, 1, 1.0).is_err());
    }

    #[test]
    fn distinct_draws_exclude_and_are_distinct() {
        let mut rng = ChaCha8Rng::seed_from_u64(4);
        let v = distinct_uniform_excluding(&mut rng, 10, 3, 9);
        let mut s = v.clone();
        s.sort();
        assert_eq!(s, vec![0, 1, 2, 4, 5, 6, 7, 8, 9]);
    }
}
