//! DP audit of the block-release mechanisms: sample each ≥ 10⁶ times for two photos with
//! different true blocks and check every output's frequency ratio against e^ε.
//!
//! The check is one-sided per output and direction: with `a`, `b` the counts of an output under
//! the two photos, `log(a/b) − ε` is compared with its standard error
//! `√((1 − p̂_a)/(n·p̂_a) + (1 − p̂_b)/(n·p̂_b))` (delta method); the audit fails if it exceeds
//! `Z_CRIT` standard errors. `Z_CRIT = 5` is fixed in advance: one-sided tail 2.9·10⁻⁷, so with
//! ≤ 40 comparisons a correct mechanism fails with probability < 1.2·10⁻⁵. An under-noised
//! mechanism (run at 2ε while claiming ε) must fail it — a test shows that it does, so the
//! audit is able to fail.

use std::collections::BTreeMap;

use dp::{budget, mechanism::Receipt, mechanism::ReleaseKind, randomized_response, subset};
use rand::SeedableRng;
use rand_chacha::ChaCha20Rng;

const SAMPLES: usize = 1_000_000;
const Z_CRIT: f64 = 5.0;

/// Counts of each output over `SAMPLES` draws.
fn histogram<T: Ord>(mut draw: impl FnMut() -> T) -> BTreeMap<T, usize> {
    let mut h = BTreeMap::new();
    for _ in 0..SAMPLES {
        *h.entry(draw()).or_insert(0) += 1;
    }
    h
}

/// `Err` naming the worst output if any frequency ratio exceeds e^ε beyond `Z_CRIT` standard
/// errors; `Ok` with the largest standardised excess otherwise.
fn audit<T: Ord + std::fmt::Debug>(
    a: &BTreeMap<T, usize>,
    b: &BTreeMap<T, usize>,
    epsilon: f64,
) -> Result<f64, String> {
    let n = SAMPLES as f64;
    let mut worst = f64::NEG_INFINITY;
    let outputs: std::collections::BTreeSet<&T> = a.keys().chain(b.keys()).collect();
    for o in outputs {
        let (ca, cb) = (*a.get(o).unwrap_or(&0), *b.get(o).unwrap_or(&0));
        if ca == 0 || cb == 0 {
            // An output possible under one photo only is an infinite ratio.
            return Err(format!("output {o:?} seen {ca} vs {cb} times"));
        }
        let (pa, pb) = (ca as f64 / n, cb as f64 / n);
        let se = ((1.0 - pa) / (n * pa) + (1.0 - pb) / (n * pb)).sqrt();
        for excess in [(pa / pb).ln() - epsilon, (pb / pa).ln() - epsilon] {
            let z = excess / se;
            worst = worst.max(z);
            if z > Z_CRIT {
                return Err(format!(
                    "output {o:?}: ratio e^{:.4} exceeds e^{epsilon} by {z:.1} standard errors",
                    excess + epsilon
                ));
            }
        }
    }
    Ok(worst)
}

fn rr(seed: u64, true_block: u32, epsilon: f64) -> BTreeMap<u32, usize> {
    let mut rng = ChaCha20Rng::seed_from_u64(seed);
    histogram(|| randomized_response::release(&mut rng, true_block, 4, epsilon).unwrap())
}

fn k_subset(seed: u64, true_block: u32, epsilon: f64) -> BTreeMap<Vec<u32>, usize> {
    let mut rng = ChaCha20Rng::seed_from_u64(seed);
    histogram(|| subset::release(&mut rng, true_block, 6, 2, epsilon).unwrap())
}

#[test]
fn randomized_response_passes_the_audit() {
    let eps = 1.0;
    let (a, b) = (rr(1, 0, eps), rr(2, 3, eps));
    assert_eq!(a.len(), 4);
    audit(&a, &b, eps).unwrap();
    // The true block's ratio is attained: the bound is tight, not loose.
    let ratio = a[&0] as f64 / b[&0] as f64;
    assert!((ratio.ln() - eps).abs() < 0.02, "{ratio}");
}

#[test]
fn k_subset_passes_the_audit() {
    let eps = 1.0;
    let (a, b) = (k_subset(3, 0, eps), k_subset(4, 5, eps));
    assert_eq!(a.len(), 15, "every 2-subset of 6 blocks is possible");
    audit(&a, &b, eps).unwrap();
    let ratio = a[&vec![0, 1]] as f64 / b[&vec![0, 1]] as f64;
    assert!((ratio.ln() - eps).abs() < 0.05, "{ratio}");
}

#[test]
fn the_audit_catches_a_mechanism_run_at_twice_its_epsilon() {
    let eps = 1.0;
    let err = audit(&rr(5, 0, 2.0 * eps), &rr(6, 3, 2.0 * eps), eps).unwrap_err();
    assert!(err.contains("exceeds"), "{err}");
    let err = audit(&k_subset(7, 0, 2.0 * eps), &k_subset(8, 5, 2.0 * eps), eps).unwrap_err();
    assert!(err.contains("exceeds"), "{err}");
}

#[test]
fn a_pure_release_composes_with_gaussian_ones_in_rho() {
    let block = Receipt::pure(2.0, ReleaseKind::BlockSubset);
    assert_eq!(block.zcdp_rho, 2.0);
    assert_eq!(block.proven_delta, 0.0);
    // Two block releases at ε = 2 are 4-zCDP and, by basic composition, 4-DP with δ = 0; the
    // total reports the better of the two valid guarantees.
    let t = budget::compose(&[block, block], 1e-5).unwrap();
    assert!((t.zcdp_rho - 4.0).abs() < 1e-12);
    assert!((t.basic_epsilon - 4.0).abs() < 1e-12);
    assert_eq!(t.basic_delta, 0.0);
    assert_eq!(t.epsilon, 4.0);
    // Many small pure releases: adding ρ beats adding ε.
    let small = Receipt::pure(0.1, ReleaseKind::BlockSubset);
    let many = budget::compose(&vec![small; 400], 1e-5).unwrap();
    assert!(many.epsilon < 0.5 * many.basic_epsilon, "{many:?}");
    // It round-trips through JSON as the page stores it.
    let json = serde_json::to_string(&block).unwrap();
    assert!(json.contains("\"block_subset\""));
    let back: Receipt = serde_json::from_str(&json).unwrap();
    assert_eq!(back, block);
}
