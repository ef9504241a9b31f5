//! The supervised manifold learning query (SMLQ, eq. 4 of the paper).
//!
//! `X_t = ½·D⁻¹(α·L_Y − L_X)·X_{t−1} + X_{t−1}`, with `D = Diag(L_X)`. Since `L_X = D − W`,
//! this is `X_t = ½·(X_{t−1} + D⁻¹(W·X_{t−1} + α·L_Y·X_{t−1}))`, which is what we compute: it
//! needs only the degrees and `W·X` (see [`GraphOperator`]).

use nalgebra::DMatrix;

use crate::laplacian::{dot, GraphOperator, LabelLaplacian};

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
    // Over plain slices: a browser search renormalises 31 times, and nalgebra's generic
    // iterators cost more than the arithmetic in WebAssembly.
    for col in x.as_mut_slice().chunks_exact_mut(n.max(1)) {
        let mean = col.iter().sum::<f64>() / n as f64;
        for v in col.iter_mut() {
            *v -= mean;
        }
    }
    if n > k && x.iter().all(|v| v.is_finite()) && !(k == 2 && orthonormalize_2(x)) {
        let q = x.clone().qr().q();
        // Keep each column's orientation stable (QR may flip signs).
        *x = q.columns(0, k).into_owned();
    }
    let norm = dot(x.as_slice(), x.as_slice()).sqrt();
    if norm > 0.0 && norm.is_finite() {
        let s = (n as f64).sqrt() / norm;
        for v in x.as_mut_slice() {
            *v *= s;
        }
    }
}

/// The Q of the QR decomposition of an n×2 matrix in place, as nalgebra's Householder QR gives
/// it (R's diagonal positive; tested), by Gram–Schmidt applied twice (which makes the columns
/// as orthogonal as Householder's). k = 2 is every embedding the page computes, and a browser
/// search renormalises 31 times: this is a few passes over the columns instead of building and
/// applying reflections. Returns false, leaving `x` as it is, when the columns are zero or
/// (nearly) parallel, where Householder is the safer choice.
fn orthonormalize_2(x: &mut DMatrix<f64>) -> bool {
    let n = x.nrows();
    let (c0, c1) = x.as_mut_slice().split_at_mut(n);
    let (n0, n1, p) = (dot(c0, c0).sqrt(), dot(c1, c1).sqrt(), dot(c0, c1));
    // |cos θ| within 1e-6 of 1 (or a zero column): leave it to Householder.
    let sin2 = 1.0 - (p / (n0 * n1)).powi(2);
    if !(n0 > 0.0 && n1 > 0.0 && sin2 > 1e-12) {
        return false;
    }
    for v in c0.iter_mut() {
        *v /= n0;
    }
    for _ in 0..2 {
        let p = dot(c0, c1);
        for (v, &u) in c1.iter_mut().zip(c0.iter()) {
            *v -= p * u;
        }
    }
    let r = dot(c1, c1).sqrt();
    for v in c1.iter_mut() {
        *v /= r;
    }
    true
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
    use crate::laplacian::tests::random_unit_rows;
    use crate::laplacian::DenseKernel;
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

    /// The two-column fast path gives nalgebra's Q (up to rounding) on random, badly scaled
    /// and nearly parallel columns; parallel and zero columns take the Householder path.
    #[test]
    fn renormalize_for_two_columns_equals_householder() {
        let householder = |x: &DMatrix<f64>| {
            let mut y = x.clone();
            for mut col in y.column_iter_mut() {
                let mean = col.mean();
                col.add_scalar_mut(-mean);
            }
            let q = y.qr().q();
            let q = q.columns(0, 2).into_owned();
            let s = (x.nrows() as f64).sqrt() / q.norm();
            q * s
        };
        let mut rng = ChaCha8Rng::seed_from_u64(8);
        for (n, tilt) in [
            (3, 1.0),
            (4, 1.0),
            (17, 1e3),
            (500, 1.0),
            (1010, 1e-4),
            (64, 1e-9),
        ] {
            let a = DMatrix::from_fn(n, 1, |_, _| rng.sample::<f64, _>(StandardNormal));
            let b = DMatrix::from_fn(n, 1, |_, _| rng.sample::<f64, _>(StandardNormal));
            // Second column = first + tilt·noise: nearly parallel for a small tilt.
            let x = DMatrix::from_fn(n, 2, |i, j| if j == 0 { a[i] } else { a[i] + tilt * b[i] });
            let mut fast = x.clone();
            renormalize(&mut fast);
            let err = (&fast - householder(&x)).amax();
            assert!(err < 1e-9, "n = {n}, tilt = {tilt}: {err}");
        }
        for x in [
            DMatrix::from_row_slice(3, 2, &[1.0, 2.0, 2.0, 4.0, 3.0, 6.0]),
            DMatrix::from_row_slice(3, 2, &[1.0, 0.0, 2.0, 0.0, 4.0, 0.0]),
        ] {
            let mut fast = x.clone();
            renormalize(&mut fast);
            // Gram–Schmidt would divide by a zero norm here.
            let err = (fast - householder(&x)).amax();
            assert!(
                err < 1e-12,
                "the degenerate case must take the Householder path: {err}"
            );
        }
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
