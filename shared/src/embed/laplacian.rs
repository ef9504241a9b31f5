//! Gaussian-kernel graphs over features, embeddings and labels.
//!
//! Convention (the only one in this workspace, and the one the sensitivity bound assumes):
//! `w_ij = exp(-‖z_i − z_j‖² / s)` for `i ≠ j`, `w_ii = 0`, `L = D − W`, `D_ii = Σ_j w_ij`,
//! with `s = kernel_scale`. Labels are 1-D points, so `w^Y_ij = exp(-(y_i − y_j)² / s)`.
//!
//! SMLQ never needs `L` itself, only the degrees `D` and products `W·X`, so the operators
//! below expose exactly that ([`GraphOperator`]). `L_Y·X` is a per-class sum and never builds an
//! n×n matrix.

use nalgebra::DMatrix;

use crate::error::{ensure_finite, Error, Result};

/// The kernel weight for a squared distance under the workspace convention.
#[inline]
pub fn kernel_weight(dist2: f64, kernel_scale: f64) -> f64 {
    (-dist2 / kernel_scale).exp()
}

/// The least weight any feature kernel over unit-norm rows may hold: `e^(−4/s)` (squared
/// distances are at most 4), rounded down by far more than any rounding error. The
/// sensitivity bound uses exactly this value, and [`weights_in_place`] clamps to it.
pub fn min_unit_weight(kernel_scale: f64) -> f64 {
    kernel_weight(4.0, kernel_scale) * (1.0 - 1e-12)
}

/// `exp(x)` for `x ≤ 0`, written so that a loop over a slice vectorises: Cody–Waite reduction
/// `x = k·ln2 + r`, `|r| ≤ ln2/2`, a degree-13 Taylor polynomial for `e^r`, and `2^k` built from
/// its bits. Relative error below 1e-14 (tested); 0 below −708 (where e^x is subnormal).
#[inline(always)]
pub fn exp_neg(x: f64) -> f64 {
    const LOG2E: f64 = std::f64::consts::LOG2_E;
    const LN2_HI: f64 = f64::from_bits(0x3fe6_2e42_fee0_0000); // fdlibm ln2_hi
    const LN2_LO: f64 = f64::from_bits(0x3dea_39ef_3579_3c76); // fdlibm ln2_lo
    const SHIFTER: f64 = 6_755_399_441_055_744.0; // 1.5 · 2^52: rounds to nearest integer
    let xc = x.max(-708.0);
    let t = xc * LOG2E + SHIFTER;
    let kf = t - SHIFTER;
    let r = (xc - kf * LN2_HI) - kf * LN2_LO;
    // Horner for Σ r^i / i!, i = 0..=13.
    let mut p = 1.0 / 6_227_020_800.0;
    p = p * r + 1.0 / 479_001_600.0;
    p = p * r + 1.0 / 39_916_800.0;
    p = p * r + 1.0 / 3_628_800.0;
    p = p * r + 1.0 / 362_880.0;
    p = p * r + 1.0 / 40_320.0;
    p = p * r + 1.0 / 5_040.0;
    p = p * r + 1.0 / 720.0;
    p = p * r + 1.0 / 120.0;
    p = p * r + 1.0 / 24.0;
    p = p * r + 1.0 / 6.0;
    p = p * r + 0.5;
    p = p * r + 1.0;
    p = p * r + 1.0;
    // t's low mantissa bits hold 2^51 + k; adding the bias and shifting drops everything
    // but the 11 exponent bits k + 1023 (integer ops only, so this vectorises).
    let scale = f64::from_bits(t.to_bits().wrapping_add(1023) << 52);
    let v = p * scale;
    if x < -708.0 {
        0.0
    } else {
        v
    }
}

