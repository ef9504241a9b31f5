//! Statistical and calibration tests of the Gaussian release: tests that catch an under-noised
//! release (variance passed as std, wrong calibration, wrong scaling).

use dp::mechanism::{
    analytic_delta, analytic_sigma, calibrate, cdp_delta, classic_sigma, release,
    sample_discrete_gaussian, std_normal_cdf, zcdp_sigma,
};
use nalgebra::DMatrix;
use rand::SeedableRng;
use rand_chacha::ChaCha20Rng;
use shared::params::{Mechanism, PrivacyParams};
use shared::Error;

const EPSILONS: [f64; 7] = [0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0];

fn privacy(epsilon: f64, mechanism: Mechanism) -> PrivacyParams {
    PrivacyParams {
        epsilon,
        delta: 1e-5,
        mechanism,
    }
}

/// Kolmogorov–Smirnov statistic of a sample against a continuous CDF.
fn ks_statistic(mut xs: Vec<f64>, cdf: impl Fn(f64) -> f64) -> f64 {
    xs.sort_by(f64::total_cmp);
    let n = xs.len() as f64;
    xs.iter()
        .enumerate()
        .map(|(i, &x)| {
            let c = cdf(x);
            (c - i as f64 / n).abs().max(((i + 1) as f64 / n - c).abs())
        })
        .fold(0.0, f64::max)
}

/// Asymptotic KS critical value at significance p: sqrt(−ln(p/2) / (2n)).
fn ks_critical(n: usize, p: f64) -> f64 {
    (-(p / 2.0).ln() / (2.0 * n as f64)).sqrt()
}

#[test]
fn classic_formula_and_refusal() {
    let s = classic_sigma(0.5, 1e-5, 2.0).unwrap();
    assert!((s - (2.0 * (1.25e5f64).ln()).sqrt() * 2.0 / 0.5).abs() < 1e-12);
    assert_eq!(
        classic_sigma(1.0, 1e-5, 1.0),
        Err(Error::ClassicEpsilonTooLarge { epsilon: 1.0 })
    );
    assert!(calibrate(&privacy(2.0, Mechanism::ClassicGaussian), 1.0).is_err());
}

#[test]
fn analytic_sigma_is_tight_to_1e9_from_the_valid_side() {
    for eps in EPSILONS.iter().copied().chain([0.01, 20.0]) {
        for delta in [1e-5, 1e-8, 1e-3] {
            let s = analytic_sigma(eps, delta, 1.0).unwrap();
            assert!(analytic_delta(eps, s) <= delta, "eps={eps}: not valid");
            assert!(
                analytic_delta(eps, s * (1.0 - 1e-9)) > delta,
                "eps={eps} delta={delta}: not tight to 1e-9"
            );
        }
    }
    // Balle & Wang's calibration at ε = 1, δ = 1e-5 is σ ≈ 3.73·Δ; it scales linearly in Δ.
    let s = analytic_sigma(1.0, 1e-5, 1.0).unwrap();
    assert!((3.72..3.74).contains(&s), "{s}");
    assert!((analytic_sigma(1.0, 1e-5, 7.0).unwrap() / s - 7.0).abs() < 1e-8);
}

#[test]
fn calibrations_are_ordered_as_theory_says() {
    for eps in EPSILONS {
        let a = analytic_sigma(eps, 1e-5, 1.0).unwrap();
        let z = zcdp_sigma(eps, 1e-5, 1.0).unwrap();
        // The analytic Gaussian is the exact profile, so the zCDP route needs at least as much
        // noise, but not much more.
        assert!(z >= a && z < 1.15 * a, "eps={eps}: zcdp {z} analytic {a}");
        if eps < 1.0 {
            let c = classic_sigma(eps, 1e-5, 1.0).unwrap();
            assert!(c >= z, "eps={eps}: classic {c} below zcdp {z}");
        }
        assert!(cdp_delta(1.0 / (2.0 * z * z), eps) <= 1e-5);
    }
}

