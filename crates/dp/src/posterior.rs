//! What a release tells its observer, as probabilities people can read: the best chance of
//! answering a yes/no question about the photo, and — for a block release — the server's
//! posterior that the photo is in the released blocks. The page words its plans with these.

/// The highest chance with which anyone who sees the output of an (ε, δ)-DP release (and
/// anything computed from it) answers a yes/no question about the photo correctly, when both
/// answers are equally likely beforehand: `(e^ε + δ) / (1 + e^ε)`, at most 1 (for pure ε-DP,
/// δ = 0: `e^ε / (1 + e^ε)`, the accuracy of randomized response; 1/2 at ε = 0, a coin toss).
///
/// Guarantee: for any question `g` about the photo (any yes/no function of it), any prior under
/// which `g` is yes or no with probability 1/2 each, and any guess `A` computed from the output,
/// `P(A = g) ≤ (e^ε + δ)/(1 + e^ε)`. The bound is tight: randomized response on `g` at ε
/// attains it.
///
/// Proof: let `D₁`, `D₀` be the prior on photos given yes and given no, `a = P(A = yes | D₁)`,
/// `b = P(A = no | D₀)`. Any two photos are neighbours (the single query is replaced), so for
/// any photos `x`, `x'` and any event `E` of the output, `P(E | x) ≤ e^ε·P(E | x') + δ`;
/// `A = yes` is such an event (post-processing), and averaging over `x ~ D₁` and `x' ~ D₀`
/// keeps the inequality: `a ≤ e^ε·(1 − b) + δ`, and likewise `b ≤ e^ε·(1 − a) + δ`. Adding,
/// `(a + b)(1 + e^ε) ≤ 2e^ε + 2δ`, and `P(A = g) = (a + b)/2 ≤ (e^ε + δ)/(1 + e^ε)`. ∎
///
/// `epsilon` must be finite and ≥ 0 and `delta` in [0, 1]; anything else gives 1 (no bound
/// claimed).
pub fn yes_no_bound(epsilon: f64, delta: f64) -> f64 {
    if !(epsilon.is_finite() && epsilon >= 0.0 && (0.0..=1.0).contains(&delta)) {
        return 1.0;
    }
    // (e^ε + δ)/(1 + e^ε) = (1 + δe^(−ε))/(1 + e^(−ε)): no overflow at large ε.
    let t = (-epsilon).exp();
    ((1.0 + delta * t) / (1.0 + t)).min(1.0)
}

