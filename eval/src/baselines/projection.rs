//! Baselines that release a noisy linear projection of the query (evaluation issue):
//! DP random projection (Johnson–Lindenstrauss; Kenthapadi, Korolova, Mironov, Mishra 2013)
//! and PCA-then-kNN with a public PCA basis. The matrix is public and data-independent of the
//! query (random, or computed from the public anchors); only the query is private.

use nalgebra::DMatrix;
use rand::{Rng, RngCore};
use rand_distr::StandardNormal;

use dp::mechanism::{release, NoisyEmbedding, Receipt};
use paper::laplacian::normalize_rows;
use shared::error::{Error, Result};
use shared::params::PrivacyParams;

/// A public `k × d` projection `x ↦ P·(x − μ)` of unit feature vectors.
#[derive(Debug, Clone)]
pub struct Projection {
    matrix: DMatrix<f64>,
    centre: DMatrix<f64>,
    sensitivity: f64,
}

impl Projection {
    /// JL: entries i.i.d. N(0, 1/k), no centring.
    pub fn random(d: usize, k: usize, rng: &mut impl Rng) -> Result<Self> {
        check_dims(d, k)?;
        let s = 1.0 / (k as f64).sqrt();
        let m = DMatrix::from_fn(k, d, |_, _| s * rng.sample::<f64, _>(StandardNormal));
        Ok(Self::new(m, DMatrix::zeros(1, d)))
    }

    /// The top-`k` principal directions of public (unit-normalised) rows, centred on their mean.
    pub fn pca(public: &DMatrix<f64>, k: usize) -> Result<Self> {
        let x = normalize_rows(public, "public rows")?;
        let (n, d) = x.shape();
        check_dims(d, k)?;
        if n < 2 {
            return Err(Error::TooSmall {
                what: "public rows for PCA",
                min: 2,
                got: n,
            });
        }
        let mean = DMatrix::from_fn(1, d, |_, j| x.column(j).mean());
        let centred = DMatrix::from_fn(n, d, |i, j| x[(i, j)] - mean[(0, j)]);
        let svd = centred.svd(false, true);
        let vt = svd.v_t.ok_or(Error::InvalidParameter {
            name: "public rows",
            reason: "SVD failed".into(),
        })?;
        // nalgebra sorts singular values in decreasing order.
        let k = k.min(vt.nrows());
        Ok(Self::new(vt.rows(0, k).into_owned(), mean))
    }

    fn new(matrix: DMatrix<f64>, centre: DMatrix<f64>) -> Self {
        let sensitivity = projection_sensitivity(&matrix);
        Projection {
            matrix,
            centre,
            sensitivity,
        }
    }

    /// Project rows (normalised here): `m × k`.
    pub fn apply(&self, x: &DMatrix<f64>) -> Result<DMatrix<f64>> {
        let x = normalize_rows(x, "features to project")?;
        if x.ncols() != self.matrix.ncols() {
            return Err(Error::DimensionMismatch {
                what: "features to project",
                expected: self.matrix.ncols(),
                got: x.ncols(),
            });
        }
        let centred =
            DMatrix::from_fn(x.nrows(), x.ncols(), |i, j| x[(i, j)] - self.centre[(0, j)]);
        Ok(centred * self.matrix.transpose())
    }

    /// The L2 sensitivity of [`Projection::apply`] on one unit vector (the tests check it).
    #[cfg(test)]
    pub fn sensitivity(&self) -> f64 {
        self.sensitivity
    }

    /// Release the projection of one query.
    ///
    /// Guarantee: (ε, `receipt.proven_delta`)-DP with respect to replacing the query's unit
    /// feature vector by any other. Proof: for unit `x, x'`, `‖P(x − μ) − P(x' − μ)‖ ≤
    /// ‖P‖₂·‖x − x'‖ ≤ 2‖P‖₂` (μ cancels); [`projection_sensitivity`] bounds `2‖P‖₂` from above,
    /// plus the rounding of the product; `P` and μ do not depend on the query; [`release`] is
    /// private for that sensitivity.
    pub fn release(
        &self,
        query: &[f64],
        privacy: &PrivacyParams,
        rng: &mut impl RngCore,
    ) -> Result<(NoisyEmbedding, Receipt)> {
        let q = self.apply(&DMatrix::from_row_slice(1, query.len(), query))?;
        release(&q, self.sensitivity, privacy, rng)
    }
}

fn check_dims(d: usize, k: usize) -> Result<()> {
    if d == 0 || k == 0 || k > d || k > shared::params::limits::MAX_FEATURE_DIM {
        return Err(Error::InvalidParameter {
            name: "projection dimension",
            reason: format!("need 1 ≤ k ≤ d, got k = {k}, d = {d}"),
        });
    }
    Ok(())
}

/// `2‖P‖₂` (largest singular value, scaled up by 1e-9 for the SVD's error) plus twice the
/// rounding error of `P·(x − μ)`: each output coordinate is a d-term sum with terms at most
/// `|P_ij|·2`, so it is off by at most `γ_d·2·‖P_i‖₁`; L2 over rows, doubled for safety.
pub fn projection_sensitivity(p: &DMatrix<f64>) -> f64 {
    let spectral = p.singular_values().max() * (1.0 + 1e-9);
    let d = p.ncols() as f64;
    let gamma = 2.0 * (d + 2.0) * f64::EPSILON;
    let slack = p
        .row_iter()
        .map(|r| (gamma * 2.0 * r.iter().map(|v| v.abs()).sum::<f64>()).powi(2))
        .sum::<f64>()
        .sqrt();
    2.0 * spectral + 2.0 * slack
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    /// Antipodal unit vectors along the top right-singular direction attain 2‖P‖₂: the bound
    /// is tight and never exceeded by random pairs.
    #[test]
    fn sensitivity_is_tight_and_never_exceeded() {
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let p = Projection::random(12, 4, &mut rng).unwrap();
        let svd = p.matrix.clone().svd(false, true);
        let top = svd.v_t.unwrap().row(0).into_owned();
        let (a, b) = (top.clone(), -top);
        let pa = p
            .apply(&DMatrix::from_row_slice(1, 12, a.as_slice()))
            .unwrap();
        let pb = p
            .apply(&DMatrix::from_row_slice(1, 12, b.as_slice()))
            .unwrap();
        let attained = (pa - pb).norm();
        assert!(attained <= p.sensitivity() && attained > 0.999_999 * p.sensitivity());
        for _ in 0..500 {
            let x = DMatrix::from_fn(2, 12, |_, _| rng.random::<f64>() - 0.5);
            let y = p.apply(&x).unwrap();
            assert!((y.row(0) - y.row(1)).norm() <= p.sensitivity());
        }
    }

    #[test]
    fn pca_basis_is_orthonormal_and_centred() {
        let mut rng = ChaCha8Rng::seed_from_u64(2);
        let x = DMatrix::from_fn(50, 8, |_, j| rng.random::<f64>() + j as f64 * 0.1);
        let p = Projection::pca(&x, 3).unwrap();
        let g = &p.matrix * p.matrix.transpose();
        assert!((g - DMatrix::identity(3, 3)).amax() < 1e-12);
        assert!((p.sensitivity() - 2.0).abs() < 1e-8);
        let y = p.apply(&x).unwrap();
        assert!(y.column(0).mean().abs() < 1e-12);
        assert!(Projection::pca(&x, 9).is_err());
        assert!(Projection::random(4, 0, &mut rng).is_err());
    }
}
