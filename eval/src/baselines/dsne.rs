//! DP-dSNE baseline (evaluation issue; Saha et al., "dSNE", 2020, and its DP version, 2021):
//! t-SNE for data that may not leave its owner. A PUBLIC reference set (here: the anchors) is
//! embedded in 2-D once by ordinary t-SNE; an owner then places its own point against that
//! fixed reference by gradient descent on its t-SNE cost, and the DP version releases every
//! gradient step with Gaussian noise.
//!
//! For one point `y` against fixed reference points `y_j` with input affinities `p_j` (the
//! point's conditional t-SNE affinities to the reference, Σ p_j = 1) and output affinities
//! `q_j = w_j / Σ_k w_k`, `w_j = (1 + ‖y − y_j‖²)⁻¹`, the gradient of `KL(p ‖ q)` is
//! `4·Σ_j (p_j − q_j)·v_j` with `v_j = w_j·(y − y_j)`.
//!
//! Why this DP version is correct (and needs no clipping): only `p` depends on the private
//! features; the rest of the gradient is a function of the current position `y` (public: it is
//! the post-processing of earlier releases) and of public reference points. So each step
//! releases only `g_p = 4·Σ_j p_j·v_j` — a convex combination of the public vectors `4·v_j` —
//! and subtracts the public part itself. See [`privatize`] for the guarantee.

use nalgebra::DMatrix;
use rand::RngCore;

use dp::budget::epsilon_of_rho;
use dp::mechanism::{cdp_delta, release_zcdp, zcdp_sigma, Receipt};
use shared::error::{Error, Result};
use shared::params::PrivacyParams;

/// The public reference: unit feature rows and their fixed 2-D t-SNE coordinates.
#[derive(Debug, Clone)]
pub struct Reference {
    features: DMatrix<f64>,
    embedding: Vec<[f64; 2]>,
    centre: [f64; 2],
}

/// Settings of the per-point descent (public constants).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DsneParams {
    /// Perplexity of the point's input affinities to the reference.
    pub perplexity: f64,
    /// Gradient steps (each one a release in the DP version).
    pub steps: usize,
    /// Step size.
    pub learning_rate: f64,
}

impl Default for DsneParams {
    fn default() -> Self {
        DsneParams {
            perplexity: 30.0,
            steps: 50,
            learning_rate: 2.0,
        }
    }
}

impl Reference {
    /// `features`: n × d rows (normalised to unit length here, as every query is);
    /// `embedding`: their t-SNE coordinates.
    pub fn new(features: &DMatrix<f64>, embedding: Vec<[f64; 2]>) -> Result<Self> {
        let features = paper::laplacian::normalize_rows(features, "reference features")?;
        if embedding.len() != features.nrows() || embedding.len() < 2 {
            return Err(Error::DimensionMismatch {
                what: "reference embedding rows",
                expected: features.nrows(),
                got: embedding.len(),
            });
        }
        shared::error::ensure_finite(embedding.as_flattened(), "reference embedding")?;
        let n = embedding.len() as f64;
        let centre = [
            embedding.iter().map(|p| p[0]).sum::<f64>() / n,
            embedding.iter().map(|p| p[1]).sum::<f64>() / n,
        ];
        Ok(Reference {
            features,
            embedding,
            centre,
        })
    }

    /// The point's conditional affinities `p_j ∝ exp(−β·‖x − x_j‖²)` to the reference, with
    /// `β` found by bisection so that their perplexity `2^H(p)` matches `perplexity`.
    fn affinities(&self, x: &[f64], perplexity: f64) -> Result<Vec<f64>> {
        let d2: Vec<f64> = self
            .features
            .row_iter()
            .map(|r| r.iter().zip(x).map(|(a, b)| (a - b) * (a - b)).sum())
            .collect();
        let dmin = d2.iter().copied().fold(f64::INFINITY, f64::min);
        let target = perplexity.ln();
        let (mut lo, mut hi, mut beta) = (0.0f64, f64::INFINITY, 1.0f64);
        let mut p = vec![0.0; d2.len()];
        for _ in 0..100 {
            // Shifted by dmin for stability; the shift cancels in the normalisation.
            let mut sum = 0.0;
            for (pj, &d) in p.iter_mut().zip(&d2) {
                *pj = (-(d - dmin) * beta).exp();
                sum += *pj;
            }
            let mean_d: f64 = p
                .iter()
                .zip(&d2)
                .map(|(pj, &d)| pj * (d - dmin))
                .sum::<f64>()
                / sum;
            let entropy = sum.ln() + beta * mean_d;
            p.iter_mut().for_each(|pj| *pj /= sum);
            if (entropy - target).abs() < 1e-6 {
                break;
            }
            if entropy > target {
                lo = beta;
                beta = if hi.is_finite() {
                    (beta + hi) / 2.0
                } else {
                    beta * 2.0
                };
            } else {
                hi = beta;
                beta = (beta + lo) / 2.0;
            }
        }
        Ok(p)
    }

