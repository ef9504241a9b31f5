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

use embed::lanes::{Lanes, F2, F4};
use shared::error::{ensure_finite, Error, Result};

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

/// The least [`min_unit_weight`] a client accepts: 2⁻⁶⁰⁰, so `s ≥ 4/(600·ln 2) ≈ 0.00962`.
///
/// Why: the kernel scale is the server's (the configuration's). Below this, the least weight
/// nears f64's underflow: at `s ≈ 0.0054` it is subnormal and `1/a` overflows, which turned
/// Algorithm 1's bound into NaN (then 0 — almost no noise), and a weight of 0 made a far
/// photo's placement 0/0, refused for that photo only. With the least weight at 2⁻⁶⁰⁰ or
/// more, every bound is finite and the rounding analysis's underflow term ([`UNDERFLOW`] over
/// it) stays far below any release's noise.
pub const MIN_KERNEL_WEIGHT: f64 = f64::from_bits((1023 - 600) << 52);

/// The most a product or quotient's underflow can move it, absolutely: half the least subnormal
/// (2⁻¹⁰⁷⁵), doubled for safety. Sums of subnormals are exact.
pub const UNDERFLOW: f64 = f64::from_bits(1);

/// A kernel scale a client can bound its release under: finite, > 0, and its least unit
/// weight at least [`MIN_KERNEL_WEIGHT`]. A function of the scale alone, so a scale is refused
/// alike for every photo.
pub fn check_kernel_scale(name: &'static str, kernel_scale: f64) -> Result<()> {
    if !(kernel_scale.is_finite() && kernel_scale > 0.0) {
        return Err(Error::InvalidParameter {
            name,
            reason: "must be finite and > 0".into(),
        });
    }
    // A number: the scale is finite and > 0.
    if min_unit_weight(kernel_scale) < MIN_KERNEL_WEIGHT {
        return Err(Error::InvalidParameter {
            name,
            reason: format!(
                "{kernel_scale:e} is so small that the least kernel weight, e^(−4/s), is below \
                 2⁻⁶⁰⁰: no rounding bound holds near f64's underflow (at least 0.00962)"
            ),
        });
    }
    Ok(())
}

/// `exp(x)` for `x ≤ 0`, written so that a loop over a slice vectorises: Cody–Waite reduction
/// `x = k·ln2 + r`, `|r| ≤ ln2/2`, a degree-13 Taylor polynomial for `e^r`, and `2^k` built from
/// its bits. Relative error below 1e-14 (tested); 0 below −708 (where e^x is subnormal).
#[inline(always)]
pub fn exp_neg(x: f64) -> f64 {
    exp_neg_lanes(x)
}

/// [`exp_neg`] on any f64 [`Lanes`]: the same operations in the same order in every lane, so
/// a vector of them equals the scalar function bit for bit.
#[inline(always)]
fn exp_neg_lanes<L: Lanes<Elem = f64>>(x: L) -> L {
    let c = L::splat;
    let log2e = c(std::f64::consts::LOG2_E);
    let ln2_hi = c(f64::from_bits(0x3fe6_2e42_fee0_0000)); // fdlibm ln2_hi
    let ln2_lo = c(f64::from_bits(0x3dea_39ef_3579_3c76)); // fdlibm ln2_lo
    let shifter = c(6_755_399_441_055_744.0); // 1.5 · 2^52: rounds to nearest integer
    let floor = c(-708.0);
    // `x.max(−708)` (NaN → −708, as `max` gives) as `pmax`: `f64::max` lowers to a call of
    // `fmax` per lane in WebAssembly.
    let xc = floor.pmax(x);
    let t = xc.mul(log2e).add(shifter);
    let kf = t.sub(shifter);
    let r = xc.sub(kf.mul(ln2_hi)).sub(kf.mul(ln2_lo));
    // Σ r^i / i!, i = 0..=13.
    let p = horner(
        r,
        &[
            1.0 / 6_227_020_800.0,
            1.0 / 479_001_600.0,
            1.0 / 39_916_800.0,
            1.0 / 3_628_800.0,
            1.0 / 362_880.0,
            1.0 / 40_320.0,
            1.0 / 5_040.0,
            1.0 / 720.0,
            1.0 / 120.0,
            1.0 / 24.0,
            1.0 / 6.0,
            0.5,
            1.0,
            1.0,
        ],
    );
    // t's low mantissa bits hold 2^51 + k; adding the bias and shifting drops everything
    // but the 11 exponent bits k + 1023 (integer ops only, so this vectorises).
    let v = p.mul(t.exponent_bits());
    x.lt_select(floor, c(0.0), v)
}

