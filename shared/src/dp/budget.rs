//! The privacy budget one client has spent, composed across its searches.
//!
//! Every release samples discrete Gaussian noise whatever its calibration, and its receipt
//! records the exact ρ of the ρ-zCDP guarantee of those bits. zCDP composes additively (Bun &
//! Steinke 2016, Lemma 2.3): k releases with ρ_1 … ρ_k are (Σρ_i)-zCDP together. The total is
//! converted to (ε, δ) at the δ the user sees (CKS20 Cor 13, [`cdp_delta`]). This is much
//! tighter than adding the ε's (basic composition), which is reported too for comparison.

use serde::{Deserialize, Serialize};

use crate::dp::mechanism::{cdp_delta, Receipt};
use crate::error::{Error, Result};

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
/// their ε's, many Gaussian ones by adding ρ.
pub fn compose(receipts: &[Receipt], delta: f64) -> Result<Total> {
    let rho: f64 = receipts.iter().map(|r| r.zcdp_rho).sum();
    let basic_epsilon: f64 = receipts.iter().map(|r| r.epsilon).sum();
    let basic_delta: f64 = receipts.iter().map(|r| r.proven_delta).sum();
    let mut epsilon = epsilon_of_rho(rho, delta)?;
    if basic_delta <= delta {
        epsilon = epsilon.min(basic_epsilon);
    }
    Ok(Total {
        releases: receipts.len(),
        zcdp_rho: rho,
        epsilon,
        delta,
        basic_epsilon,
        basic_delta,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dp::mechanism::release;
    use crate::PrivacyParams;
    use nalgebra::DMatrix;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

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