    /// `v_j = w_j·(y − y_j)` and `q_j` at position `y`.
    fn forces(&self, y: [f64; 2]) -> (Vec<[f64; 2]>, Vec<f64>) {
        let mut v = Vec::with_capacity(self.embedding.len());
        let mut w = Vec::with_capacity(self.embedding.len());
        for e in &self.embedding {
            let (dx, dy) = (y[0] - e[0], y[1] - e[1]);
            let wj = 1.0 / (1.0 + dx * dx + dy * dy);
            v.push([wj * dx, wj * dy]);
            w.push(wj);
        }
        let total: f64 = w.iter().sum();
        w.iter_mut().for_each(|x| *x /= total);
        (v, w)
    }
}

/// `4·Σ_j c_j·v_j`.
fn combine(c: &[f64], v: &[[f64; 2]]) -> [f64; 2] {
    let mut g = [0.0; 2];
    for (cj, vj) in c.iter().zip(v) {
        g[0] += 4.0 * cj * vj[0];
        g[1] += 4.0 * cj * vj[1];
    }
    g
}

/// Diameter bound of `{4·v_j}`: twice the largest distance from their mean (every point lies in
/// that ball, so any two are at most its diameter apart). O(n).
fn spread(v: &[[f64; 2]]) -> f64 {
    let n = v.len() as f64;
    let m = [
        v.iter().map(|p| p[0]).sum::<f64>() / n,
        v.iter().map(|p| p[1]).sum::<f64>() / n,
    ];
    let r = v
        .iter()
        .map(|p| ((p[0] - m[0]).powi(2) + (p[1] - m[1]).powi(2)).sqrt())
        .fold(0.0, f64::max);
    8.0 * r
}

fn check(reference: &Reference, x: &[f64], params: &DsneParams) -> Result<Vec<f64>> {
    shared::error::ensure_finite(x, "query features")?;
    if x.len() != reference.features.ncols() {
        return Err(Error::DimensionMismatch {
            what: "query features",
            expected: reference.features.ncols(),
            got: x.len(),
        });
    }
    let perplexity_ok =
        params.perplexity >= 1.0 && params.perplexity < reference.embedding.len() as f64;
    let rate_ok = params.learning_rate.is_finite() && params.learning_rate > 0.0;
    if !(perplexity_ok && rate_ok && (1..=1000).contains(&params.steps)) {
        return Err(Error::InvalidParameter {
            name: "dsne params",
            reason: "perplexity in [1, n), 1..=1000 steps, finite learning rate > 0".into(),
        });
    }
    let norm = x.iter().map(|v| v * v).sum::<f64>().sqrt();
    if norm == 0.0 {
        return Err(Error::InvalidParameter {
            name: "query features",
            reason: "all zero".into(),
        });
    }
    Ok(x.iter().map(|v| v / norm).collect())
}

/// Non-private placement (the gallery's, and the noise-free reference line): `steps` gradient
/// steps from the reference's centre.
pub fn embed(x: &[f64], reference: &Reference, params: &DsneParams) -> Result<[f64; 2]> {
    let x = check(reference, x, params)?;
    let p = reference.affinities(&x, params.perplexity)?;
    descend(reference, params, |v| Ok(combine(&p, v)))
}

/// `steps` gradient steps from the reference's centre; `attraction` gives the attraction term
/// `g_p` at the current position's `v` (exactly, or as released with noise).
fn descend(
    reference: &Reference,
    params: &DsneParams,
    mut attraction: impl FnMut(&[[f64; 2]]) -> Result<[f64; 2]>,
) -> Result<[f64; 2]> {
    let mut y = reference.centre;
    for _ in 0..params.steps {
        let (v, q) = reference.forces(y);
        let gp = attraction(&v)?;
        let gq = combine(&q, &v);
        y[0] -= params.learning_rate * (gp[0] - gq[0]);
        y[1] -= params.learning_rate * (gp[1] - gq[1]);
    }
    Ok(y)
}