/// Turn squared distances into kernel weights in place, `w = exp(−d²/s)`, clamped to
/// `[lo, 1]`. Clamping makes the range the sensitivity proof assumes hold exactly, whatever the
/// rounding of the distance or the exponential. Weights below 1e-150 become 0 before the
/// clamp: they change nothing measurable, and products of them would be subnormal, which is
/// slow on every CPU.
///
/// Two values at a time ([`F2`], explicit SIMD: see [`embed::lanes`]; twice as fast in
/// the browser as the compiler's own vectorisation), bit-identical to the scalar code used for
/// an odd last value.
pub fn weights_in_place(d2: &mut [f64], kernel_scale: f64, lo: f64) {
    assert!(lo <= 1.0, "weight floor {lo} above 1"); // as `f64::clamp` would
    let inv = -1.0 / kernel_scale;
    let mut chunks = d2.chunks_exact_mut(2);
    for ch in &mut chunks {
        weight_lanes(F2::load(ch), F2::splat(inv), F2::splat(lo)).store(ch);
    }
    for v in chunks.into_remainder() {
        *v = weight_lanes(*v, inv, lo);
    }
}

/// One kernel weight per lane: `clamp(exp_neg(d²·inv) (0 below 1e-150), lo, 1)`.
#[inline(always)]
fn weight_lanes<L: Lanes<Elem = f64>>(d2: L, inv: L, lo: L) -> L {
    let e = exp_neg_lanes(d2.mul(inv));
    let e = e.lt_select(L::splat(1e-150), L::splat(0.0), e);
    // `e.clamp(lo, 1)`: below `lo` → `lo`, then above 1 → 1.
    e.pmax(lo).pmin(L::splat(1.0))
}

/// Horner's rule, highest coefficient first: `((c₀·r + c₁)·r + c₂)…` — the same operations in
/// the same order for both exponentials and every lane type.
#[inline(always)]
fn horner<L: Lanes>(r: L, coefs: &[L::Elem]) -> L {
    let mut p = L::splat(coefs[0]);
    for &coef in &coefs[1..] {
        p = p.mul(r).add(L::splat(coef));
    }
    p
}

/// `exp(x)` for `x ≤ 0` in f32, for the post-processing kernel ([`DenseKernel32`]): as
/// [`exp_neg`] with f32 constants (Cody–Waite split of ln 2 whose high part has 9 bits, so
/// `k·ln2_hi` is exact) and a degree-7 polynomial (truncation below 1e-8 relative, under one
/// f32 ulp). Relative error below 1e-6 (tested); 0 below −87 (where e^x leaves the normal
/// f32 range).
#[inline(always)]
pub fn exp_neg_f32(x: f32) -> f32 {
    exp_neg_f32_lanes(x)
}

