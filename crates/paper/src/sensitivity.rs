//! L2 sensitivity of the first SMLQ iteration `f(X) = ½·Diag(L_X)⁻¹(α·L_Y − L_X)·Q + Q`.
//!
//! Two bounds live here:
//! - [`paper_constant_m`] / [`paper_sensitivity`]: Appendix B, Lemma 1 of the paper, exactly as
//!   printed. Kept **only for comparison**: it is invalid for some kernel scales and 30–100×
//!   loose for others (both facts are tests below).
//! - [`sensitivity`]: the default, proven here. It is the minimum of two valid bounds,
//!   `½·B_F·‖Q‖₂` ([`spectral_sensitivity`]) and a row-norm refinement
//!   ([`row_norm_sensitivity`]), plus a floating-point slack ([`float_slack`]).
//!
//! # Setting
//! `N = n + 1` rows, unit-norm features, labels in `0..=c` with `c` a public constant, kernel
//! `w = exp(−‖u − v‖²/s)` for features and labels alike (see [`crate::laplacian`]). Neighbouring
//! inputs differ in ONE row `j` (any position), features and label both: *replace-one*, the
//! deployed case, and *add/remove* with zero-row padding (the absent record is the origin with
//! label 0, which is at distance 1 from every unit row, so every weight bound below still holds).
//! `Q` is drawn independently of the data, so conditioning on it is legitimate and it need not
//! be secret.
//!
//! # Proof of the entry bounds
//! Write `A(X) = D⁻¹(α·L_Y − L_X)`, so `f(X) − f(X̃) = ½·M·Q` with `M = A(X) − A(X̃)`.
//! Entries: `A_ii = α·dY_i/dX_i − 1`, `A_ik = (w_ik − α·v_ik)/dX_i` (`w` feature weights,
//! `v` label weights). With unit rows `‖u − v‖² ∈ [0, 4]`, so `w ∈ [a, 1]`, `a = e^(−4/s)`;
//! labels give `v ∈ [b, 1]`, `b = e^(−c²/s)`; every degree has `n` terms, so
//! `dX ∈ [n·a, n]`, `dY ∈ [n·b, n]`. Let `u = w − α·v ∈ [lo, hi] = [a − α, 1 − α·b]`.
//! 1. `|M_jj| ≤ D0 = α(1/a − b)`: both ratios `dY/dX` lie in `[b, 1/a]`; the `−1` cancels.
//! 2. `|M_jk|, |M_ij| ≤ t0`: each of the two terms `u/d` lies in
//!    `[min(lo/n, lo/(na)), max(hi/(na), hi/n)]`; `t0` is that interval's width. (The spec's
//!    `(1 − αb + (α − a)₊)/(na)` equals it when `hi ≥ 0`, and would be too small if `α·b > 1`.)
//! 3. `|M_ii| ≤ d1 = α(1/a − b)/(na)` for `i ≠ j`: only the `j` terms of `dX_i` and `dY_i` change.
//!    With `g(v, w) = (R + v)/(P + w)`, first change `v` (`|Δg| ≤ (1 − b)/(na)`), then `w`
//!    (`|Δg| ≤ (R + v)(1 − a)/((P + w)(P + w̃)) ≤ n(1 − a)/(na)²`); the sum is `d1/α`.
//! 4. `|M_ik| ≤ e1 = max(|lo|, |hi|)·(1 − a)/(na)²` for `i, k ≠ j`, `i ≠ k`: the numerator is
//!    unchanged and `|1/d − 1/d̃| = |w_ij − w̃_ij|/(d·d̃)`.
//!
//! Summing squares: `‖M‖_F² ≤ D0² + 2n·t0² + n·d1² + n(n − 1)·e1² = B_F²`, and
//! `‖M·Q‖_F ≤ ‖M‖_F·‖Q‖₂` gives `Δ ≤ ½·B_F·‖Q‖₂`. Row by row, `‖(MQ)_i‖ ≤ Σ_k |M_ik|·‖Q_k‖`
//! gives the row-norm bound. Both hold for every `j`, so the minimum does too. ∎

