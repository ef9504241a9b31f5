//! B-ary randomized response over the blocks of a partition (Warner 1965; Kairouz et al. 2016):
//! release one block, the photo's true block `x` with probability `e^ε / (e^ε + B − 1)` and
//! each other block with `1 / (e^ε + B − 1)`.
//!
//! # Guarantee
//! Pure ε-DP (δ = 0) for the whole photo: for any two photos and any output block `y`,
//! `P(y | x) / P(y | x') ≤ e^ε`.
//!
//! # Proof
//! `P(y | x)` is `e^ε/Z` if `y = x` and `1/Z` otherwise, with the same `Z = e^ε + B − 1` for
//! every `x`; two such values differ by at most the factor `e^ε`. It is the `L = 1` case of the
//! k-subset mechanism ([`super::subset`]), kept separate because a single block is the cheapest
//! release and the one the audit tests pin down first.
//!
//! # Sampling, exactly
//! Keep `x` with probability `1 / (1 + (B − 1)·e^(−ε))` by [`bernoulli_weighted_exp`]
//! (integer arithmetic on the exact dyadic ε); otherwise a block uniform among the `B − 1`
//! others, by rejection-free index arithmetic over the caller's RNG (the client's is
//! [`super::rng::secure_rng`]).

use rand::RngCore;

use super::exact::{bernoulli_weighted_exp, uniform_below};
use super::subset::validate;
use shared::error::Result;

/// `P(output = x) = e^ε / (e^ε + B − 1)`.
pub fn truth_probability(num_blocks: u32, epsilon: f64) -> f64 {
    super::subset::inclusion_probability(num_blocks, 1, epsilon)
}

/// Release one of `num_blocks` blocks with pure ε-DP for `true_block` (see the module docs).
pub fn release(
    rng: &mut impl RngCore,
    true_block: u32,
    num_blocks: u32,
    epsilon: f64,
) -> Result<u32> {
    validate(true_block, num_blocks, 1, epsilon)?;
    if bernoulli_weighted_exp(rng, 1, num_blocks as u64 - 1, epsilon)? {
        return Ok(true_block);
    }
    // Uniform over the others: draw from 0..B−1 and skip over x.
    let y = uniform_below(rng, (num_blocks - 1) as u128) as u32;
    Ok(if y >= true_block { y + 1 } else { y })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    #[test]
    fn output_law_matches() {
        let mut rng = ChaCha8Rng::seed_from_u64(2);
        let (b, eps, n) = (5u32, 1.0, 200_000);
        let mut counts = [0usize; 5];
        for _ in 0..n {
            counts[release(&mut rng, 2, b, eps).unwrap() as usize] += 1;
        }
        let pt = truth_probability(b, eps);
        let po = (1.0 - pt) / 4.0;
        for (y, &c) in counts.iter().enumerate() {
            let p = if y == 2 { pt } else { po };
            let se = (p * (1.0 - p) / n as f64).sqrt();
            assert!((c as f64 / n as f64 - p).abs() < 5.0 * se, "{y}: {c}");
        }
        assert_eq!(release(&mut rng, 0, 1, 1.0).unwrap(), 0);
        assert!(release(&mut rng, 1, 1, 1.0).is_err());
    }
}