/// Turn squared distances into kernel weights in place, `w = exp(−d²/s)`, clamped to
/// `[lo, 1]`. Clamping makes the range the sensitivity proof assumes hold exactly, whatever the
/// rounding of the distance or the exponential. Weights below 1e-150 become 0 before the
/// clamp: they change nothing measurable, and products of them would be subnormal, which is
/// slow on every CPU.
pub fn weights_in_place(d2: &mut [f64], kernel_scale: f64, lo: f64) {
    let inv = -1.0 / kernel_scale;
    for v in d2.iter_mut() {
        let e = exp_neg(*v * inv);
        let e = if e < 1e-150 { 0.0 } else { e };
        *v = e.clamp(lo, 1.0);
    }
}

/// What SMLQ needs from a feature graph: its degrees and the product `W·X`.
pub trait GraphOperator {
    /// Number of points.
    fn len(&self) -> usize;
    /// `D_ii = Σ_j w_ij`.
    fn degrees(&self) -> &[f64];
    /// `W·X` for an n×k matrix `X`.
    fn weighted_sum(&self, x: &DMatrix<f64>) -> DMatrix<f64>;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Rows scaled to unit L2 norm; zero rows and non-finite values are refused.
pub fn normalize_rows(x: &DMatrix<f64>, what: &'static str) -> Result<DMatrix<f64>> {
    normalize_rows_owned(x.clone(), what)
}

/// [`normalize_rows`] without a copy.
pub fn normalize_rows_owned(mut x: DMatrix<f64>, what: &'static str) -> Result<DMatrix<f64>> {
    ensure_finite(x.as_slice(), what)?;
    let norms: Vec<f64> = x.row_iter().map(|r| r.norm()).collect();
    if norms.iter().any(|&v| v == 0.0 || !v.is_finite()) {
        return Err(Error::ZeroRow { what });
    }
    for mut col in x.column_iter_mut() {
        for (v, n) in col.iter_mut().zip(&norms) {
            *v /= n;
        }
    }
    Ok(x)
}

/// A dense kernel over n points, stored as its strict lower triangle packed column by column
/// (`n(n−1)/2` weights): O(n²) memory, for the client (n ≤ `MAX_CLIENT_ROWS`) and small
/// galleries. Every product walks contiguous memory.
#[derive(Debug, Clone)]
pub struct DenseKernel {
    n: usize,
    packed: Vec<f64>,
    degrees: Vec<f64>,
}

/// Offset of column `j`'s first entry (row `j + 1`) in the packed lower triangle.
#[inline]
fn col_offset(n: usize, j: usize) -> usize {
    j * n - j * (j + 1) / 2
}

impl DenseKernel {
    /// Kernel over unit-norm rows, from the Gram matrix: `‖u − v‖² = 2 − 2⟨u, v⟩`, clamped to
    /// `[0, 4]`, and weights clamped to `[min_unit_weight(s), 1]`, so every weight lies in the
    /// range the sensitivity proof assumes, whatever the rounding.
    ///
    /// The caller guarantees unit-norm rows (see [`normalize_rows`]).
    pub fn from_unit_rows(x: &DMatrix<f64>, kernel_scale: f64) -> Self {
        let n = x.nrows();
        let lo = min_unit_weight(kernel_scale);
        // Gram columns in blocks of 256, lower part only ((n−j)×256 at a time): never the full
        // n×n Gram matrix, and half its flops.
        const BLOCK: usize = 256;
        let mut gram = DMatrix::<f64>::zeros(0, 0);
        let mut block_start = usize::MAX;
        Self::from_columns(n, |j, col| {
            if j < block_start || j >= block_start + BLOCK {
                block_start = j;
                let b = BLOCK.min(n - j);
                gram = x.rows(j, n - j) * x.rows(j, b).transpose();
            }
            let (c, h) = (j - block_start, n - block_start);
            let g = &gram.as_slice()[c * h + c + 1..(c + 1) * h];
            for (out, &v) in col.iter_mut().zip(g) {
                *out = (2.0 - 2.0 * v).clamp(0.0, 4.0);
            }
            weights_in_place(col, kernel_scale, lo);
        })
    }

