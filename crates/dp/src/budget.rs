//! The privacy budget one client has spent, composed across its searches.
//!
//! Every release samples discrete Gaussian noise whatever its calibration, and its receipt
//! records the exact ρ of the ρ-zCDP guarantee of those bits. zCDP composes additively (Bun &
//! Steinke 2016, Lemma 2.3): k releases with ρ_1 … ρ_k are (Σρ_i)-zCDP together. The total is
//! converted to (ε, δ) at the δ the user sees (CKS20 Cor 13, [`cdp_delta`]). This is much
//! tighter than adding the ε's (basic composition), which is reported too for comparison.

use serde::{Deserialize, Serialize};

use crate::mechanism::{cdp_delta, Receipt};
use shared::error::{Error, Result};

/// What a client has spent.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Total {
    pub releases: usize,
    /// Σ ρ_i.
    pub zcdp_rho: f64,
    /// ε of the composed guarantee at `delta`.
    pub epsilon: f64,
    pub delta: f64,
    /// Basic composition: Σ ε_i, at Σ δ_i (proven δ's).
    pub basic_epsilon: f64,
    pub basic_delta: f64,
    /// Σ ε_i of the pure ε-DP releases (block releases, δ = 0) alone.
    #[serde(default)]
    pub pure_epsilon: f64,
    /// Σ ρ_i of the other (Gaussian) releases alone.
    #[serde(default)]
    pub gaussian_rho: f64,
    /// Which of the valid compositions gave `epsilon` (the smallest).
    #[serde(default)]
    pub method: Composition,
}

/// The composition a [`Total`]'s ε comes from. All three are valid for every list of receipts
/// (the last two only when their δ fits); the total is the smallest.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Composition {
    /// Nothing released yet.
    #[default]
    Nothing,
    /// Every ρ added (zCDP) and converted to (ε, δ).
    Zcdp,
    /// Every ε added, at Σδ ≤ δ.
    Basic,
    /// The pure releases' ε added, plus the Gaussian ones' ρ added and converted at δ.
    PurePlusZcdp,
}

/// The least ε (rounded up, 1e-9 relative) at which ρ-zCDP gives (ε, δ)-DP.
pub fn epsilon_of_rho(rho: f64, delta: f64) -> Result<f64> {
    if !(rho.is_finite() && rho >= 0.0) {
        return Err(Error::InvalidParameter {
            name: "rho",
            reason: "must be finite and ≥ 0".into(),
        });
    }
    if !(delta > 0.0 && delta < 1.0) {
        return Err(Error::InvalidParameter {
            name: "delta",
            reason: "must be in (0, 1)".into(),
        });
    }
    if rho == 0.0 {
        return Ok(0.0);
    }
    // ε = ρ + 2√(ρ ln(1/δ)) always suffices (Bun–Steinke Prop. 1.3), so bisect below it.
    let (mut lo, mut hi) = (0.0, rho + 2.0 * (rho * (1.0 / delta).ln()).sqrt());
    for _ in 0..200 {
        let mid = 0.5 * (lo + hi);
        if cdp_delta(rho, mid) <= delta {
            hi = mid;
        } else {
            lo = mid;
        }
        if hi - lo <= 1e-12 * hi {
            break;
        }
    }
    Ok(hi * (1.0 + 1e-9))
}

