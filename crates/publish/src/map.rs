//! The block map: a level's block centroids drawn flat, for the page's picture of which blocks
//! a search downloaded. Public data only (the published centroids), so drawing it reveals
//! nothing; a pure, deterministic function, so every client draws the same map.

use nalgebra::DMatrix;

use shared::error::{Error, Result};

/// Largest feature dimension [`block_map`] projects from (its cost is O(B·d² + d³); the
/// clients' model has d = 64).
pub const MAX_MAP_DIM: usize = 1_024;

/// Each of the `B` rows of `centroids` (`B × dim`, row-major) as a point in the plane: its
/// coordinates along the top two principal components of the rows (the directions in which the
/// centroids spread most), centred on their mean and scaled by one factor so the farthest
/// coordinate is ±1 (the picture keeps its proportions).
///
/// Deterministic: the covariance's eigenvectors are ordered by eigenvalue (ties by index) and
/// each is given the sign that makes its largest-magnitude entry positive (ties by index), so
/// the same centroids always give the same map. One row (the whole gallery) is the origin; a
/// level whose centroids all coincide maps to the origin; with two rows the second coordinate
/// is 0.
pub fn block_map(centroids: &[f32], dim: usize) -> Result<Vec<[f64; 2]>> {
    if dim == 0 || dim > MAX_MAP_DIM || !centroids.len().is_multiple_of(dim) {
        return Err(Error::InvalidParameter {
            name: "centroids",
            reason: format!(
                "{} values are not rows of dimension {dim} (1..={MAX_MAP_DIM})",
                centroids.len()
            ),
        });
    }
    if centroids.iter().any(|v| !v.is_finite()) {
        return Err(Error::InvalidParameter {
            name: "centroids",
            reason: "must be finite".into(),
        });
    }
    let n = centroids.len() / dim;
    let mut x = DMatrix::from_row_iterator(n, dim, centroids.iter().map(|&v| v as f64));
    for j in 0..dim {
        let mean = x.column(j).sum() / n.max(1) as f64;
        x.column_mut(j).add_scalar_mut(-mean);
    }
    let cov = x.transpose() * &x;
    let eig = cov.symmetric_eigen();
    let mut order: Vec<usize> = (0..dim).collect();
    order.sort_by(|&a, &b| {
        eig.eigenvalues[b]
            .total_cmp(&eig.eigenvalues[a])
            .then(a.cmp(&b))
    });
    let mut axes = Vec::with_capacity(2);
    for &k in order.iter().take(2) {
        let mut v = eig.eigenvectors.column(k).into_owned();
        // Directions with (numerically) no spread carry no picture: leave that coordinate 0.
        if eig.eigenvalues[k] <= 1e-12 * eig.eigenvalues[order[0]].max(f64::MIN_POSITIVE) {
            v.fill(0.0);
        }
        let lead = (0..dim).fold(
            0,
            |best, i| if v[i].abs() > v[best].abs() { i } else { best },
        );
        if v[lead] < 0.0 {
            v.neg_mut();
        }
        axes.push(v);
    }
    while axes.len() < 2 {
        axes.push(nalgebra::DVector::zeros(dim));
    }
    let px = &x * &axes[0];
    let py = &x * &axes[1];
    let scale = px
        .iter()
        .chain(py.iter())
        .fold(0.0f64, |m, v| m.max(v.abs()));
    let s = if scale > 0.0 { 1.0 / scale } else { 0.0 };
    Ok((0..n).map(|i| [px[i] * s, py[i] * s]).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Points on a plane inside 6-d space: (u, v) ↦ u·a + v·b + c for orthonormal a, b.
    fn planar(points: &[[f64; 2]]) -> Vec<f32> {
        let s = 0.5f64.sqrt();
        let a = [s, s, 0.0, 0.0, 0.0, 0.0];
        let b = [0.0, 0.0, 0.6, 0.0, 0.8, 0.0];
        let c = [0.3, -1.0, 2.0, 0.5, 0.0, 7.0];
        points
            .iter()
            .flat_map(|&[u, v]| (0..6).map(move |j| (u * a[j] + v * b[j] + c[j]) as f32))
            .collect()
    }

    fn dist(p: [f64; 2], q: [f64; 2]) -> f64 {
        ((p[0] - q[0]).powi(2) + (p[1] - q[1]).powi(2)).sqrt()
    }

    #[test]
    fn a_planar_level_keeps_its_shape() {
        // Spread more along u than v: the first coordinate is u (up to sign), the second v.
        let pts = [
            [-3.0, 0.0],
            [3.0, 0.5],
            [0.0, 1.0],
            [1.0, -1.0],
            [-1.0, -0.5],
        ];
        let map = block_map(&planar(&pts), 6).unwrap();
        assert_eq!(map.len(), pts.len());
        // Distances keep their ratios (one scale factor, a rigid motion otherwise).
        let k = dist(map[0], map[1]) / dist(pts[0], pts[1]);
        for i in 0..pts.len() {
            for j in 0..pts.len() {
                let (m, p) = (dist(map[i], map[j]), dist(pts[i], pts[j]));
                assert!((m - k * p).abs() < 1e-5, "{i} {j}: {m} vs {}", k * p);
            }
        }
        // Scaled so the farthest coordinate is ±1, and the first axis carries the most spread.
        let max = map
            .iter()
            .flat_map(|p| p.iter())
            .fold(0.0f64, |m, v| m.max(v.abs()));
        assert!((max - 1.0).abs() < 1e-12);
        let var = |c: usize| map.iter().map(|p| p[c] * p[c]).sum::<f64>();
        assert!(var(0) > 4.0 * var(1), "{map:?}");
    }

    #[test]
    fn the_map_is_deterministic_and_sign_fixed() {
        let pts = [[-3.0, 0.2], [3.0, 0.5], [0.0, 1.0], [1.0, -1.0]];
        let rows = planar(&pts);
        let a = block_map(&rows, 6).unwrap();
        assert_eq!(a, block_map(&rows, 6).unwrap());
        // Mirroring the centroids through their mean gives the same map: the signs are fixed by
        // the axes, not by the data's orientation.
        let mirrored: Vec<f32> = planar(&pts.map(|[u, v]| [-u, -v]));
        let b = block_map(&mirrored, 6).unwrap();
        for (p, q) in a.iter().zip(&b) {
            assert!(
                (p[0] + q[0]).abs() < 1e-5 && (p[1] + q[1]).abs() < 1e-5,
                "{p:?} {q:?}"
            );
        }
    }

    #[test]
    fn small_and_degenerate_levels() {
        assert_eq!(block_map(&[0.5, 1.0, 2.0], 3).unwrap(), vec![[0.0, 0.0]]);
        let two = block_map(&[0.0, 0.0, 2.0, 0.0], 2).unwrap();
        assert_eq!(two.len(), 2);
        assert!((two[0][0] + 1.0).abs() < 1e-12 && (two[1][0] - 1.0).abs() < 1e-12);
        assert!(two.iter().all(|p| p[1].abs() < 1e-12));
        let same = block_map(&[1.0, 2.0, 1.0, 2.0, 1.0, 2.0], 2).unwrap();
        assert!(same.iter().all(|p| p == &[0.0, 0.0]));
        assert!(block_map(&[1.0, 2.0, 3.0], 2).is_err());
        assert!(block_map(&[f32::NAN, 0.0], 2).is_err());
        assert!(block_map(&[], 0).is_err());
        assert_eq!(block_map(&[], 4).unwrap(), Vec::<[f64; 2]>::new());
    }
}