#[test]
fn discrete_gaussian_passes_ks_against_standard_normal() {
    let mut rng = ChaCha20Rng::from_seed([11; 32]);
    let scale: u64 = 1 << 24;
    let n = 10_000;
    let xs: Vec<f64> = (0..n)
        .map(|_| sample_discrete_gaussian(&mut rng, scale) as f64 / scale as f64)
        .collect();
    let d = ks_statistic(xs, std_normal_cdf);
    let crit = ks_critical(n, 1e-6);
    assert!(d < crit, "KS statistic {d} >= critical {crit}");
}

#[test]
fn discrete_gaussian_matches_its_exact_pmf_at_small_scale() {
    // At scale 2 the lattice matters: compare frequencies with the exact pmf ∝ exp(−z²/8).
    let mut rng = ChaCha20Rng::from_seed([12; 32]);
    let n = 200_000;
    let mut counts = std::collections::HashMap::new();
    for _ in 0..n {
        *counts
            .entry(sample_discrete_gaussian(&mut rng, 2))
            .or_insert(0usize) += 1;
    }
    let weight = |z: i64| (-((z * z) as f64) / 8.0).exp();
    let norm: f64 = (-40..=40).map(weight).sum();
    for z in -6..=6 {
        let p = weight(z) / norm;
        let expected = n as f64 * p;
        let got = *counts.get(&z).unwrap_or(&0) as f64;
        let sd = (n as f64 * p * (1.0 - p)).sqrt();
        assert!(
            (got - expected).abs() < 5.0 * sd,
            "z={z}: {got} vs {expected}"
        );
    }
}

#[test]
fn released_noise_has_the_calibrated_std() {
    let mut rng = ChaCha20Rng::from_seed([13; 32]);
    let m = 20_000;
    let values = DMatrix::from_element(m, 1, 0.25);
    for mech in [Mechanism::DiscreteGaussian, Mechanism::AnalyticGaussian] {
        let (noisy, receipt) = release(&values, 0.8, &privacy(1.0, mech), &mut rng).unwrap();
        let noise: Vec<f64> = noisy.matrix().iter().map(|v| v - 0.25).collect();
        let mean = noise.iter().sum::<f64>() / m as f64;
        let sd = (noise.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (m - 1) as f64).sqrt();
        // Std error of a sample std is σ/√(2m): six of them is a 1e-9 false-alarm rate, and it
        // fails for any std off by 2× (or by 5%) either way.
        let ratio = sd / receipt.noise_scale;
        assert!(
            (ratio - 1.0).abs() < 6.0 / (2.0 * m as f64).sqrt(),
            "{mech:?}: ratio {ratio}"
        );
        assert!(mean.abs() < 6.0 * receipt.noise_scale / (m as f64).sqrt());
        // Z-scored noise is N(0,1) by KS.
        let z: Vec<f64> = noise.iter().map(|v| v / receipt.noise_scale).collect();
        assert!(ks_statistic(z, std_normal_cdf) < ks_critical(m, 1e-6));
    }
}

#[test]
fn noise_scale_equals_calibrated_sigma_times_sensitivity() {
    let mut rng = ChaCha20Rng::from_seed([14; 32]);
    let values = DMatrix::from_element(2020, 1, 0.0);
    let m = values.len() as f64;
    for mech in [
        Mechanism::DiscreteGaussian,
        Mechanism::AnalyticGaussian,
        Mechanism::ClassicGaussian,
    ] {
        for eps in EPSILONS {
            if mech == Mechanism::ClassicGaussian && eps >= 1.0 {
                continue;
            }
            let p = privacy(eps, mech);
            let sens = 1.7;
            let (_, r) = release(&values, sens, &p, &mut rng).unwrap();
            let per_unit = calibrate(&p, 1.0).unwrap();
            let ideal = per_unit * sens;
            // The only additions are the grid rounding (√m grid steps of sensitivity) and the
            // ceiling of the integer scale (one grid step).
            let extra = per_unit * m.sqrt() * r.grid + r.grid;
            assert!(r.noise_scale >= ideal * (1.0 - 1e-9), "{mech:?} eps={eps}");
            assert!(r.noise_scale <= ideal + extra * 1.001, "{mech:?} eps={eps}");
            assert!(extra < 1e-3 * ideal, "grid too coarse");
            if mech != Mechanism::AnalyticGaussian {
                assert!(
                    r.proven_delta <= 1e-5,
                    "{mech:?} eps={eps}: proven δ {}",
                    r.proven_delta
                );
            }
        }
    }
}