use nalgebra::DMatrix;
use serde::{Deserialize, Serialize};

use crate::laplacian::{check_kernel_scale, kernel_weight, min_unit_weight, UNDERFLOW};
use shared::error::{Error, Result};

/// The public quantities the bound depends on. Nothing here is read from private data.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BoundInputs {
    /// Total rows `N = n + 1` of the released matrix.
    pub rows: usize,
    pub alpha: f64,
    pub kernel_scale: f64,
    /// Largest label `c` (public).
    pub max_label: u32,
}

/// The four entry bounds of the proof above.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EntryBounds {
    /// Other rows, `n = N − 1`.
    pub n: f64,
    /// Least feature weight `a = e^(−4/s)` (rounded down).
    pub a: f64,
    /// Least label weight `b = e^(−c²/s)` (rounded down).
    pub b: f64,
    pub d0: f64,
    pub t0: f64,
    pub d1: f64,
    pub e1: f64,
}

/// Rounds a lower bound of a weight down by far more than `exp`'s error (< 1 ulp), so the
/// computed weights can never fall below it.
fn round_down(x: f64) -> f64 {
    x * (1.0 - 1e-12)
}

impl EntryBounds {
    pub fn new(inp: &BoundInputs) -> Result<Self> {
        if inp.rows < 2 {
            return Err(Error::TooSmall {
                what: "rows in the SMLQ input",
                min: 2,
                got: inp.rows,
            });
        }
        // The least weight at 2⁻⁶⁰⁰ or more, so 1/a is finite and no bound below is NaN.
        check_kernel_scale("kernel_scale", inp.kernel_scale)?;
        if !(inp.alpha.is_finite() && inp.alpha >= 0.0) {
            return Err(Error::InvalidParameter {
                name: "alpha",
                reason: "must be finite and >= 0".into(),
            });
        }
        let n = (inp.rows - 1) as f64;
        let s = inp.kernel_scale;
        let alpha = inp.alpha;
        let c = inp.max_label as f64;
        let a = min_unit_weight(s);
        let b = round_down(kernel_weight(c * c, s));
        let (lo, hi) = (a - alpha, 1.0 - alpha * b);
        let term_min = (lo / n).min(lo / (n * a));
        let term_max = (hi / (n * a)).max(hi / n);
        let eb = EntryBounds {
            n,
            a,
            b,
            d0: alpha * (1.0 / a - b),
            t0: term_max - term_min,
            d1: alpha * (1.0 / a - b) / (n * a),
            e1: lo.abs().max(hi.abs()) * (1.0 - a) / ((n * a) * (n * a)),
        };
        // A bound that is not a finite number bounds nothing (and `min`/`max` would drop a
        // NaN silently): refused, for the parameters alone.
        if ![eb.a, eb.b, eb.d0, eb.t0, eb.d1, eb.e1]
            .iter()
            .all(|v| v.is_finite())
        {
            return Err(Error::InvalidParameter {
                name: "smlq",
                reason: "no finite sensitivity bound exists for these parameters".into(),
            });
        }
        Ok(eb)
    }

    /// `B_F ≥ ‖M‖_F` for every neighbouring pair.
    pub fn frobenius(&self) -> f64 {
        let n = self.n;
        (self.d0 * self.d0
            + 2.0 * n * self.t0 * self.t0
            + n * self.d1 * self.d1
            + n * (n - 1.0) * self.e1 * self.e1)
            .sqrt()
    }
}

/// Spectral norm `‖Q‖₂` (largest singular value), from the k×k Gram matrix `QᵀQ`.
pub fn spectral_norm(q: &DMatrix<f64>) -> f64 {
    let gram = q.transpose() * q;
    let eig = gram.symmetric_eigenvalues();
    eig.iter().fold(0.0f64, |m, &v| m.max(v)).sqrt()
}