/// DP-dSNE placement of one private point: `steps` noisy gradient steps from the reference's
/// centre; returns the final position and a receipt for the whole composition.
///
/// Guarantee: (ε, δ)-DP for the point's features (any replacement), with `privacy`'s ε and a
/// proven δ ≤ `privacy.delta` (in `receipt.proven_delta`), given a public reference and params.
///
/// Proof sketch. The total ρ is that of a single discrete-Gaussian release at (ε, δ)
/// ([`zcdp_sigma`] with Δ = 1 gives σ₁, ρ = 1/(2σ₁²)), split evenly over the steps. At step t
/// the position `y_t` is a function of public data and of the earlier releases only, so the
/// vectors `4·v_j(y_t)` are public; the private features enter only through `p`, a probability
/// vector, so `g_p = 4·Σ p_j·v_j` lies in the convex hull of `{4·v_j}`, whose diameter is at most
/// [`spread`] — the L2 sensitivity Δ_t of `g_p` under ANY change of the features. The step is
/// released by [`release_zcdp`] with Δ_t and ρ/T (ρ/T-zCDP, grid rounding included there);
/// `y_{t+1} = y_t − η·(g̃_p − g_q(y_t))` is post-processing. zCDP composes adaptively, so the T
/// releases are ρ-zCDP in total, i.e. (ε, cdp_delta(ρ, ε))-DP, and the output is
/// post-processing of them.
pub fn privatize(
    x: &[f64],
    reference: &Reference,
    params: &DsneParams,
    privacy: &PrivacyParams,
    rng: &mut impl RngCore,
) -> Result<([f64; 2], Receipt)> {
    let x = check(reference, x, params)?;
    let p = reference.affinities(&x, params.perplexity)?;
    drop(x);
    let sigma1 = zcdp_sigma(privacy.epsilon, privacy.delta, 1.0)?;
    let rho_step = 1.0 / (2.0 * sigma1 * sigma1) / params.steps as f64;
    let (mut rho, mut last, mut worst) = (0.0, None::<Receipt>, 0.0f64);
    let y = descend(reference, params, |v| {
        // Δ = 0 only if every reference point coincides; then g_p is public.
        let delta = spread(v).max(f64::MIN_POSITIVE);
        let gp = combine(&p, v);
        let (noisy, r) = release_zcdp(
            &DMatrix::from_row_slice(1, 2, &gp),
            delta,
            rho_step,
            privacy,
            rng,
        )?;
        rho += r.zcdp_rho;
        worst = worst.max(delta);
        last = Some(r);
        let g = noisy.matrix();
        Ok([g[(0, 0)], g[(0, 1)]])
    })?;
    let mut receipt = last.expect("at least one step");
    receipt.zcdp_rho = rho;
    receipt.sensitivity = worst;
    receipt.proven_delta = cdp_delta(rho, privacy.epsilon);
    debug_assert!(epsilon_of_rho(rho, privacy.delta).is_ok());
    Ok((y, receipt))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;
    use shared::params::Mechanism;

    /// Three separated clusters in 8-d with a 2-d reference layout that separates them.
    fn reference(rng: &mut ChaCha8Rng) -> (Reference, DMatrix<f64>) {
        let centres = DMatrix::from_fn(3, 8, |i, j| if j == i { 1.0 } else { 0.0 });
        let x = DMatrix::from_fn(90, 8, |i, j| {
            centres[(i % 3, j)] + 0.05 * rng.random::<f64>()
        });
        let layout = [[-10.0, 0.0], [10.0, 0.0], [0.0, 15.0]];
        let emb = (0..90)
            .map(|i| {
                let c = layout[i % 3];
                [c[0] + rng.random::<f64>(), c[1] + rng.random::<f64>()]
            })
            .collect();
        (Reference::new(&x, emb).unwrap(), centres)
    }

    fn privacy(epsilon: f64) -> PrivacyParams {
        PrivacyParams {
            epsilon,
            delta: 1e-5,
            mechanism: Mechanism::DiscreteGaussian,
        }
    }

    #[test]
    fn affinities_reach_the_perplexity() {
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let (r, c) = reference(&mut rng);
        let x: Vec<f64> = c.row(0).iter().copied().collect();
        let p = r.affinities(&x, 10.0).unwrap();
        let h: f64 = -p
            .iter()
            .filter(|&&v| v > 0.0)
            .map(|v| v * v.ln())
            .sum::<f64>();
        assert!((h.exp() - 10.0).abs() < 1e-3, "{}", h.exp());
        assert!((p.iter().sum::<f64>() - 1.0).abs() < 1e-12);
    }

    #[test]
    fn a_point_lands_by_its_cluster() {
        let mut rng = ChaCha8Rng::seed_from_u64(2);
        let (r, c) = reference(&mut rng);
        let params = DsneParams {
            perplexity: 10.0,
            ..DsneParams::default()
        };
        for (i, want) in [[-10.0, 0.0], [10.0, 0.0], [0.0, 15.0]].iter().enumerate() {
            let x: Vec<f64> = c.row(i).iter().copied().collect();
            let y = embed(&x, &r, &params).unwrap();
            let d = ((y[0] - want[0] - 0.5).powi(2) + (y[1] - want[1] - 0.5).powi(2)).sqrt();
            assert!(d < 3.0, "cluster {i}: {y:?}");
            // With little noise the private placement lands there too.
            let (yp, rec) = privatize(&x, &r, &params, &privacy(1e4), &mut rng).unwrap();
            let dp = ((yp[0] - y[0]).powi(2) + (yp[1] - y[1]).powi(2)).sqrt();
            assert!(dp < 1.0, "cluster {i}: {yp:?} vs {y:?}");
            assert!(rec.proven_delta <= 1e-5);
        }
    }

    #[test]
    fn each_step_sensitivity_covers_any_two_points() {
        // Adversarial: at many public positions, the released part for the most different
        // probability vectors (all mass on one reference point vs all on another — the
        // extreme points of the simplex) never differs by more than the bound.
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let (r, _) = reference(&mut rng);
        let mut worst = 0.0f64;
        for _ in 0..200 {
            let y = [
                40.0 * rng.random::<f64>() - 20.0,
                40.0 * rng.random::<f64>() - 10.0,
            ];
            let (v, _) = r.forces(y);
            let bound = spread(&v);
            for j in 0..v.len() {
                for k in 0..j {
                    let mut a = vec![0.0; v.len()];
                    let mut b = vec![0.0; v.len()];
                    a[j] = 1.0;
                    b[k] = 1.0;
                    let (ga, gb) = (combine(&a, &v), combine(&b, &v));
                    let d = ((ga[0] - gb[0]).powi(2) + (ga[1] - gb[1]).powi(2)).sqrt();
                    assert!(d <= bound * (1.0 + 1e-12), "{d} > {bound}");
                    worst = worst.max(d / bound);
                }
            }
        }
        // The bound is within 2× of the attained worst case (it is a ball around the mean).
        assert!(worst > 0.5, "{worst}");
    }

    #[test]
    fn noise_matches_the_split_budget() {
        // The steps' ρ add up to one release's at (ε, δ), and the receipt proves δ.
        let mut rng = ChaCha8Rng::seed_from_u64(4);
        let (r, c) = reference(&mut rng);
        let x: Vec<f64> = c.row(1).iter().copied().collect();
        let params = DsneParams::default();
        let (_, rec) = privatize(&x, &r, &params, &privacy(2.0), &mut rng).unwrap();
        let s1 = zcdp_sigma(2.0, 1e-5, 1.0).unwrap();
        let rho = 1.0 / (2.0 * s1 * s1);
        assert!(
            rec.zcdp_rho <= rho * (1.0 + 1e-9),
            "{} > {rho}",
            rec.zcdp_rho
        );
        assert!(rec.zcdp_rho > rho * 0.99);
        assert!(rec.proven_delta <= 1e-5);
    }

    #[test]
    fn bad_input_is_rejected() {
        let mut rng = ChaCha8Rng::seed_from_u64(5);
        let (r, _) = reference(&mut rng);
        let p = DsneParams::default();
        assert!(embed(&[0.0; 8], &r, &p).is_err());
        assert!(embed(&[1.0; 7], &r, &p).is_err());
        assert!(embed(&[f64::NAN; 8], &r, &p).is_err());
        let bad = DsneParams { steps: 0, ..p };
        assert!(embed(&[1.0; 8], &r, &bad).is_err());
        assert!(Reference::new(&DMatrix::from_element(3, 2, 1.0), vec![[0.0, 0.0]; 2]).is_err());
        assert!(
            Reference::new(&DMatrix::from_element(3, 2, 1.0), vec![[f64::NAN, 0.0]; 3]).is_err()
        );
    }
}
