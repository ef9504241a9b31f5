//! The Gaussian release: calibration of σ and an exact discrete Gaussian sampler on a fine
//! power-of-two grid (the floating-point guard).
//!
//! # Guard against floating-point attacks
//! Adding a float Gaussian to a float query leaks the query through the low-order bits of the
//! sum (Mironov 2012). We never do that. As OpenDP does, [`release`] rounds every query value to
//! the grid `γ = 2^g` (with `g` chosen so that the noise scale is 2²⁴–2²⁶ grid steps), adds
//! **exact** discrete Gaussian noise `N_ℤ(0, N²)` sampled with integer arithmetic only
//! (Canonne, Kamath, Steinke 2020, Algorithms 1–3, [`sample_discrete_gaussian`]), and returns
//! `(round(v/γ) + Z)·γ`, which f64 represents exactly. The output set no longer depends on the
//! query's low bits; the rounding costs `√m` grid steps of sensitivity, added before calibration.
//!
//! # No failure that depends on the query
//! A value too large for the grid (`|v| > 2⁵¹·γ`, where `round(v/γ) + Z` would no longer be an
//! exact f64) is clamped to `±2⁵¹·γ` before rounding, never refused. The grid follows from the
//! sensitivity and the privacy parameters alone, so a refusal there would depend on the query —
//! the photo — and a server that chose the frame could place the threshold inside it and learn
//! from which searches never came which side of it a photo lies. Clamping each coordinate to an
//! interval is 1-Lipschitz, so it moves no two queries further apart: the sensitivity, and the
//! guarantee, are unchanged.
//!
//! # Calibration ([`Mechanism`])
//! - `ClassicGaussian`: `σ = √(2 ln(1.25/δ))·Δ/ε`, proven (Dwork & Roth, Thm A.1) for ε < 1 only.
//! - `AnalyticGaussian`: Balle & Wang 2018, Thm 8: the least σ with
//!   `Φ(Δ/2σ − εσ/Δ) − e^ε·Φ(−Δ/2σ − εσ/Δ) ≤ δ`, found by bisection to 1e-9 relative, upper side.
//! - `DiscreteGaussian` (default): the least σ whose ρ = Δ²/(2σ²) converts to (ε, δ) by
//!   [`cdp_delta`].
//!
//! # Guarantee of what is sampled
//! The m-dimensional discrete Gaussian with scale N added to an integer-valued query of L2
//! sensitivity Δ_ℤ is ρ-zCDP with ρ = Δ_ℤ²/(2N²) (CKS20, Thm 14), and ρ-zCDP implies
//! (ε, [`cdp_delta`](ρ, ε))-DP (CKS20, Cor 13). [`Receipt::proven_delta`] is that δ. For
//! `DiscreteGaussian` it is ≤ δ by construction; for `ClassicGaussian` (ε < 1) tests show it is
//! too; for `AnalyticGaussian` it is somewhat larger than δ — the analytic calibration is exact
//! for continuous noise, which no computer samples — and the receipt says so.

use nalgebra::DMatrix;
use rand::RngCore;
use serde::{Deserialize, Serialize};

use shared::error::{ensure_finite, Error, Result};
use shared::params::{Mechanism, PrivacyParams};

pub use super::exact::{sample_discrete_gaussian, MAX_DISCRETE_SCALE};

/// Standard normal CDF.
pub fn std_normal_cdf(x: f64) -> f64 {
    0.5 * libm::erfc(-x / std::f64::consts::SQRT_2)
}

/// Classic Gaussian mechanism: `σ = √(2 ln(1.25/δ))·Δ/ε`; refuses ε ≥ 1.
pub fn classic_sigma(epsilon: f64, delta: f64, sensitivity: f64) -> Result<f64> {
    if epsilon >= 1.0 {
        return Err(Error::ClassicEpsilonTooLarge { epsilon });
    }
    Ok((2.0 * (1.25 / delta).ln()).sqrt() * sensitivity / epsilon)
}