/// `½·B_F·‖Q‖₂`.
///
/// Guarantee: for every neighbouring pair `(X, X̃)` as in the module docs,
/// `‖f(X) − f(X̃)‖_F ≤` this value. Proof: module docs, `‖MQ‖_F ≤ ‖M‖_F·‖Q‖₂`.
pub fn spectral_sensitivity(eb: &EntryBounds, q: &DMatrix<f64>) -> f64 {
    0.5 * eb.frobenius() * spectral_norm(q)
}

/// Row-norm bound: with `q_i = ‖Q_i‖`, `S = Σ q_i`,
/// `Δ ≤ ½·max_j √[(D0·q_j + t0·(S − q_j))² + Σ_{i≠j} (d1·q_i + t0·q_j + e1·(S − q_i − q_j))²]`.
///
/// Guarantee: as [`spectral_sensitivity`]. Proof: `‖(MQ)_i‖ ≤ Σ_k |M_ik|·q_k` and the entry
/// bounds; the max over `j` covers a change at any position. Evaluated in O(N) by expanding
/// the square: with `A = d1 − e1`, `C_j = t0·q_j + e1·(S − q_j)`, the sum over `i ≠ j` is
/// `A²(S₂ − q_j²) + 2A·C_j·(S − q_j) + n·C_j²`.
pub fn row_norm_sensitivity(eb: &EntryBounds, q: &DMatrix<f64>) -> f64 {
    let norms: Vec<f64> = q.row_iter().map(|r| r.norm()).collect();
    let s: f64 = norms.iter().sum();
    let s2: f64 = norms.iter().map(|v| v * v).sum();
    let a = eb.d1 - eb.e1;
    let worst = norms
        .iter()
        .map(|&qj| {
            let own = eb.d0 * qj + eb.t0 * (s - qj);
            let cj = eb.t0 * qj + eb.e1 * (s - qj);
            let others = a * a * (s2 - qj * qj) + 2.0 * a * cj * (s - qj) + eb.n * cj * cj;
            // `max` would turn a NaN into 0; kept NaN, so [`sensitivity`] refuses it.
            own * own
                + if others.is_nan() {
                    others
                } else {
                    others.max(0.0)
                }
        })
        .fold(0.0f64, |m, v| if v.is_nan() { v } else { m.max(v) });
    0.5 * worst.sqrt()
}

/// Bound on `‖f̂(X) − f(X)‖_F`, the rounding error of computing `f` in f64 given weights in
/// `[a, 1]`: each output entry is a sum of at most `N + 8` rounded terms whose magnitudes add
/// up to at most `(2 + 4α/a)·max|Q|`, so its error is at most `(N + 8)·u` times that
/// (`u = 2⁻⁵³`, doubled for safety). A product that underflows is off by at most `η = 2⁻¹⁰⁷⁵`
/// absolutely instead: at most `3N·η` in the numerator over a degree of at least `n·a`, plus the
/// quotient's own, so `(8/a + 2)·η` more an entry, doubled (`a ≥ 2⁻⁶⁰⁰`, [`check_kernel_scale`]).
/// The computed release therefore has sensitivity at most `Δ + 2·slack`. (Weight entries for
/// unchanged row pairs are computed identically on both inputs, because each depends only on
/// its two rows.)
pub fn float_slack(inp: &BoundInputs, eb: &EntryBounds, q: &DMatrix<f64>) -> f64 {
    let qmax = q.amax();
    let entries = q.len() as f64;
    let per_entry = (inp.rows as f64 + 8.0) * f64::EPSILON * (2.0 + 4.0 * inp.alpha / eb.a) * qmax
        + (8.0 / eb.a + 2.0) * UNDERFLOW;
    entries.sqrt() * per_entry
}