    /// Kernel over arbitrary points (e.g. an embedding), from exact squared distances. The
    /// inner loops run over contiguous columns of `z`, so they vectorise.
    pub fn from_points(z: &DMatrix<f64>, kernel_scale: f64) -> Self {
        let (n, k) = z.shape();
        let zs = z.as_slice();
        Self::from_columns(n, |j, col| {
            for c in 0..k {
                let zc = &zs[c * n..(c + 1) * n];
                let zj = zc[j];
                for (out, &zi) in col.iter_mut().zip(&zc[j + 1..]) {
                    let d = zi - zj;
                    *out += d * d;
                }
            }
            weights_in_place(col, kernel_scale, 0.0);
        })
    }

    /// From a full symmetric weight matrix (its diagonal is ignored: `w_ii = 0`).
    pub fn from_weights(w: &DMatrix<f64>) -> Self {
        let n = w.nrows();
        let ws = w.as_slice();
        Self::from_columns(n, |j, col| {
            col.copy_from_slice(&ws[j * n + j + 1..(j + 1) * n])
        })
    }

    /// Build by filling each packed column `j` (rows `j+1..n`, zero-initialised).
    pub fn from_columns(n: usize, mut fill: impl FnMut(usize, &mut [f64])) -> Self {
        let mut packed = vec![0.0; n * n.saturating_sub(1) / 2];
        for j in 0..n {
            let off = col_offset(n, j);
            fill(j, &mut packed[off..off + (n - 1 - j)]);
        }
        let mut degrees = vec![0.0; n];
        for j in 0..n {
            let off = col_offset(n, j);
            let col = &packed[off..off + (n - 1 - j)];
            degrees[j] += sum(col);
            for (d, &w) in degrees[j + 1..].iter_mut().zip(col) {
                *d += w;
            }
        }
        DenseKernel { n, packed, degrees }
    }

    /// `w_ij` (0 on the diagonal).
    pub fn weight(&self, i: usize, j: usize) -> f64 {
        let (hi, lo) = if i > j { (i, j) } else { (j, i) };
        if hi == lo {
            0.0
        } else {
            self.packed[col_offset(self.n, lo) + (hi - lo - 1)]
        }
    }

    /// The full weight matrix (O(n²) memory; for caches and tests).
    pub fn to_dense(&self) -> DMatrix<f64> {
        DMatrix::from_fn(self.n, self.n, |i, j| self.weight(i, j))
    }
}

impl GraphOperator for DenseKernel {
    fn len(&self) -> usize {
        self.degrees.len()
    }
    fn degrees(&self) -> &[f64] {
        &self.degrees
    }
    /// `W·X` from the packed lower triangle: column `j` contributes a dot product to row `j`
    /// and an axpy to rows `j+1..n` — both over contiguous memory, O(n²k).
    fn weighted_sum(&self, x: &DMatrix<f64>) -> DMatrix<f64> {
        let (n, k) = x.shape();
        let mut out = DMatrix::<f64>::zeros(n, k);
        let xs = x.as_slice();
        let os = out.as_mut_slice();
        // One pass over the packed triangle; each column stays in cache for all k outputs.
        for j in 0..n {
            let off = col_offset(n, j);
            let col = &self.packed[off..off + (n - 1 - j)];
            for c in 0..k {
                let xc = &xs[c * n..(c + 1) * n];
                let oc = &mut os[c * n..(c + 1) * n];
                oc[j] += dot(col, &xc[j + 1..]);
                let xj = xc[j];
                for (o, &w) in oc[j + 1..].iter_mut().zip(col) {
                    *o += w * xj;
                }
            }
        }
        out
    }
}

/// Dot product with eight independent accumulators, so the compiler can vectorise it (a
/// single running f64 sum cannot be reordered, and is latency-bound).
#[inline]
pub fn dot(a: &[f64], b: &[f64]) -> f64 {
    let mut acc = [0.0f64; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for l in 0..8 {
            acc[l] += x[l] * y[l];
        }
    }
    let tail: f64 = ra.iter().zip(rb).map(|(x, y)| x * y).sum();
    acc.iter().sum::<f64>() + tail
}

/// Sum with eight independent accumulators (see [`dot`]).
#[inline]
pub fn sum(a: &[f64]) -> f64 {
    let mut acc = [0.0f64; 8];
    let c = a.chunks_exact(8);
    let r: f64 = c.remainder().iter().sum();
    for x in c {
        for l in 0..8 {
            acc[l] += x[l];
        }
    }
    acc.iter().sum::<f64>() + r
}

/// Squared Euclidean distance.
#[inline]
pub fn dist2(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| (x - y) * (x - y)).sum()
}