/// δ of the continuous Gaussian mechanism with noise `σ = r·Δ` (Balle & Wang 2018, Thm 8).
pub fn analytic_delta(epsilon: f64, r: f64) -> f64 {
    std_normal_cdf(0.5 / r - epsilon * r) - epsilon.exp() * std_normal_cdf(-0.5 / r - epsilon * r)
}

/// Analytic Gaussian mechanism: the least σ (to 1e-9 relative, rounded up) with
/// `analytic_delta(ε, σ/Δ) ≤ δ`.
pub fn analytic_sigma(epsilon: f64, delta: f64, sensitivity: f64) -> Result<f64> {
    Ok(sensitivity * bisect_upper(|r| analytic_delta(epsilon, r), delta))
}

/// CKS20 Cor 13: ρ-zCDP implies (ε, δ)-DP with
/// `δ = inf_{α>1} exp((α−1)(αρ − ε))/(α−1)·(1 − 1/α)^α`. Every α > 1 gives a valid δ, so an
/// imprecise minimiser only makes δ larger (never invalid); the result is rounded up by 1e-9.
pub fn cdp_delta(rho: f64, epsilon: f64) -> f64 {
    if rho <= 0.0 {
        return 0.0;
    }
    // The log of the objective is convex in α; its derivative (2α−1)ρ − ε + ln(1 − 1/α)
    // is increasing, negative near 1 and positive at `hi`.
    let mut lo = 1.0 + 1e-12;
    let mut hi = ((epsilon + 1.0) / (2.0 * rho) + 1.0).max(2.0);
    for _ in 0..200 {
        let mid = 0.5 * (lo + hi);
        let deriv = (2.0 * mid - 1.0) * rho - epsilon + (-1.0 / mid).ln_1p();
        if deriv < 0.0 {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    let alpha = 0.5 * (lo + hi);
    let log_delta = (alpha - 1.0) * (alpha * rho - epsilon) + alpha * (-1.0 / alpha).ln_1p()
        - (alpha - 1.0).ln();
    (log_delta.exp() * (1.0 + 1e-9)).min(1.0)
}

/// The least σ (1e-9 relative, rounded up) for which ρ = Δ²/(2σ²) gives (ε, δ) via [`cdp_delta`].
pub fn zcdp_sigma(epsilon: f64, delta: f64, sensitivity: f64) -> Result<f64> {
    Ok(sensitivity * bisect_upper(|r| cdp_delta(1.0 / (2.0 * r * r), epsilon), delta))
}

/// σ for a mechanism, budget and sensitivity.
pub fn calibrate(privacy: &PrivacyParams, sensitivity: f64) -> Result<f64> {
    privacy.validate()?;
    if !(sensitivity.is_finite() && sensitivity > 0.0) {
        return Err(Error::InvalidParameter {
            name: "sensitivity",
            reason: "must be finite and > 0".into(),
        });
    }
    let (e, d) = (privacy.epsilon, privacy.delta);
    match privacy.mechanism {
        Mechanism::ClassicGaussian => classic_sigma(e, d, sensitivity),
        Mechanism::AnalyticGaussian => analytic_sigma(e, d, sensitivity),
        Mechanism::DiscreteGaussian => zcdp_sigma(e, d, sensitivity),
    }
}

/// Smallest `r` with `delta_of(r) ≤ target` for a function decreasing in `r`, returned from the
/// upper (valid) side once the bracket is narrower than 1e-10 relative.
fn bisect_upper(delta_of: impl Fn(f64) -> f64, target: f64) -> f64 {
    let mut hi = 1.0;
    while delta_of(hi) > target {
        hi *= 2.0;
    }
    let mut lo = hi;
    while lo > 1e-12 && delta_of(lo) <= target {
        lo *= 0.5;
    }
    while hi - lo > 1e-10 * hi {
        let mid = 0.5 * (lo + hi);
        if delta_of(mid) <= target {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    hi
}

/// Which mechanism produced a release. The Gaussian ones share their names with [`Mechanism`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReleaseKind {
    ClassicGaussian,
    AnalyticGaussian,
    DiscreteGaussian,
    /// Pure ε-DP choice of blocks ([`super::subset`], [`super::randomized_response`]).
    BlockSubset,
}

impl From<Mechanism> for ReleaseKind {
    fn from(m: Mechanism) -> Self {
        match m {
            Mechanism::ClassicGaussian => Self::ClassicGaussian,
            Mechanism::AnalyticGaussian => Self::AnalyticGaussian,
            Mechanism::DiscreteGaussian => Self::DiscreteGaussian,
        }
    }
}

/// What a release spent and proved.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Receipt {
    pub mechanism: ReleaseKind,
    pub epsilon: f64,
    pub delta: f64,
    /// L2 sensitivity Δ of the real-valued query.
    pub sensitivity: f64,
    /// Grid step γ (a power of two).
    pub grid: f64,
    /// Sensitivity after rounding to the grid, `Δ + √m·γ`.
    pub grid_sensitivity: f64,
    /// Scale σ = N·γ of the discrete Gaussian added to every entry.
    pub noise_scale: f64,
    /// ρ of the zCDP guarantee of the sampled noise.
    pub zcdp_rho: f64,
    /// δ at which the sampled release is proven (ε, δ)-DP (CKS20 Thm 14 + Cor 13).
    pub proven_delta: f64,
}

impl Receipt {
    /// The receipt of a pure ε-DP release (δ = 0): ρ = ε²/2 zCDP (Bun & Steinke 2016, Prop 1.4),
    /// which is how [`super::budget::compose`] adds it to the Gaussian releases.
    pub fn pure(epsilon: f64, mechanism: ReleaseKind) -> Self {
        Self {
            mechanism,
            epsilon,
            delta: 0.0,
            sensitivity: 1.0,
            grid: 0.0,
            grid_sensitivity: 1.0,
            noise_scale: 0.0,
            zcdp_rho: 0.5 * epsilon * epsilon,
            proven_delta: 0.0,
        }
    }

    /// Whether this is a receipt a release could have written: ε and ρ finite and ≥ 0, δ and
    /// the proven δ in [0, 1). A stored receipt is read back from a file or the browser's
    /// storage, so it is checked before it counts: a negative ε would lower the total.
    pub fn check(&self) -> Result<()> {
        let ok = [self.epsilon, self.zcdp_rho]
            .iter()
            .all(|v| v.is_finite() && *v >= 0.0)
            && [self.delta, self.proven_delta]
                .iter()
                .all(|v| v.is_finite() && (0.0..1.0).contains(v));
        if ok {
            Ok(())
        } else {
            Err(Error::InvalidParameter {
                name: "receipt",
                reason: format!(
                    "not one a release writes (ε = {}, ρ = {}, δ = {}, proven δ = {})",
                    self.epsilon, self.zcdp_rho, self.delta, self.proven_delta
                ),
            })
        }
    }
}

/// An embedding that has been through the mechanism. Only [`release`] makes one, so a function
/// taking `&NoisyEmbedding` can only see released data:
///
/// ```compile_fail
/// let raw = nalgebra::DMatrix::<f64>::zeros(2, 2);
/// let forged = crate::mechanism::NoisyEmbedding(raw); // private field: does not compile
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct NoisyEmbedding(DMatrix<f64>);

impl NoisyEmbedding {
    pub fn matrix(&self) -> &DMatrix<f64> {
        &self.0
    }
    pub fn into_matrix(self) -> DMatrix<f64> {
        self.0
    }
}

/// Release `values` (an m-entry query of L2 sensitivity `sensitivity`) with (ε, δ)-DP.
///
/// Guarantee: if every neighbouring pair of inputs moves `values` by at most `sensitivity` in
/// L2, the output is ρ-zCDP and (ε, `receipt.proven_delta`)-DP; see the module docs.
/// Proof sketch: clamping each entry to `[−2⁵¹γ, 2⁵¹γ]` is 1-Lipschitz per coordinate, so the
/// clamped query still has L2 sensitivity ≤ Δ; rounding each entry to the grid moves it ≤ γ/2,
/// so the rounded query has sensitivity ≤ Δ + √m·γ = Δ_ℤ·γ; exact discrete Gaussian noise of
/// scale N on ℤ^m gives ρ = Δ_ℤ²/(2N²) (CKS20 Thm 14); Cor 13 converts. Scaling by γ is
/// post-processing. Only the parameters (never the values, once finite) can make it fail.
pub fn release(
    values: &DMatrix<f64>,
    sensitivity: f64,
    privacy: &PrivacyParams,
    rng: &mut impl RngCore,
) -> Result<(NoisyEmbedding, Receipt)> {
    release_with(values, sensitivity, privacy, |d| calibrate(privacy, d), rng)
}

/// Release with a ρ-zCDP target instead of an (ε, δ) one: σ = Δ/√(2ρ) (on the grid, as in
/// [`release`]), so the sampled release is at most `rho`-zCDP. For composing several releases:
/// their ρ's add. The receipt's (ε, δ) fields carry `privacy` (the budget of the whole
/// composition) and `proven_delta` is this release's alone at that ε.
pub fn release_zcdp(
    values: &DMatrix<f64>,
    sensitivity: f64,
    rho: f64,
    privacy: &PrivacyParams,
    rng: &mut impl RngCore,
) -> Result<(NoisyEmbedding, Receipt)> {
    if !(rho.is_finite() && rho > 0.0) {
        return Err(Error::InvalidParameter {
            name: "rho",
            reason: "must be finite and > 0".into(),
        });
    }
    let sigma_of = |d: f64| {
        if d.is_finite() && d > 0.0 {
            Ok(d / (2.0 * rho).sqrt() * (1.0 + 1e-12))
        } else {
            Err(Error::InvalidParameter {
                name: "sensitivity",
                reason: "must be finite and > 0".into(),
            })
        }
    };
    release_with(values, sensitivity, privacy, sigma_of, rng)
}

fn release_with(
    values: &DMatrix<f64>,
    sensitivity: f64,
    privacy: &PrivacyParams,
    sigma_of: impl Fn(f64) -> Result<f64>,
    rng: &mut impl RngCore,
) -> Result<(NoisyEmbedding, Receipt)> {
    ensure_finite(values.as_slice(), "query values")?;
    let sigma0 = sigma_of(sensitivity)?;
    let grid = 2f64.powi(sigma0.log2().floor() as i32 - 24);
    let m = values.len() as f64;
    // Δ_ℤ in grid units, rounded up so it never understates.
    let dz = (sensitivity / grid + m.sqrt()) * (1.0 + 1e-12);
    let sigma_z = sigma_of(dz)?;
    let scale = sigma_z.ceil();
    if scale > MAX_DISCRETE_SCALE as f64 {
        return Err(Error::InvalidParameter {
            name: "epsilon",
            reason: "so small that the noise scale exceeds the sampler's range".into(),
        });
    }
    let scale = scale as u64;
    // Clamped, not refused (module docs): |z0| ≤ 2⁵¹ and the noise below 2⁵¹ keep z exact.
    let limit = 2f64.powi(51) * grid;
    let mut out = values.clone();
    for v in out.iter_mut() {
        let z0 = (v.clamp(-limit, limit) / grid).round();
        let z = z0 as i64 + sample_discrete_gaussian(rng, scale);
        *v = z as f64 * grid;
    }
    let rho = dz * dz / (2.0 * (scale as f64) * (scale as f64));
    let receipt = Receipt {
        mechanism: privacy.mechanism.into(),
        epsilon: privacy.epsilon,
        delta: privacy.delta,
        sensitivity,
        grid,
        grid_sensitivity: dz * grid,
        noise_scale: scale as f64 * grid,
        zcdp_rho: rho,
        proven_delta: cdp_delta(rho, privacy.epsilon),
    };
    Ok((NoisyEmbedding(out), receipt))
}