/// Which bound gave the default sensitivity, with every figure for the record.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Sensitivity {
    /// The value the mechanism calibrates to: `min(spectral, row_norm) + 2·float_slack`.
    pub value: f64,
    pub spectral: f64,
    pub row_norm: f64,
    pub float_slack: f64,
}

/// The default sensitivity of `f` for this `Q`.
///
/// Guarantee: for every neighbouring pair as in the module docs, the f64-computed release
/// `f̂` satisfies `‖f̂(X) − f̂(X̃)‖_F ≤ value`. Proof: both bounds are valid (module docs), so
/// their minimum is; [`float_slack`] covers rounding on either side. Depends on `Q` and public
/// parameters only.
pub fn sensitivity(inp: &BoundInputs, q: &DMatrix<f64>) -> Result<Sensitivity> {
    if q.nrows() != inp.rows {
        return Err(Error::DimensionMismatch {
            what: "rows of Q",
            expected: inp.rows,
            got: q.nrows(),
        });
    }
    let eb = EntryBounds::new(inp)?;
    let spectral = spectral_sensitivity(&eb, q);
    let row_norm = row_norm_sensitivity(&eb, q);
    let float_slack = float_slack(inp, &eb, q);
    // Both bounds must be numbers: `min` would take the other over a NaN, and a bound that
    // failed to compute proves nothing. (A function of the parameters and the random start Q
    // only, never the photo.)
    if !(spectral.is_finite() && row_norm.is_finite() && float_slack.is_finite()) {
        return Err(Error::InvalidParameter {
            name: "smlq",
            reason: "the sensitivity bound is not a finite number for these parameters".into(),
        });
    }
    Ok(Sensitivity {
        value: spectral.min(row_norm) + 2.0 * float_slack,
        spectral,
        row_norm,
        float_slack,
    })
}

/// Appendix B, Lemma 1: `M = n·M_ij + M_ii`, exactly as printed, with the paper's bandwidth σ
/// (its kernel there is `exp(−d²/(2σ²))`, i.e. `s = 2σ²`). `n` is the size of the smaller
/// dataset. **Not a valid bound** — for comparison only.
pub fn paper_constant_m(n: usize, alpha: f64, sigma: f64, max_label: u32) -> f64 {
    let n = n as f64;
    let c2 = (max_label as f64).powi(2);
    let s2 = sigma * sigma;
    let e = |x: f64| x.exp();
    let a1 = n * e(-2.0 / s2) + e(-1.0 / (2.0 * s2)) - 1.0;
    let a2 = (n + 1.0) * e(-2.0 / s2) - 1.0;
    let a3 = n + e(-1.0 / (2.0 * s2)) - 1.0;
    let m_ii = alpha
        * alpha
        * ((n / a1).powi(2) + (n / a2).powi(2)
            - 2.0 * ((n + 1.0) * e(-c2 / (2.0 * s2)) - 1.0).powi(2) / (n * a3));
    let ecross = e(-(c2 + 4.0) / (2.0 * s2));
    let m_ij = (alpha * alpha + 1.0) / (a1 * a1) - 2.0 * alpha * ecross / (a3 * a3)
        + (alpha * alpha + 1.0) / (a2 * a2)
        - 2.0 * alpha * ecross / (n * n)
        - 2.0 * (alpha * alpha * e(-c2 / s2) + e(-4.0 / s2)) / (n * a3)
        + 4.0 * alpha / (a1 * a2);
    n * m_ij + m_ii
}

/// Theorem 2 as printed: `Δ ≤ M·√(n+1)/2·‖Q‖_F`. For comparison only.
pub fn paper_sensitivity(
    n: usize,
    alpha: f64,
    sigma: f64,
    max_label: u32,
    q: &DMatrix<f64>,
) -> f64 {
    paper_constant_m(n, alpha, sigma, max_label) * ((n + 1) as f64).sqrt() / 2.0 * q.norm()
}