#[inline(always)]
fn exp_neg_f32_lanes<L: Lanes<Elem = f32>>(x: L) -> L {
    let c = L::splat;
    let floor = c(-87.0);
    let shifter = c(12_582_912.0); // 1.5 · 2^23
    let xc = floor.pmax(x);
    let t = xc.mul(c(std::f32::consts::LOG2_E)).add(shifter);
    let kf = t.sub(shifter);
    let r = xc
        .sub(kf.mul(c(f32::from_bits(0x3f31_8000)))) // 0.693359375
        .sub(kf.mul(c(-2.121_944_4e-4)));
    let p = horner(
        r,
        &[
            1.0 / 5_040.0,
            1.0 / 720.0,
            1.0 / 120.0,
            1.0 / 24.0,
            1.0 / 6.0,
            0.5,
            1.0,
            1.0,
        ],
    );
    let v = p.mul(t.exponent_bits());
    x.lt_select(floor, c(0.0), v)
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
    ///
    /// Each column is zeroed, filled and added into the degrees while it is in cache (one pass
    /// over the triangle, not three: this runs on every browser search). Degree `i` still
    /// receives the columns `j < i` in order and then its own column's sum.
    pub fn from_columns(n: usize, mut fill: impl FnMut(usize, &mut [f64])) -> Self {
        let mut packed = Vec::with_capacity(n * n.saturating_sub(1) / 2);
        let mut degrees = vec![0.0; n];
        for j in 0..n {
            let off = packed.len();
            packed.resize(off + (n - 1 - j), 0.0);
            let col = &mut packed[off..];
            fill(j, col);
            degrees[j] += sum(col);
            for (d, &w) in degrees[j + 1..].iter_mut().zip(col.iter()) {
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
    /// `W·X` from the packed lower triangle (see [`packed_product`]), O(n²k).
    fn weighted_sum(&self, x: &DMatrix<f64>) -> DMatrix<f64> {
        let (n, k) = x.shape();
        let mut out = DMatrix::<f64>::zeros(n, k);
        by_coordinate_pairs::<F2>(n, &self.packed, x.as_slice(), out.as_mut_slice(), k);
        out
    }
}

/// The post-processing kernel of Algorithm 1's client ([`crate::privatemail::
/// post_process`]) in f32: a kernel over the released embedding, built once per search and
/// applied `iterations` (30) times — most of a search in the browser. f32 halves its memory
/// and doubles the SIMD lanes of the exponentials and the products, which is what brings a
/// search under 20 ms. It reads only released data, so its precision is a matter of quality,
/// not privacy: rounding moves the post-processed rows by about 1e-7 of their scale (8e-6
/// relative at worst on the fixture's release), far below the release's noise. Degrees are
/// summed in f64; products are computed in f32 and returned in f64. Same packed layout as
/// [`DenseKernel`].
#[derive(Debug, Clone)]
pub struct DenseKernel32 {
    n: usize,
    packed: Vec<f32>,
    degrees: Vec<f64>,
}

impl DenseKernel32 {
    /// Kernel over the rows of `z` (any number of columns): squared distances in f32 from
    /// the rows rounded to f32, weights `exp(−d²/s)` by [`exp_neg_f32`], 0 below 1e-30
    /// (products of them would be subnormal, which is slow), at most 1.
    pub fn from_points(z: &DMatrix<f64>, kernel_scale: f64) -> Self {
        let (n, k) = z.shape();
        let zs: Vec<f32> = z.as_slice().iter().map(|&v| v as f32).collect();
        let inv = (-1.0 / kernel_scale) as f32;
        // One pass: each column is zeroed, filled and added into the degrees while in cache.
        let mut packed = Vec::with_capacity(n * n.saturating_sub(1) / 2);
        let mut degrees = vec![0.0; n];
        for j in 0..n {
            let off = packed.len();
            packed.resize(off + (n - 1 - j), 0.0f32);
            let col = &mut packed[off..];
            for c in 0..k {
                let zc = &zs[c * n..(c + 1) * n];
                let zj = zc[j];
                for (out, &zi) in col.iter_mut().zip(&zc[j + 1..]) {
                    let d = zi - zj;
                    *out += d * d;
                }
            }
            let mut chunks = col.chunks_exact_mut(4);
            for ch in &mut chunks {
                weight32_lanes(F4::load(ch), F4::splat(inv)).store(ch);
            }
            for v in chunks.into_remainder() {
                *v = weight32_lanes(*v, inv);
            }
            // Degrees in f64: every weight converts exactly, and the sums are the ones SMLQ
            // divides by, so they should not lose what f32 keeps.
            let mut acc = [0.0f64; 8];
            let chunks = col.chunks_exact(8);
            let tail: f64 = chunks.remainder().iter().map(|&w| f64::from(w)).sum();
            for ch in chunks {
                for l in 0..8 {
                    acc[l] += f64::from(ch[l]);
                }
            }
            degrees[j] += acc.iter().sum::<f64>() + tail;
            for (d, &w) in degrees[j + 1..].iter_mut().zip(col.iter()) {
                *d += f64::from(w);
            }
        }
        DenseKernel32 { n, packed, degrees }
    }

    /// `w_ij` (0 on the diagonal).
    pub fn weight(&self, i: usize, j: usize) -> f64 {
        let (hi, lo) = if i > j { (i, j) } else { (j, i) };
        if hi == lo {
            0.0
        } else {
            f64::from(self.packed[col_offset(self.n, lo) + (hi - lo - 1)])
        }
    }

    /// The full weight matrix (O(n²) memory; for tests).
    pub fn to_dense(&self) -> DMatrix<f64> {
        DMatrix::from_fn(self.n, self.n, |i, j| self.weight(i, j))
    }
}

/// One post-processing weight per lane: `min(exp_neg_f32(d²·inv) (0 below 1e-30), 1)`.
#[inline(always)]
fn weight32_lanes<L: Lanes<Elem = f32>>(d2: L, inv: L) -> L {
    let e = exp_neg_f32_lanes(d2.mul(inv));
    e.lt_select(L::splat(1e-30), L::splat(0.0), e)
        .pmin(L::splat(1.0))
}

impl GraphOperator for DenseKernel32 {
    fn len(&self) -> usize {
        self.degrees.len()
    }
    fn degrees(&self) -> &[f64] {
        &self.degrees
    }
    /// `W·X` in f32 (X rounded to f32; see [`packed_product`]), returned in f64.
    fn weighted_sum(&self, x: &DMatrix<f64>) -> DMatrix<f64> {
        let (n, k) = x.shape();
        let xs: Vec<f32> = x.as_slice().iter().map(|&v| v as f32).collect();
        let mut os = vec![0.0f32; n * k];
        by_coordinate_pairs::<F4>(n, &self.packed, &xs, &mut os, k);
        DMatrix::from_iterator(n, k, os.into_iter().map(f64::from))
    }
}

/// `W·X` for an n×k column-major `X` (`xs`) into the zeroed `os`, two columns of `X` at a time
/// (an odd last column is paired with zeros).
fn by_coordinate_pairs<V>(
    n: usize,
    packed: &[V::Elem],
    xs: &[V::Elem],
    os: &mut [V::Elem],
    k: usize,
) where
    V: Lanes,
    V::Elem: Lanes<Elem = V::Elem> + Default,
{
    let (mut zeros, mut scratch) = (Vec::new(), Vec::new());
    if k % 2 == 1 {
        zeros = vec![V::Elem::default(); n];
        scratch = vec![V::Elem::default(); n];
    }
    for c in (0..k).step_by(2) {
        let x0 = &xs[c * n..(c + 1) * n];
        let (o0, rest) = os[c * n..].split_at_mut(n);
        if c + 1 < k {
            let x1 = &xs[(c + 1) * n..(c + 2) * n];
            packed_product::<V>(n, packed, (x0, x1), (o0, &mut rest[..n]));
        } else {
            packed_product::<V>(n, packed, (x0, &zeros), (o0, &mut scratch));
        }
    }
}

/// `O += W·[x₀ x₁]` for the packed lower triangle of `W` (n points): two packed columns at a
/// time, both coordinates at once. Each weight is read once for its four multiply-adds, and
/// each row of `X` and of the output is loaded and stored once per column pair instead of once
/// per column and coordinate: bound by arithmetic, not loads, which is what makes the 31
/// products of a browser search fast.
fn packed_product<V>(
    n: usize,
    packed: &[V::Elem],
    (x0, x1): (&[V::Elem], &[V::Elem]),
    (o0, o1): (&mut [V::Elem], &mut [V::Elem]),
) where
    V: Lanes,
    V::Elem: Lanes<Elem = V::Elem> + Default,
{
    // Columns j and j + 1; the last column is empty, so an odd n leaves nothing over.
    for j in (0..n.saturating_sub(1)).step_by(2) {
        let a = &packed[col_offset(n, j)..][..n - 1 - j];
        let b = &packed[col_offset(n, j + 1)..][..n - 2 - j];
        let (xa, xb) = ([x0[j], x1[j]], [x0[j + 1], x1[j + 1]]);
        // w_{j+1, j} couples the pair itself.
        let w = a[0];
        o0[j + 1] = o0[j + 1].add(w.mul(xa[0]));
        o1[j + 1] = o1[j + 1].add(w.mul(xa[1]));
        let r = j + 2;
        let [da, db] = pair_columns::<V>(
            &a[1..],
            b,
            (&x0[r..], &x1[r..]),
            (&mut o0[r..], &mut o1[r..]),
            xa,
            xb,
        );
        o0[j] = o0[j].add(w.mul(xb[0]).add(da[0]));
        o1[j] = o1[j].add(w.mul(xb[1]).add(da[1]));
        o0[j + 1] = o0[j + 1].add(db[0]);
        o1[j + 1] = o1[j + 1].add(db[1]);
    }
}

/// The inner loop of [`packed_product`] over rows `r..n` of two packed columns `a`, `b`
/// (equal lengths): returns their dot products with both columns of `X` and adds
/// `a·xa + b·xb` to the output rows. Explicit SIMD ([`F2`] or [`F4`]); the dot products keep one
/// accumulator per lane, summed first lane to last, then the remainder rows in order, so every
/// build rounds identically.
#[inline(always)]
fn pair_columns<V>(
    a: &[V::Elem],
    b: &[V::Elem],
    x: (&[V::Elem], &[V::Elem]),
    o: (&mut [V::Elem], &mut [V::Elem]),
    xa: [V::Elem; 2],
    xb: [V::Elem; 2],
) -> [[V::Elem; 2]; 2]
where
    V: Lanes,
    V::Elem: Lanes<Elem = V::Elem> + Default,
{
    let len = a.len();
    let (b, x0, x1) = (&b[..len], &x.0[..len], &x.1[..len]);
    let (o0, o1) = (&mut o.0[..len], &mut o.1[..len]);
    let (xa0, xa1, xb0, xb1) = (
        V::splat(xa[0]),
        V::splat(xa[1]),
        V::splat(xb[0]),
        V::splat(xb[1]),
    );
    let zero = V::splat(V::Elem::default());
    // Accumulators of a·x₀, a·x₁, b·x₀, b·x₁.
    let (mut a0, mut a1, mut b0, mut b1) = (zero, zero, zero, zero);
    let w = V::LANES;
    let rows = a
        .chunks_exact(w)
        .zip(b.chunks_exact(w))
        .zip(x0.chunks_exact(w))
        .zip(x1.chunks_exact(w))
        .zip(o0.chunks_exact_mut(w))
        .zip(o1.chunks_exact_mut(w));
    for (((((wa, wb), u), v), p0), p1) in rows {
        let (wa, wb, u, v) = (V::load(wa), V::load(wb), V::load(u), V::load(v));
        V::load(p0).add(wa.mul(xa0).add(wb.mul(xb0))).store(p0);
        V::load(p1).add(wa.mul(xa1).add(wb.mul(xb1))).store(p1);
        a0 = a0.add(wa.mul(u));
        a1 = a1.add(wa.mul(v));
        b0 = b0.add(wb.mul(u));
        b1 = b1.add(wb.mul(v));
    }
    let [mut a0, mut a1, mut b0, mut b1] = [a0, a1, b0, b1].map(V::hsum);
    for t in len / w * w..len {
        let (wa, wb, u, v) = (a[t], b[t], x0[t], x1[t]);
        o0[t] = o0[t].add(wa.mul(xa[0]).add(wb.mul(xb[0])));
        o1[t] = o1[t].add(wa.mul(xa[1]).add(wb.mul(xb[1])));
        a0 = a0.add(wa.mul(u));
        a1 = a1.add(wa.mul(v));
        b0 = b0.add(wb.mul(u));
        b1 = b1.add(wb.mul(v));
    }
    [[a0, a1], [b0, b1]]
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
        // Column by column over slices (no per-entry index arithmetic: SMLQ calls this every
        // iteration); the same additions in the same order as row by row.
        for col in 0..k {
            let xc = &x.as_slice()[col * n..(col + 1) * n];
            let sc = &mut class_sums.as_mut_slice()[col * c..(col + 1) * c];
            for (&y, &v) in self.labels.iter().zip(xc) {
                sc[y as usize] += v;
            }
        }
        let mixed = &self.class_weights * class_sums;
        let mut out = DMatrix::<f64>::zeros(n, k);
        for col in 0..k {
            let xc = &x.as_slice()[col * n..(col + 1) * n];
            let mc = &mixed.as_slice()[col * c..(col + 1) * c];
            let oc = &mut out.as_mut_slice()[col * n..(col + 1) * n];
            for (((o, &v), &d), &y) in oc.iter_mut().zip(xc).zip(&self.degrees).zip(&self.labels) {
                *o = (d + 1.0) * v - mc[y as usize];
            }
        }
        out
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

    /// The paired product (two packed columns and two coordinates at a time, SIMD lanes, then
    /// the remainder rows) equals the plain dense product for every shape that reaches an
    /// edge: n odd and even, below and above one vector, k odd (paired with zeros) and even.
    #[test]
    fn packed_products_match_the_dense_product() {
        let mut rng = ChaCha8Rng::seed_from_u64(21);
        for n in [0, 1, 2, 3, 4, 5, 8, 9, 17, 38, 101] {
            for k in [1, 2, 3, 4] {
                let w = DMatrix::from_fn(n, n, |_, _| rng.random::<f64>());
                let w = (&w + w.transpose()) * 0.5;
                let x = DMatrix::from_fn(n, k, |_, _| rng.random::<f64>() - 0.5);
                let kern = DenseKernel::from_weights(&w);
                let want = kern.to_dense() * &x;
                let err = (kern.weighted_sum(&x) - &want).amax();
                assert!(err <= 1e-13 * n as f64, "n = {n}, k = {k}: {err}");
                // The f32 product, against the dense product with the same (f32) weights.
                let z = DMatrix::from_fn(n, k, |_, _| rng.random::<f64>());
                let k32 = DenseKernel32::from_points(&z, 0.3);
                let w32 = k32.to_dense();
                let want = &w32 * &x;
                let scale = w32.abs() * x.abs(); // Σ|w·x| per entry: f32 rounding is relative to it
                let got = k32.weighted_sum(&x);
                for i in 0..n {
                    for c in 0..k {
                        let err = (got[(i, c)] - want[(i, c)]).abs();
                        assert!(
                            err <= 1e-6 * scale[(i, c)] + 1e-30,
                            "n = {n}, k = {k}: {err}"
                        );
                    }
                }
            }
        }
    }

    /// The f32 post-processing kernel: every weight within f32 rounding of the f64 kernel's
    /// (the exponent's argument is rounded too, so the bound grows with it; 0 where the f64
    /// weight is below the 1e-30 cut), and degrees the f64 sums of its own weights.
    #[test]
    fn f32_kernel_matches_the_f64_kernel() {
        let mut rng = ChaCha8Rng::seed_from_u64(22);
        for (n, k, s) in [
            (2, 2, 1.0),
            (7, 2, 0.05),
            (40, 3, 2.0),
            (300, 2, 0.4),
            (65, 1, 9.0),
        ] {
            let z = DMatrix::from_fn(n, k, |_, _| 3.0 * rng.random::<f64>() - 1.5);
            let (k64, k32) = (
                DenseKernel::from_points(&z, s),
                DenseKernel32::from_points(&z, s),
            );
            for i in 0..n {
                let mut deg = 0.0;
                for j in 0..n {
                    let (a, b) = (k64.weight(i, j), k32.weight(i, j));
                    let arg = dist2(
                        &z.row(i).iter().copied().collect::<Vec<_>>(),
                        &z.row(j).iter().copied().collect::<Vec<_>>(),
                    ) / s;
                    assert!(
                        (a - b).abs() <= 4e-7 * (1.0 + arg) * a + 2e-30,
                        "w({i}, {j}): {a} vs {b}"
                    );
                    deg += b;
                }
                assert!((k32.degrees()[i] - deg).abs() <= 1e-12 * deg.max(1e-300));
            }
        }
    }

    #[test]
    fn fast_f32_exp_is_accurate() {
        let mut worst: f64 = 0.0;
        for i in 0..200_000 {
            let x = -(i as f32) * 87.0 / 200_000.0 - 1e-5 * (i % 7) as f32;
            if x < -87.0 {
                continue;
            }
            let want = f64::from(x).exp();
            worst = worst.max((f64::from(exp_neg_f32(x)) - want).abs() / want);
        }
        assert!(worst < 1e-6, "worst relative error {worst}");
        assert_eq!(exp_neg_f32(0.0), 1.0);
        assert_eq!(exp_neg_f32(-87.5), 0.0);
        assert_eq!(exp_neg_f32(f32::NEG_INFINITY), 0.0);
    }

    /// The vectorised weights (eight at a time) equal the scalar formula bit for bit, the
    /// remainder included.
    #[test]
    fn vector_weights_equal_scalar_weights() {
        let mut rng = ChaCha8Rng::seed_from_u64(23);
        let d2: Vec<f64> = (0..1003).map(|_| 5.0 * rng.random::<f64>()).collect();
        let (s, lo) = (0.7, min_unit_weight(0.7));
        let mut got = d2.clone();
        weights_in_place(&mut got, s, lo);
        for (g, &d) in got.iter().zip(&d2) {
            let e = exp_neg(d * (-1.0 / s));
            let want = (if e < 1e-150 { 0.0 } else { e }).clamp(lo, 1.0);
            assert_eq!(g.to_bits(), want.to_bits());
        }
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