/// `L_Y` for integer labels, applied per class in O(n·k + C²·k) without an n×n matrix.
#[derive(Debug, Clone)]
pub struct LabelLaplacian {
    labels: Vec<u32>,
    /// `class_weights[(a, b)] = exp(-(a − b)² / s)`.
    class_weights: DMatrix<f64>,
    degrees: Vec<f64>,
}

impl LabelLaplacian {
    /// Labels must lie in `0..num_classes` (a public range), else [`Error::LabelOutOfRange`].
    pub fn new(labels: &[u32], num_classes: u32, kernel_scale: f64) -> Result<Self> {
        let c = num_classes as usize;
        if let Some(&bad) = labels.iter().find(|&&y| y >= num_classes) {
            return Err(Error::LabelOutOfRange {
                label: bad,
                max: num_classes.saturating_sub(1),
            });
        }
        let class_weights = DMatrix::from_fn(c, c, |a, b| {
            let d = a as f64 - b as f64;
            kernel_weight(d * d, kernel_scale)
        });
        let mut counts = vec![0.0; c];
        for &y in labels {
            counts[y as usize] += 1.0;
        }
        let class_degree: Vec<f64> = (0..c)
            .map(|a| {
                (0..c)
                    .map(|b| class_weights[(a, b)] * counts[b])
                    .sum::<f64>()
                    - 1.0
            })
            .collect();
        let degrees = labels.iter().map(|&y| class_degree[y as usize]).collect();
        Ok(LabelLaplacian {
            labels: labels.to_vec(),
            class_weights,
            degrees,
        })
    }