/// Compose the receipts of every search so far, reported at `delta`.
///
/// Guarantee: the sequence of releases is (`epsilon`, `delta`)-DP for the user's data. Proof:
/// each release is `ρ_i`-zCDP (its receipt), adaptive composition adds ρ, and the conversion is
/// [`epsilon_of_rho`]'s, which only ever rounds ε up.
///
/// Basic composition is valid too (Σε_i at Σδ_i), so when its δ fits, `epsilon` is the smaller
/// of the two: a few pure ε-DP block releases (ρ = ε²/2 each) are better accounted by adding
/// their ε's, many Gaussian ones by adding ρ. So is a mix: the pure releases together are
/// (Σε_p, 0)-DP, the Gaussian ones together (Σρ_g)-zCDP, hence (ε_g, δ)-DP at the user's δ,
/// and basic composition of the two groups gives (Σε_p + ε_g, δ) — interleaved, the argument is
/// the pointwise one of CKS20 Cor 13: on every outcome the pure releases' privacy loss is at
/// most Σε_p, and the Gaussian ones' moment bound holds through the interleaving. Taking the
/// least of these valid totals is valid: each is a function of the receipts alone, never of
/// the results. (Where a person chooses each ε after seeing earlier results of the same photo,
/// each composition has an adaptive form — a privacy filter — but the least of the three has
/// no such proof: docs/threat-model.md, "What is not covered".) Without the mix, one Gaussian
/// release after a few pure ones at a large ε (whose ρ = ε²/2 is large) pushed the total to
/// the zCDP conversion of every ρ once basic composition's Σδ no longer fitted (e.g. 19 → 119
/// for one frame search at ε = 8 after pure releases of 8 + 8 + 2 + 1 and an earlier frame
/// search; with the mix it is 19 + the two frame searches' zCDP total).
pub fn compose(receipts: &[Receipt], delta: f64) -> Result<Total> {
    receipts.iter().try_for_each(Receipt::check)?;
    let rho: f64 = receipts.iter().map(|r| r.zcdp_rho).sum();
    let basic_epsilon: f64 = receipts.iter().map(|r| r.epsilon).sum();
    let basic_delta: f64 = receipts.iter().map(|r| r.proven_delta).sum();
    let pure = |r: &&Receipt| r.delta == 0.0 && r.proven_delta == 0.0;
    let pure_epsilon: f64 = receipts.iter().filter(pure).map(|r| r.epsilon).sum();
    let gaussian_rho: f64 = receipts
        .iter()
        .filter(|r| !pure(r))
        .map(|r| r.zcdp_rho)
        .sum();
    let mut epsilon = epsilon_of_rho(rho, delta)?;
    let mut method = if receipts.is_empty() {
        Composition::Nothing
    } else {
        Composition::Zcdp
    };
    let mixed = pure_epsilon + epsilon_of_rho(gaussian_rho, delta)?;
    if pure_epsilon > 0.0 && gaussian_rho > 0.0 && mixed < epsilon {
        epsilon = mixed;
        method = Composition::PurePlusZcdp;
    }
    if basic_delta <= delta && !receipts.is_empty() && basic_epsilon <= epsilon {
        epsilon = basic_epsilon;
        method = Composition::Basic;
    }
    Ok(Total {
        releases: receipts.len(),
        zcdp_rho: rho,
        epsilon,
        delta,
        basic_epsilon,
        basic_delta,
        pure_epsilon,
        gaussian_rho,
        method,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mechanism::release;
    use nalgebra::DMatrix;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;
    use shared::PrivacyParams;

    fn receipt(eps: f64) -> Receipt {
        let p = PrivacyParams {
            epsilon: eps,
            ..Default::default()
        };
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        release(&DMatrix::zeros(2, 2), 1.0, &p, &mut rng).unwrap().1
    }

    #[test]
    fn one_release_composes_to_itself_and_many_beat_basic_composition() {
        let r = receipt(1.0);
        let one = compose(&[r], 1e-5).unwrap();
        // The receipt's own ρ converts back to (at most) its ε at δ = 1e-5.
        assert!(one.epsilon <= 1.0 + 1e-6, "{one:?}");
        assert!(one.epsilon > 0.9, "{one:?}");
        let many = compose(&vec![r; 25], 1e-5).unwrap();
        assert!((many.zcdp_rho - 25.0 * r.zcdp_rho).abs() < 1e-12);
        assert!((many.basic_epsilon - 25.0).abs() < 1e-9);
        assert!(many.epsilon < 0.5 * many.basic_epsilon, "{many:?}");
        assert!(cdp_delta(many.zcdp_rho, many.epsilon) <= 1e-5);
        assert_eq!(compose(&[], 1e-5).unwrap().epsilon, 0.0);
        assert!(compose(&[r], 0.0).is_err());
        // A stored receipt no release writes (edited to lower the total) is refused.
        for bad in [
            Receipt { epsilon: -3.0, ..r },
            Receipt {
                zcdp_rho: f64::NAN,
                ..r
            },
            Receipt {
                proven_delta: 1.5,
                ..r
            },
            Receipt { delta: -1e-5, ..r },
        ] {
            assert!(compose(&[r, bad], 1e-5).is_err(), "{bad:?}");
        }
    }

    /// The jump the page showed (19.00 → a proposed 119.43 after one frame search at ε = 8):
    /// a frame release and pure block releases add up to 19 by basic composition (Σδ = δ
    /// fits); a second frame release makes Σδ = 2δ, which no longer fits, and the zCDP
    /// conversion of every ρ (a pure release's ρ = ε²/2 = 32 at ε = 8) is far above adding
    /// the pure ε's to the Gaussian releases' own zCDP total.
    #[test]
    fn pure_releases_add_their_epsilon_to_the_gaussian_ones_zcdp_total() {
        let pure = |e: f64| Receipt::pure(e, crate::mechanism::ReleaseKind::BlockSubset);
        let frame = {
            let p = PrivacyParams {
                epsilon: 8.0,
                delta: 1e-5,
                ..Default::default()
            };
            let mut rng = ChaCha8Rng::seed_from_u64(1);
            release(&DMatrix::zeros(1, 10), 2f64.sqrt(), &p, &mut rng)
                .unwrap()
                .1
        };
        let before = [frame, pure(8.0), pure(2.0), pure(1.0)];
        let t0 = compose(&before, 1e-5).unwrap();
        // (The frame release's own zCDP conversion is a hair under its ε: the mixed
        // composition may win by that much.)
        assert!(t0.epsilon <= 19.0 && t0.epsilon > 19.0 - 1e-6, "{t0:?}");
        let mut after = before.to_vec();
        after.push(frame);
        let t = compose(&after, 1e-5).unwrap();
        assert!(t.basic_delta > 1e-5, "{t:?}");
        // What the total was before the mixed composition: every ρ converted.
        let all_zcdp = epsilon_of_rho(t.zcdp_rho, 1e-5).unwrap();
        assert!(all_zcdp > 60.0, "{t:?}");
        assert_eq!(t.method, Composition::PurePlusZcdp, "{t:?}");
        let gaussian = epsilon_of_rho(2.0 * frame.zcdp_rho, 1e-5).unwrap();
        assert!((t.epsilon - (11.0 + gaussian)).abs() < 1e-9, "{t:?}");
        assert!(t.epsilon < 19.0 + 8.0, "{t:?}");
        assert!((t.pure_epsilon - 11.0).abs() < 1e-12);
        assert!((t.gaussian_rho - 2.0 * frame.zcdp_rho).abs() < 1e-12);
        // Pure releases alone: basic composition; Gaussian ones alone: zCDP.
        assert_eq!(
            compose(&[pure(1.0); 3], 1e-5).unwrap().method,
            Composition::Basic
        );
        assert_eq!(
            compose(&[frame; 30], 1e-5).unwrap().method,
            Composition::Zcdp
        );
        assert_eq!(compose(&[], 1e-5).unwrap().method, Composition::Nothing);
    }

    #[test]
    fn epsilon_of_rho_is_the_tight_inverse() {
        for &rho in &[1e-4, 0.01, 0.5, 3.0, 40.0] {
            let e = epsilon_of_rho(rho, 1e-6).unwrap();
            assert!(cdp_delta(rho, e) <= 1e-6);
            assert!(cdp_delta(rho, e * (1.0 - 1e-6)) > 1e-6);
        }
    }
}
