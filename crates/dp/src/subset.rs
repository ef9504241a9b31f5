//! The k-subset mechanism over the blocks of a partition (Wang et al. 2016; Ye & Barg 2018):
//! release a set `S` of `L` of the `B` blocks, with `P(S) ∝ e^ε` if the photo's true block `x`
//! is in `S` and `∝ 1` otherwise.
//!
//! # Guarantee
//! Pure ε-DP (δ = 0) for the whole photo: for any two photos (true blocks `x`, `x'`) and any
//! output `S`, `P(S | x) / P(S | x') ≤ e^ε`.
//!
//! # Proof
//! The normaliser is the same for every `x`: `Z = C(B−1, L−1)·e^ε + C(B−1, L)` (the sets that
//! hold `x`, and those that do not). So `P(S | x) ∈ {e^ε/Z, 1/Z}` for every `x`, and the ratio of
//! two such values is at most `e^ε`. Everything computed from `S` afterwards (which blocks are
//! fetched, in what order, the ranking) is post-processing. The guarantee holds for *any*
//! partition, also one a hostile server chose; only the utility depends on it.
//!
//! # Sampling, exactly
//! `P(x ∈ S) = Σ_{S∋x} e^ε/Z = L·e^ε / (L·e^ε + B − L) = L / (L + (B − L)·e^(−ε))`, drawn by
//! [`bernoulli_weighted_exp`] (integer arithmetic, ε as its exact dyadic value, no float
//! threshold). Given `x ∈ S` the rest of `S` is `L − 1` blocks uniform among the `B − 1` others;
//! given `x ∉ S` it is `L` of them — within each case every set is equally likely, as `P(S)` is
//! constant there. Randomness: the caller's RNG; the client passes [`super::rng::secure_rng`].
//! The output is sorted, so it carries nothing but the set.

use rand::RngCore;

use super::exact::{bernoulli_weighted_exp, distinct_uniform_excluding};
use shared::error::{Error, Result};
use shared::params::limits;

/// `P(x ∈ S) = L·e^ε / (L·e^ε + B − L)`: the chance that the release holds the true block
/// (public: depends on ε, B and L only).
pub fn inclusion_probability(num_blocks: u32, size: u32, epsilon: f64) -> f64 {
    let (b, l) = (num_blocks as f64, size as f64);
    if size >= num_blocks {
        return 1.0;
    }
    // L / (L + (B − L)e^(−ε)) avoids overflow at large ε.
    l / (l + (b - l) * (-epsilon).exp())
}

/// Check the public arguments of a block release.
pub fn validate(true_block: u32, num_blocks: u32, size: u32, epsilon: f64) -> Result<()> {
    if !(epsilon.is_finite() && epsilon > 0.0 && epsilon <= limits::MAX_EPSILON) {
        return Err(Error::InvalidParameter {
            name: "epsilon",
            reason: format!("must be in (0, {}]", limits::MAX_EPSILON),
        });
    }
    if num_blocks == 0 || num_blocks as usize > limits::MAX_BLOCKS {
        return Err(Error::InvalidParameter {
            name: "num_blocks",
            reason: format!("must be in 1..={}", limits::MAX_BLOCKS),
        });
    }
    if size == 0 || size > num_blocks {
        return Err(Error::InvalidParameter {
            name: "size",
            reason: format!("must be in 1..={num_blocks}"),
        });
    }
    if true_block >= num_blocks {
        return Err(Error::InvalidParameter {
            name: "true_block",
            reason: format!("must be below {num_blocks}"),
        });
    }
    Ok(())
}

/// Release `size` of `num_blocks` blocks with pure ε-DP for `true_block` (see the module docs).
/// Returns the set, sorted.
pub fn release(
    rng: &mut impl RngCore,
    true_block: u32,
    num_blocks: u32,
    size: u32,
    epsilon: f64,
) -> Result<Vec<u32>> {
    validate(true_block, num_blocks, size, epsilon)?;
    let l = size as u64;
    let included = bernoulli_weighted_exp(rng, l, num_blocks as u64 - l, epsilon)?;
    let others = size as usize - usize::from(included);
    let mut set = distinct_uniform_excluding(rng, num_blocks, true_block, others);
    if included {
        set.push(true_block);
    }
    set.sort_unstable();
    Ok(set)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    #[test]
    fn sets_have_the_right_size_and_inclusion_rate() {
        let mut rng = ChaCha8Rng::seed_from_u64(9);
        let (b, l, eps) = (16u32, 3u32, 1.5);
        let n = 100_000;
        let mut hits = 0;
        for _ in 0..n {
            let s = release(&mut rng, 5, b, l, eps).unwrap();
            assert_eq!(s.len(), l as usize);
            assert!(s.windows(2).all(|w| w[0] < w[1]));
            hits += usize::from(s.contains(&5));
        }
        let p = inclusion_probability(b, l, eps);
        let se = (p * (1.0 - p) / n as f64).sqrt();
        assert!((hits as f64 / n as f64 - p).abs() < 5.0 * se);
        assert_eq!(release(&mut rng, 2, 4, 4, 1.0).unwrap(), vec![0, 1, 2, 3]);
    }

    #[test]
    fn bad_arguments_are_typed_errors() {
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        assert!(release(&mut rng, 4, 4, 1, 1.0).is_err());
        assert!(release(&mut rng, 0, 4, 0, 1.0).is_err());
        assert!(release(&mut rng, 0, 4, 5, 1.0).is_err());
        assert!(release(&mut rng, 0, 0, 1, 1.0).is_err());
        for eps in [0.0, -1.0, f64::NAN, f64::INFINITY, 1e3] {
            assert!(release(&mut rng, 0, 4, 1, eps).is_err(), "{eps}");
        }
    }
}
