//! The supervised manifold learning query (SMLQ, eq. 4 of the paper).
//!
//! `X_t = ½·D⁻¹(α·L_Y − L_X)·X_{t−1} + X_{t−1}`, with `D = Diag(L_X)`. Since `L_X = D − W`,
//! this is `X_t = ½·(X_{t−1} + D⁻¹(W·X_{t−1} + α·L_Y·X_{t−1}))`, which is what we compute: it
//! needs only the degrees and `W·X` (see [`GraphOperator`]).

use nalgebra::DMatrix;

use crate::embed::laplacian::{GraphOperator, LabelLaplacian};

/// One SMLQ iteration. Requires every degree to be positive (true for any Gaussian kernel
/// over two or more points).
pub fn smlq_step(
    gx: &impl GraphOperator,
    ly: &LabelLaplacian,
    alpha: f64,
    x: &DMatrix<f64>,
) -> DMatrix<f64> {
    debug_assert_eq!(gx.len(), x.nrows());
    let wx = gx.weighted_sum(x);
    let lyx = ly.apply(x);
    let deg = gx.degrees();
    DMatrix::from_fn(x.nrows(), x.ncols(), |i, j| {
        0.5 * (x[(i, j)] + (wx[(i, j)] + alpha * lyx[(i, j)]) / deg[i])
    })
}

/// `v(X) = Tr(Xᵀ·L_X·X) − α·Tr(Xᵀ·L_Y·X)`, the objective of Theorem 1.
pub fn objective(
    gx: &impl GraphOperator,
    ly: &LabelLaplacian,
    alpha: f64,
    x: &DMatrix<f64>,
) -> f64 {
    let wx = gx.weighted_sum(x);
    let lyx = ly.apply(x);
    let deg = gx.degrees();
    let mut v = 0.0;
    for i in 0..x.nrows() {
        for j in 0..x.ncols() {
            let lxx = deg[i] * x[(i, j)] - wx[(i, j)];
            v += x[(i, j)] * (lxx - alpha * lyx[(i, j)]);
        }
    }
    v
}

/// Keep the iterate from collapsing: centre each column (the constant vector is a fixed point
/// of the iteration and carries no information), orthonormalise the columns (QR), and scale to
/// Frobenius norm √n. The authors rescale the Frobenius norm only, which lets every column
/// converge to the same dominant eigenvector — a rank-1 embedding that cannot be aligned.
/// Applied to released or non-private data only, so it is post-processing.
pub fn renormalize(x: &mut DMatrix<f64>) {
    let (n, k) = x.shape();
    for mut col in x.column_iter_mut() {
        let mean = col.mean();
        col.add_scalar_mut(-mean);
    }
    if n > k && x.iter().all(|v| v.is_finite()) {
        let q = x.clone().qr().q();
        // Keep each column's orientation stable (QR may flip signs).
        *x = q.columns(0, k).into_owned();
    }
    let norm = x.norm();
    if norm > 0.0 && norm.is_finite() {
        *x *= (n as f64).sqrt() / norm;
    }
}

/// `iterations` SMLQ steps from `x0`, renormalising after each one if asked.
pub fn smlq(
    gx: &impl GraphOperator,
    ly: &LabelLaplacian,
    alpha: f64,
    x0: DMatrix<f64>,
    iterations: usize,
    renormalize_each: bool,
) -> DMatrix<f64> {
    let mut x = x0;
    for _ in 0..iterations {
        x = smlq_step(gx, ly, alpha, &x);
        if renormalize_each {
            renormalize(&mut x);
        }
    }
    x
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::embed::laplacian::tests::random_unit_rows;
    use crate::embed::laplacian::DenseKernel;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;
    use rand_distr::StandardNormal;

    /// Theorem 1 claims the un-normalised iterate never increases `v`. Checked on random data
    /// over a grid of kernel scales and α. If this failed we would report it, not weaken it.
    #[test]
    fn theorem1_objective_is_monotone_for_unnormalised_iterate() {
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        let mut checked = 0;
        for trial in 0..24 {
            let n = [5, 20, 60][trial % 3];
            let d = [3, 16][trial % 2];
            let s = [0.5, 2.0, 8.0, 50.0][trial % 4];
            let alpha = [0.0, 0.5, 1.0, 3.0][(trial / 4) % 4];
            let x = random_unit_rows(&mut rng, n, d);
            let labels: Vec<u32> = (0..n).map(|_| rng.random_range(0..4)).collect();
            let gx = DenseKernel::from_unit_rows(&x, s);
            let ly = LabelLaplacian::new(&labels, 4, s).unwrap();
            let mut q = DMatrix::from_fn(n, 2, |_, _| rng.sample::<f64, _>(StandardNormal));
            let mut v = objective(&gx, &ly, alpha, &q);
            for _ in 0..30 {
                q = smlq_step(&gx, &ly, alpha, &q);
                let v2 = objective(&gx, &ly, alpha, &q);
                let tol = 1e-9 * v.abs().max(1.0);
                assert!(
                    v2 <= v + tol,
                    "objective rose from {v} to {v2} (n={n}, s={s}, alpha={alpha})"
                );
                v = v2;
                checked += 1;
            }
        }
        assert_eq!(checked, 24 * 30);
    }

    #[test]
    fn renormalize_centres_orthogonalises_and_scales() {
        let mut x = DMatrix::from_row_slice(4, 2, &[1., 2., 3., 4., 5., 7., 7., 8.]);
        renormalize(&mut x);
        assert!((x.norm() - 2.0).abs() < 1e-12);
        assert!(x.column(0).sum().abs() < 1e-12 && x.column(1).sum().abs() < 1e-12);
        assert!(x.column(0).dot(&x.column(1)).abs() < 1e-12);
    }
}