    pub fn len(&self) -> usize {
        self.labels.len()
    }

    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }

    pub fn labels(&self) -> &[u32] {
        &self.labels
    }

    pub fn degrees(&self) -> &[f64] {
        &self.degrees
    }

    /// `L_Y · X`: `(L_Y X)_i = (d_i + 1)·X_i − Σ_c w(y_i, c)·S_c`, with `S_c` the sum of the
    /// rows of class `c` (the `+ X_i` removes the self term, since `w_ii = 0`).
    pub fn apply(&self, x: &DMatrix<f64>) -> DMatrix<f64> {
        let (n, k) = x.shape();
        let c = self.class_weights.nrows();
        let mut class_sums = DMatrix::<f64>::zeros(c, k);
        for (i, &y) in self.labels.iter().enumerate() {
            for col in 0..k {
                class_sums[(y as usize, col)] += x[(i, col)];
            }
        }
        let mixed = &self.class_weights * class_sums;
        DMatrix::from_fn(n, k, |i, col| {
            (self.degrees[i] + 1.0) * x[(i, col)] - mixed[(self.labels[i] as usize, col)]
        })
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    pub(crate) fn random_unit_rows(rng: &mut impl Rng, n: usize, d: usize) -> DMatrix<f64> {
        let x = DMatrix::from_fn(n, d, |_, _| rng.random::<f64>() - 0.5);
        normalize_rows(&x, "test").unwrap()
    }

    /// Reference: the dense Laplacian `D − W` from the definition.
    pub(crate) fn dense_laplacian(points: &[Vec<f64>], s: f64) -> DMatrix<f64> {
        let n = points.len();
        let mut l = DMatrix::<f64>::zeros(n, n);
        for i in 0..n {
            for j in 0..n {
                if i != j {
                    let w = kernel_weight(dist2(&points[i], &points[j]), s);
                    l[(i, j)] = -w;
                    l[(i, i)] += w;
                }
            }
        }
        l
    }

    #[test]
    fn label_laplacian_matches_dense_definition() {
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let labels: Vec<u32> = (0..57).map(|_| rng.random_range(0..10)).collect();
        let x = DMatrix::from_fn(57, 3, |_, _| rng.random::<f64>());
        for s in [0.5, 2.0, 30.0] {
            let ly = LabelLaplacian::new(&labels, 10, s).unwrap();
            let pts: Vec<Vec<f64>> = labels.iter().map(|&y| vec![y as f64]).collect();
            let dense = dense_laplacian(&pts, s) * &x;
            assert!((ly.apply(&x) - dense).amax() < 1e-10);
        }
    }

    #[test]
    fn feature_kernel_matches_dense_definition() {
        let mut rng = ChaCha8Rng::seed_from_u64(2);
        let x = random_unit_rows(&mut rng, 40, 7);
        let q = DMatrix::from_fn(40, 2, |_, _| rng.random::<f64>());
        let pts: Vec<Vec<f64>> = x.row_iter().map(|r| r.iter().copied().collect()).collect();
        let s = 1.5;
        let lx = dense_laplacian(&pts, s);
        let k = DenseKernel::from_unit_rows(&x, s);
        let kp = DenseKernel::from_points(&x, s);
        for kern in [&k, &kp] {
            let d = DMatrix::from_diagonal(&nalgebra::DVector::from_vec(kern.degrees().to_vec()));
            let lq = &d * &q - kern.weighted_sum(&q);
            assert!((lq - &lx * &q).amax() < 1e-10);
        }
    }

    /// Several Gram blocks (n > 256): every weight and degree matches the definition.
    #[test]
    fn blocked_kernel_matches_definition_across_blocks() {
        let mut rng = ChaCha8Rng::seed_from_u64(12);
        let n = 600;
        let x = random_unit_rows(&mut rng, n, 5);
        let s = 0.8;
        let k = DenseKernel::from_unit_rows(&x, s);
        let rows: Vec<Vec<f64>> = x.row_iter().map(|r| r.iter().copied().collect()).collect();
        let mut max_err: f64 = 0.0;
        for i in (0..n).step_by(7) {
            let mut deg = 0.0;
            for j in 0..n {
                let want = if i == j {
                    0.0
                } else {
                    kernel_weight(dist2(&rows[i], &rows[j]), s)
                };
                max_err = max_err.max((k.weight(i, j) - want).abs());
                deg += want;
            }
            assert!((k.degrees()[i] - deg).abs() < 1e-10 * deg);
        }
        assert!(max_err < 1e-12, "{max_err}");
        let q = DMatrix::from_fn(n, 3, |_, _| rng.random::<f64>());
        let dense = k.to_dense() * &q;
        assert!((k.weighted_sum(&q) - dense).amax() < 1e-9);
    }

    #[test]
    fn fast_exp_is_accurate() {
        let mut worst: f64 = 0.0;
        for i in 0..200_000 {
            let x = -(i as f64) * 708.0 / 200_000.0 - 1e-7 * (i % 7) as f64;
            let rel = (exp_neg(x) - x.exp()).abs() / x.exp();
            worst = worst.max(rel);
        }
        assert!(worst < 1e-14, "worst relative error {worst}");
        assert_eq!(exp_neg(0.0), 1.0);
        assert_eq!(exp_neg(-800.0), 0.0);
        assert_eq!(exp_neg(f64::NEG_INFINITY), 0.0);
    }

    #[test]
    fn labels_out_of_range_are_refused() {
        assert_eq!(
            LabelLaplacian::new(&[0, 3], 3, 1.0).unwrap_err(),
            Error::LabelOutOfRange { label: 3, max: 2 }
        );
    }

    #[test]
    fn zero_and_nan_rows_are_refused() {
        let x = DMatrix::from_row_slice(2, 2, &[1.0, 0.0, 0.0, 0.0]);
        assert!(matches!(
            normalize_rows(&x, "x"),
            Err(Error::ZeroRow { .. })
        ));
        let x = DMatrix::from_row_slice(1, 2, &[f64::NAN, 1.0]);
        assert!(matches!(
            normalize_rows(&x, "x"),
            Err(Error::NonFinite { .. })
        ));
    }
}