/// The server's posterior that the photo's own block is among the `size` released of
/// `num_blocks`, after seeing the k-subset release ([`super::subset`]) at `epsilon`, for a
/// prior that gives every block the same chance: `L·e^ε / (L·e^ε + B − L)`. This equals the
/// release's inclusion probability ([`super::subset::inclusion_probability`]): the mechanism
/// treats every block alike, so what the server believes after seeing `S` is exactly how often
/// `S` holds the true block. `1` when every block is released (`L ≥ B`: nothing is learned —
/// the server knew it before) or when `epsilon` is not finite and ≥ 0 (no bound claimed).
///
/// Guarantee: for the uniform prior `π(x) = 1/B` and every released set `S` of size `L`,
/// `P(x ∈ S | S) = L·e^ε / (L·e^ε + B − L)`, the same for every `S`.
///
/// Proof: the mechanism gives `P(S | x) = e^ε/Z` if `x ∈ S` and `1/Z` otherwise, with one
/// normaliser `Z` for every `x` ([`super::subset`]). By Bayes,
/// `P(x ∈ S | S) = Σ_{x∈S} π(x)·e^ε/Z / (Σ_{x∈S} π(x)·e^ε/Z + Σ_{x∉S} π(x)/Z)
///  = π(S)·e^ε / (π(S)·e^ε + 1 − π(S))`, where `π(S)` is the prior mass of `S`: the posterior
/// odds are `e^ε` times the prior odds (the ε-DP bound, attained). With `π(S) = L/B` this is
/// `L·e^ε/(L·e^ε + B − L)`. ∎ (Under another prior the same formula holds with that prior's
/// `π(S)`; the page states the uniform one, what the server learns beyond what it knew.)
pub fn block_posterior(num_blocks: u32, size: u32, epsilon: f64) -> f64 {
    if size >= num_blocks || !(epsilon.is_finite() && epsilon >= 0.0) {
        return 1.0;
    }
    let prior = size as f64 / num_blocks as f64;
    // π·e^ε/(π·e^ε + 1 − π) = π/(π + (1 − π)·e^(−ε)): no overflow at large ε.
    prior / (prior + (1.0 - prior) * (-epsilon).exp())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::subset::{inclusion_probability, release};
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    #[test]
    fn yes_no_bound_at_known_epsilons() {
        assert!((yes_no_bound(8.0, 0.0) - 0.999_665).abs() < 1e-6);
        assert!((yes_no_bound(1.0, 0.0) - 0.731_059).abs() < 1e-6);
        assert_eq!(yes_no_bound(0.0, 0.0), 0.5);
        // δ adds at most δ/(1 + e^ε), never past 1.
        assert!((yes_no_bound(0.0, 0.1) - 0.55).abs() < 1e-12);
        assert_eq!(yes_no_bound(100.0, 1e-6), 1.0);
        // Monotone in ε, below 1 for every finite ε worth showing.
        let grid = [0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0];
        assert!(grid
            .windows(2)
            .all(|w| yes_no_bound(w[0], 0.0) < yes_no_bound(w[1], 0.0)));
        for bad in [-1.0, f64::NAN, f64::INFINITY] {
            assert_eq!(yes_no_bound(bad, 0.0), 1.0);
        }
        assert_eq!(yes_no_bound(1.0, 2.0), 1.0);
    }

    #[test]
    fn yes_no_bound_is_attained_by_randomized_response() {
        // Randomized response on the answer: the truth with probability e^ε/(1 + e^ε); the
        // observer's best guess is the output itself.
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let eps: f64 = 1.0;
        let keep = eps.exp() / (1.0 + eps.exp());
        let n = 200_000;
        let right = (0..n).filter(|_| rng.random::<f64>() < keep).count();
        let p = yes_no_bound(eps, 0.0);
        let se = (p * (1.0 - p) / n as f64).sqrt();
        assert!((right as f64 / n as f64 - p).abs() < 5.0 * se);
    }

    #[test]
    fn block_posterior_is_the_inclusion_probability() {
        for b in [2u32, 16, 64, 512] {
            for l in 1..b.min(40) {
                for eps in [0.0, 0.1, 1.0, 4.0, 8.0, 30.0] {
                    let (post, inc) =
                        (block_posterior(b, l, eps), inclusion_probability(b, l, eps));
                    assert!((post - inc).abs() < 1e-12, "{b} {l} {eps}: {post} {inc}");
                }
            }
        }
        // ε = 8, 2 of 64 blocks: the page's former "moderate" case.
        assert!((block_posterior(64, 2, 8.0) - 0.98971).abs() < 1e-5);
        // ε = 0: the prior, L/B.
        assert!((block_posterior(64, 2, 0.0) - 2.0 / 64.0).abs() < 1e-15);
        // The whole gallery (one block of one) or every block: nothing learned.
        assert_eq!(block_posterior(1, 1, 0.0), 1.0);
        assert_eq!(block_posterior(16, 16, 8.0), 1.0);
    }

    #[test]
    fn block_posterior_matches_bayes_on_sampled_releases() {
        // True block uniform over B; among the releases that came out as one particular set S,
        // the share that hold the true block is the posterior — whatever S.
        let mut rng = ChaCha8Rng::seed_from_u64(11);
        let (b, l, eps) = (5u32, 2u32, 1.0);
        let mut seen = std::collections::HashMap::<Vec<u32>, (usize, usize)>::new();
        for _ in 0..200_000 {
            let x = rng.random_range(0..b);
            let s = release(&mut rng, x, b, l, eps).unwrap();
            let e = seen.entry(s.clone()).or_default();
            e.0 += 1;
            e.1 += usize::from(s.contains(&x));
        }
        let p = block_posterior(b, l, eps);
        assert_eq!(seen.len(), 10, "every set of 2 of 5 occurs");
        for (s, (n, hit)) in seen {
            let se = (p * (1.0 - p) / n as f64).sqrt();
            assert!(
                (hit as f64 / n as f64 - p).abs() < 5.0 * se,
                "{s:?}: {hit}/{n} vs {p}"
            );
        }
    }
}