/// Catches variance-used-as-std: doubling (or tripling) the sensitivity must double (triple)
/// the noise, not quadruple it.
#[test]
fn scaling_sensitivity_by_lambda_scales_noise_by_lambda() {
    let mut rng = ChaCha20Rng::from_seed([15; 32]);
    let values = DMatrix::from_element(100, 2, 0.1);
    let p = privacy(1.0, Mechanism::DiscreteGaussian);
    let (_, base) = release(&values, 0.3, &p, &mut rng).unwrap();
    for lambda in [0.25, 2.0, 4.0] {
        let (_, r) = release(&values, 0.3 * lambda, &p, &mut rng).unwrap();
        assert_eq!(
            r.noise_scale,
            lambda * base.noise_scale,
            "power-of-two λ={lambda} is exact"
        );
    }
    // λ = 3 changes the grid, so the ratio is 3 up to the grid terms the receipts bound.
    let (_, r) = release(&values, 0.9, &p, &mut rng).unwrap();
    let per_unit = calibrate(&p, 1.0).unwrap();
    let rel = |rc: &dp::mechanism::Receipt| {
        (per_unit * (values.len() as f64).sqrt() * rc.grid + rc.grid) / (per_unit * rc.sensitivity)
    };
    let tol = 3.0 * (rel(&base) + rel(&r));
    assert!((r.noise_scale / base.noise_scale - 3.0).abs() <= tol && tol < 1e-4);
}

#[test]
fn outputs_lie_on_the_grid_and_bad_input_is_refused() {
    let mut rng = ChaCha20Rng::from_seed([16; 32]);
    let values = DMatrix::from_fn(10, 2, |i, j| (i as f64).sin() + j as f64 / 3.0);
    let (noisy, r) = release(
        &values,
        1.0,
        &privacy(1.0, Mechanism::DiscreteGaussian),
        &mut rng,
    )
    .unwrap();
    for v in noisy.matrix().iter() {
        assert_eq!(
            (v / r.grid).fract(),
            0.0,
            "{v} is not a multiple of {}",
            r.grid
        );
    }
    let mut bad = values.clone();
    bad[(3, 1)] = f64::NAN;
    let p = privacy(1.0, Mechanism::DiscreteGaussian);
    assert!(matches!(
        release(&bad, 1.0, &p, &mut rng),
        Err(Error::NonFinite { .. })
    ));
    assert!(release(&values, 0.0, &p, &mut rng).is_err());
    assert!(release(&values, f64::INFINITY, &p, &mut rng).is_err());
    // Beyond the grid's exact range a value is clamped to its edge, never refused: whether a
    // release fails must not depend on the query.
    let huge = DMatrix::from_fn(2, 2, |i, _| if i == 0 { 1e300 } else { -1e300 });
    let (noisy, r) = release(&huge, 1.0, &p, &mut rng).unwrap();
    let edge = 2f64.powi(51) * r.grid;
    for (i, &v) in noisy.matrix().row(0).iter().enumerate() {
        assert!(
            v.is_finite() && (v - edge).abs() <= 20.0 * r.noise_scale,
            "{i}: {v}"
        );
    }
    for (i, &v) in noisy.matrix().row(1).iter().enumerate() {
        assert!(
            v.is_finite() && (v + edge).abs() <= 20.0 * r.noise_scale,
            "{i}: {v}"
        );
    }
}
