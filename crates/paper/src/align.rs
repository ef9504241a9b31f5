//! Kabsch–Umeyama: the similarity transform (rotation, uniform scale, translation,
//! reflection-corrected) that best maps one point set onto another in least squares
//! (Umeyama 1991). The server fits it on the anchor rows and applies it to the query rows.

use nalgebra::{DMatrix, DVector};

use shared::error::{ensure_finite, Error, Result};

/// `y ≈ scale·R·x + t` for row vectors `x`.
#[derive(Debug, Clone, PartialEq)]
pub struct Similarity {
    pub rotation: DMatrix<f64>,
    pub scale: f64,
    pub translation: DVector<f64>,
}

impl Similarity {
    /// Apply to every row of `x` (n×k).
    pub fn apply(&self, x: &DMatrix<f64>) -> Result<DMatrix<f64>> {
        let k = self.rotation.nrows();
        if x.ncols() != k {
            return Err(Error::DimensionMismatch {
                what: "columns of the rows to align",
                expected: k,
                got: x.ncols(),
            });
        }
        let mut y = x * self.rotation.transpose() * self.scale;
        for mut row in y.row_iter_mut() {
            row += self.translation.transpose();
        }
        Ok(y)
    }
}

/// Fit `dst ≈ scale·R·src + t` over corresponding rows.
///
/// Refuses, with [`Error::DegenerateAlignment`], inputs for which the transform is not unique:
/// fewer points than dimensions, all source points equal, or a source set of rank < k − 1.
pub fn umeyama(src: &DMatrix<f64>, dst: &DMatrix<f64>) -> Result<Similarity> {
    let (n, k) = src.shape();
    if dst.shape() != (n, k) {
        return Err(Error::DimensionMismatch {
            what: "anchor rows (client vs server)",
            expected: n * k,
            got: dst.nrows() * dst.ncols(),
        });
    }
    ensure_finite(src.as_slice(), "source anchor rows")?;
    ensure_finite(dst.as_slice(), "target anchor rows")?;
    if k == 0 {
        return Err(Error::DegenerateAlignment {
            reason: "zero-dimensional points",
        });
    }
    if n < k {
        return Err(Error::DegenerateAlignment {
            reason: "fewer anchors than dimensions",
        });
    }
    let mu_s = src.row_mean();
    let mu_d = dst.row_mean();
    let mut sc = src.clone();
    let mut dc = dst.clone();
    for mut r in sc.row_iter_mut() {
        r -= &mu_s;
    }
    for mut r in dc.row_iter_mut() {
        r -= &mu_d;
    }
    let var_s = sc.norm_squared() / n as f64;
    let var_d = dc.norm_squared() / n as f64;
    if !(var_s.is_finite() && var_d.is_finite()) {
        return Err(Error::DegenerateAlignment {
            reason: "anchor points so far apart that their spread overflows",
        });
    }
    let tiny = 1e-24 * (1.0 + mu_s.norm_squared() + mu_d.norm_squared());
    if var_s <= tiny || var_d <= tiny {
        return Err(Error::DegenerateAlignment {
            reason: "all anchor points are equal",
        });
    }
    // Cross-covariance Σ = (1/n)·Dcᵀ·Sc, SVD Σ = U·D·Vᵀ.
    let sigma = dc.transpose() * &sc / n as f64;
    // Finite in, so the SVD's singular values are numbers (it panics on a NaN one).
    if !sigma.iter().all(|v| v.is_finite()) {
        return Err(Error::DegenerateAlignment {
            reason: "anchor points so far apart that their covariance overflows",
        });
    }
    let svd = sigma.clone().svd(true, true);
    let (u, v_t) = (svd.u.unwrap(), svd.v_t.unwrap());
    let mut sv: Vec<(usize, f64)> = svd.singular_values.iter().copied().enumerate().collect();
    sv.sort_by(|a, b| b.1.total_cmp(&a.1));
    if k >= 2 && sv[k - 2].1 <= 1e-12 * sv[0].1 {
        return Err(Error::DegenerateAlignment {
            reason: "anchor points span fewer than k − 1 dimensions; the rotation is not unique",
        });
    }
    // Reflection correction: flip the direction of the smallest singular value if needed.
    let mut s_diag = DVector::from_element(k, 1.0);
    if (u.determinant() * v_t.determinant()) < 0.0 {
        s_diag[sv[k - 1].0] = -1.0;
    }
    let rotation = &u * DMatrix::from_diagonal(&s_diag) * &v_t;
    let trace_ds: f64 = svd
        .singular_values
        .iter()
        .zip(s_diag.iter())
        .map(|(d, s)| d * s)
        .sum();
    let scale = trace_ds / var_s;
    let translation = mu_d.transpose() - scale * &rotation * mu_s.transpose();
    Ok(Similarity {
        rotation,
        scale,
        translation,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    fn random_rotation(rng: &mut impl Rng, k: usize) -> DMatrix<f64> {
        let m = DMatrix::from_fn(k, k, |_, _| rng.random::<f64>() - 0.5);
        let qr = m.qr();
        let mut q = qr.q();
        if q.determinant() < 0.0 {
            let mut c = q.column_mut(0);
            c *= -1.0;
        }
        q
    }

    #[test]
    fn recovers_a_known_transform_to_1e9() {
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        for k in [2, 3, 5] {
            let r = random_rotation(&mut rng, k);
            let scale = 0.3 + 3.0 * rng.random::<f64>();
            let t = DVector::from_fn(k, |_, _| 10.0 * (rng.random::<f64>() - 0.5));
            let src = DMatrix::from_fn(50, k, |_, _| rng.random::<f64>() * 4.0 - 2.0);
            let truth = Similarity {
                rotation: r.clone(),
                scale,
                translation: t.clone(),
            };
            let dst = truth.apply(&src).unwrap();
            let fit = umeyama(&src, &dst).unwrap();
            assert!((&fit.rotation - &r).amax() < 1e-9, "rotation k={k}");
            assert!((fit.scale - scale).abs() < 1e-9 * scale);
            assert!((&fit.translation - &t).amax() < 1e-9);
            assert!((fit.apply(&src).unwrap() - dst).amax() < 1e-9);
        }
    }

    #[test]
    fn corrects_reflections() {
        // dst is a mirror image of src: the best proper rotation must have det +1.
        let mut rng = ChaCha8Rng::seed_from_u64(4);
        let src = DMatrix::from_fn(30, 2, |_, _| rng.random::<f64>());
        let mut dst = src.clone();
        dst.column_mut(0).scale_mut(-1.0);
        let fit = umeyama(&src, &dst).unwrap();
        assert!((fit.rotation.determinant() - 1.0).abs() < 1e-12);
    }

    #[test]
    fn degenerate_inputs_are_typed_errors() {
        let same = DMatrix::from_element(10, 2, 1.5);
        let other = DMatrix::from_fn(10, 2, |i, j| (i * 2 + j) as f64);
        assert!(matches!(
            umeyama(&same, &other),
            Err(Error::DegenerateAlignment { .. })
        ));
        let few = DMatrix::from_row_slice(2, 3, &[1., 2., 3., 4., 5., 7.]);
        assert!(matches!(
            umeyama(&few, &few),
            Err(Error::DegenerateAlignment { .. })
        ));
        // Collinear points in 3-D: rotation about the line is undetermined.
        let line = DMatrix::from_fn(10, 3, |i, _| i as f64);
        assert!(matches!(
            umeyama(&line, &line),
            Err(Error::DegenerateAlignment { .. })
        ));
        // Finite rows whose spread overflows: a typed error, not the SVD's panic.
        let huge = DMatrix::from_fn(100, 2, |i, _| if i % 2 == 0 { 1.7e308 } else { -1.7e308 });
        assert!(matches!(
            umeyama(&huge, &other.clone().resize_vertically(100, 0.5)),
            Err(Error::DegenerateAlignment { .. })
        ));
        let mut nan = other.clone();
        nan[(0, 0)] = f64::NAN;
        assert!(matches!(
            umeyama(&nan, &other),
            Err(Error::NonFinite { .. })
        ));
        assert!(matches!(
            umeyama(&other, &DMatrix::zeros(9, 2)),
            Err(Error::DimensionMismatch { .. })
        ));
    }
}
