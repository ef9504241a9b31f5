//! The anchor-frame protocol: PrivateMail with a public frame instead of alignment.
//!
//! The server publishes an embedding of the public anchors alone, the *frame* `Z_A` (`n × k`;
//! by default [`AnchorFrame::class_simplex`]). Every image —
//! the client's query and each gallery item alike — is placed in the frame by ONE SMLQ-style
//! update with the anchors' rows held fixed: the kernel-weighted mean of the anchor rows,
//!
//! `place(x) = Σ_a w(x, a)·Z_a / Σ_a w(x, a)`,   `w(x, a) = max(exp(−‖x − a‖²/s), a_min)`.
//!
//! Why (the evaluation issue): in Algorithm 1 the client embeds from its own random start and
//! the server aligns on noisy anchor rows; SMLQ has not converged after `T` iterations, so two
//! starts give unrelated embeddings, and noise on all `n` anchor rows spoils the alignment. Here
//! the client releases only the `k` numbers of its query, already in the server's frame.
//!
//! # What is protected
//! The whole query image: its feature vector and everything the device computes from it
//! (the predicted label is not used at all). Neighbouring inputs are ANY two unit feature
//! vectors. The frame is public and may even be chosen by a hostile server: the client computes
//! the sensitivity from the frame it actually uses ([`AnchorFrame::new`]), so the guarantee
//! holds for every frame.

use nalgebra::DMatrix;
use rand::seq::SliceRandom;
use rand::{Rng, RngCore};
use serde::{Deserialize, Serialize};
use shared::api::{Ranking, SearchRequest};

use crate::laplacian::{
    check_kernel_scale, min_unit_weight, normalize_rows, weights_in_place, UNDERFLOW,
};
use dp::mechanism::{release, Receipt};
use shared::error::{ensure_finite, ensure_query, Error, Result};
use shared::params::{limits, PrivacyParams};

/// Default kernel scale `s` of the placement: a local class vote. Chosen on the TRAINING split
/// (`eval --split train`, 5 seeds, the study in `docs/eval/frame-study.svg` of that run): mAP at
/// ε = 8 is 0.395 for s ∈ {0.005, 0.01, 0.02}, 0.387 at 0.05, 0.36 at 0.1; without noise 0.833
/// at 0.02, 0.84 at 0.05 (the best), 0.80 at 0.005.
pub const DEFAULT_KERNEL_SCALE: f64 = 0.02;

/// Largest absolute frame entry accepted (keeps the noise grid and the float analysis sane).
pub const MAX_FRAME_ABS: f64 = 1e6;

/// Rows placed per block: bounds the `block × n` weight matrix (4,096 × 4,096 f64 = 128 MiB
/// at the largest anchor set; 32 MiB at 1,000 anchors).
const BLOCK: usize = 1_024;

/// The L2 sensitivity of [`AnchorFrame::place`], with its parts for the record.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct FrameSensitivity {
    /// `max_{a,b} ‖Z_a − Z_b‖`, rounded up.
    pub diameter: f64,
    /// Bound on the rounding error of one computed placement, in L2.
    pub float_slack: f64,
    /// What the mechanism calibrates to: `diameter + 2·float_slack`.
    pub value: f64,
}

/// The public anchors' unit features and their frame rows.
#[derive(Debug, Clone)]
pub struct AnchorFrame {
    features: DMatrix<f64>,
    rows: DMatrix<f64>,
    kernel_scale: f64,
    sensitivity: FrameSensitivity,
}

impl AnchorFrame {
    /// Validate a frame (rows may come from an untrusted server) and compute its sensitivity.
    ///
    /// Guarantee: for any two unit vectors `x, x'`, the computed placements satisfy
    /// `‖place(x) − place(x')‖₂ ≤ sensitivity().value`.
    ///
    /// Proof sketch. (1) Exact arithmetic: with weights `ŵ_a > 0`, `place(x)` is a convex
    /// combination of the rows `Z_a`, so it lies in their convex hull; the hull's diameter is the
    /// largest distance between two of its vertices, `max_{a,b} ‖Z_a − Z_b‖`. This holds for
    /// ANY positive weights, so the rounding of the weights themselves does not matter (they are
    /// clamped to `[a_min, 1]`, hence positive). (2) Rounding: with `M_j = max_a |Z_aj|` and
    /// `u = 2⁻⁵³`, the computed numerator `Σ ŵ_a Z_aj` is within `γ_n·S·M_j` of the exact
    /// one (`S = Σ ŵ_a`, `γ_n = nu/(1−nu)`, any summation order), the denominator within
    /// `γ_n·S`, and the division adds one rounding; as the exact quotient lies in `[−M_j, M_j]`,
    /// coordinate `j` is off by at most `(2γ_n/(1−γ_n) + 2u)·M_j ≤ (2n + 4)·u·M_j` for
    /// `n·u < 10⁻³` — where no product underflows. A product that does is off by at most
    /// `η = 2⁻¹⁰⁷⁵` absolutely (sums of subnormals are exact), `n·η` in the numerator, and
    /// `S ≥ n·lo` (every weight is clamped to at least `lo`, the least unit weight, which
    /// [`check_kernel_scale`] holds at 2⁻⁶⁰⁰ or more so no weight is 0), so the quotient moves
    /// by at most `η/lo`, and its own underflow by `η` more. We take twice the sum per
    /// coordinate, and `√k` times the largest coordinate's for the L2 norm (no square that
    /// could underflow). (3) The diameter is computed as each difference's largest entry times
    /// the norm of the difference scaled by it (no square underflows either), with relative
    /// error below `(k + 4)·u < 10⁻¹³` for `k ≤ 16`; we scale it by `1 + 10⁻¹²`. Hence
    /// `‖p̂(x) − p̂(x')‖ ≤ diameter + 2·float_slack`.
    pub fn new(
        anchor_features: &DMatrix<f64>,
        frame_rows: &DMatrix<f64>,
        kernel_scale: f64,
    ) -> Result<Self> {
        check_kernel_scale("frame kernel_scale", kernel_scale)?;
        let (n, d) = anchor_features.shape();
        if !(2..=limits::MAX_CLIENT_ROWS).contains(&n) {
            return Err(Error::InvalidParameter {
                name: "anchors",
                reason: format!("need 2..={} anchors, got {n}", limits::MAX_CLIENT_ROWS),
            });
        }
        if d == 0 || d > limits::MAX_FEATURE_DIM {
            return Err(Error::InvalidParameter {
                name: "feature dimension",
                reason: format!("must be in 1..={}", limits::MAX_FEATURE_DIM),
            });
        }
        if frame_rows.nrows() != n {
            return Err(Error::DimensionMismatch {
                what: "frame rows",
                expected: n,
                got: frame_rows.nrows(),
            });
        }
        let k = frame_rows.ncols();
        if k == 0 || k > limits::MAX_EMBED_DIM {
            return Err(Error::InvalidParameter {
                name: "frame dimension",
                reason: format!("must be in 1..={}", limits::MAX_EMBED_DIM),
            });
        }
        ensure_finite(frame_rows.as_slice(), "frame rows")?;
        if frame_rows.amax() > MAX_FRAME_ABS {
            return Err(Error::InvalidParameter {
                name: "frame rows",
                reason: format!("entries must be at most {MAX_FRAME_ABS:e} in magnitude"),
            });
        }
        let features = normalize_rows(anchor_features, "anchor features")?;
        let sensitivity = frame_sensitivity(frame_rows, min_unit_weight(kernel_scale));
        Ok(AnchorFrame {
            features,
            rows: frame_rows.clone(),
            kernel_scale,
            sensitivity,
        })
    }

    /// The default frame: every anchor sits at the vertex `e_c` of the unit simplex for its
    /// class `c` (`k = C` coordinates), so `place(x)` is the kernel-weighted class vote of the
    /// anchors around `x` — the supervised embedding SMLQ's label term aims at, with the
    /// smallest possible diameter (√2) for C equidistant classes. Only public data enters
    /// (the anchors' labels), so the frame needs no seed.
    ///
    /// Why not SMLQ on the anchors: measured on the 1,000 default anchors, its iterates collapse
    /// onto a few outlying anchors (diameter 31.5 against a spread of 0.07 for the placed
    /// gallery), so noise calibrated to the diameter drowns every query even at ε = 30.
    pub fn class_simplex(
        anchor_features: &DMatrix<f64>,
        labels: &[u32],
        num_classes: u32,
        kernel_scale: f64,
    ) -> Result<Self> {
        let c = num_classes as usize;
        if !(2..=limits::MAX_EMBED_DIM).contains(&c) {
            return Err(Error::InvalidParameter {
                name: "num_classes",
                reason: format!(
                    "the class simplex needs 2..={} classes",
                    limits::MAX_EMBED_DIM
                ),
            });
        }
        if labels.len() != anchor_features.nrows() {
            return Err(Error::DimensionMismatch {
                what: "anchor labels",
                expected: anchor_features.nrows(),
                got: labels.len(),
            });
        }
        if let Some(&bad) = labels.iter().find(|&&y| y >= num_classes) {
            return Err(Error::LabelOutOfRange {
                label: bad,
                max: num_classes - 1,
            });
        }
        let rows = DMatrix::from_fn(labels.len(), c, |i, j| f64::from(labels[i] as usize == j));
        Self::new(anchor_features, &rows, kernel_scale)
    }

    pub fn rows(&self) -> &DMatrix<f64> {
        &self.rows
    }
    pub fn dim(&self) -> usize {
        self.rows.ncols()
    }
    pub fn feature_dim(&self) -> usize {
        self.features.ncols()
    }
    pub fn len(&self) -> usize {
        self.rows.nrows()
    }
    pub fn is_empty(&self) -> bool {
        self.rows.nrows() == 0
    }
    pub fn sensitivity(&self) -> FrameSensitivity {
        self.sensitivity
    }

    /// Place feature rows (`m × d`, normalised here) in the frame: `m × k`. O(m·n·(d + k))
    /// time, O(min(m, 1,024)·n) extra memory.
    pub fn place(&self, features: &DMatrix<f64>) -> Result<DMatrix<f64>> {
        if features.ncols() != self.feature_dim() {
            return Err(Error::DimensionMismatch {
                what: "features to place",
                expected: self.feature_dim(),
                got: features.ncols(),
            });
        }
        let x = normalize_rows(features, "features to place")?;
        let (m, k) = (x.nrows(), self.dim());
        let lo = min_unit_weight(self.kernel_scale);
        let mut out = DMatrix::zeros(m, k);
        for start in (0..m).step_by(BLOCK) {
            let b = BLOCK.min(m - start);
            // Weights as a b × n matrix, row by row from the dot products of unit vectors.
            let dots = x.rows(start, b) * self.features.transpose();
            let mut w = DMatrix::from_fn(b, self.len(), |i, a| {
                (2.0 - 2.0 * dots[(i, a)]).clamp(0.0, 4.0)
            });
            weights_in_place(w.as_mut_slice(), self.kernel_scale, lo);
            let num = &w * &self.rows;
            for i in 0..b {
                let den: f64 = w.row(i).iter().sum();
                for j in 0..k {
                    out[(start + i, j)] = num[(i, j)] / den;
                }
            }
        }
        Ok(out)
    }
}

/// The sensitivity of placements among `rows` whose weights are at least `lo` (the proof is
/// [`AnchorFrame::new`]'s).
fn frame_sensitivity(rows: &DMatrix<f64>, lo: f64) -> FrameSensitivity {
    let (n, k) = rows.shape();
    let mut dmax = 0.0f64;
    let mut diff = vec![0.0f64; k];
    for a in 0..n {
        for b in (a + 1)..n {
            diff.iter_mut()
                .enumerate()
                .for_each(|(j, d)| *d = rows[(a, j)] - rows[(b, j)]);
            dmax = dmax.max(scaled_norm(&diff));
        }
    }
    let diameter = dmax * (1.0 + 1e-12);
    // (2n + 4)·u, doubled; f64::EPSILON = 2u.
    let per_coord = (2.0 * n as f64 + 4.0) * f64::EPSILON;
    let underflow = UNDERFLOW / lo + UNDERFLOW;
    let worst = (0..k)
        .map(|j| 2.0 * (per_coord * rows.column(j).amax() + underflow))
        .fold(0.0f64, f64::max);
    let float_slack = (k as f64).sqrt() * worst;
    FrameSensitivity {
        diameter,
        float_slack,
        value: diameter + 2.0 * float_slack,
    }
}

/// `‖v‖₂` without squares that could underflow or overflow: the largest `|v_j|` times the norm
/// of `v` divided by it.
fn scaled_norm(v: &[f64]) -> f64 {
    let m = v.iter().fold(0.0f64, |m, x| m.max(x.abs()));
    if m == 0.0 {
        return 0.0;
    }
    m * v.iter().map(|x| (x / m) * (x / m)).sum::<f64>().sqrt()
}

/// What the client sends in the anchor-frame protocol, and what it keeps.
#[derive(Debug, Clone)]
pub struct FrameRelease {
    /// The real row among the dummy rows (`1 + dummies` rows, `k` columns), in a uniformly
    /// random order, all with the mechanism's noise. (Projecting them back onto the simplex, a
    /// post-processing, was measured: it lowers mAP at ε = 8 and 30, so it is not done.)
    pub rows: DMatrix<f64>,
    pub receipt: Receipt,
    pub sensitivity: FrameSensitivity,
    real_position: usize,
}

impl FrameRelease {
    /// Which row is the real query. Never send this.
    pub fn real_position(&self) -> usize {
        self.real_position
    }
}

/// The client side of the anchor-frame protocol: place the query in the frame, add `dummies`
/// rows placed from anchors drawn uniformly at random, shuffle, and release all rows through
/// the mechanism calibrated to [`AnchorFrame::sensitivity`].
///
/// Guarantee: (ε, `receipt.proven_delta`)-DP with respect to replacing the query's feature
/// vector by any other (so also its predicted label, which is not used).
///
/// Proof sketch: the dummy anchors and the shuffle are drawn independently of the query.
/// Conditioned on them, two neighbouring queries give matrices that differ in one row (the
/// real row's position), by at most `sensitivity.value` in L2 ([`AnchorFrame::new`]); so
/// [`release`] is (ε, δ)-DP for each fixed choice, and a mixture over choices made
/// independently of the data is (ε, δ)-DP too. The dummies hide which row is real only
/// while the noise is large compared with the frame (a server can recognise a row near the
/// placement of some public anchor at large ε); the guarantee does not rely on them.
pub fn privatize_in_frame(
    query_features: &[f64],
    frame: &AnchorFrame,
    dummies: usize,
    privacy: &PrivacyParams,
    rng: &mut impl RngCore,
) -> Result<FrameRelease> {
    privacy.validate()?;
    if dummies + 1 > limits::MAX_QUERY_ROWS {
        return Err(Error::TooLarge {
            what: "query rows (real + dummies)",
            count: dummies + 1,
            limit: limits::MAX_QUERY_ROWS,
        });
    }
    ensure_query(query_features, frame.feature_dim())?;
    let m = dummies + 1;
    let picks: Vec<usize> = (0..dummies)
        .map(|_| rng.random_range(0..frame.len()))
        .collect();
    let mut order: Vec<usize> = (0..m).collect();
    order.shuffle(rng);
    let real_position = order
        .iter()
        .position(|&r| r == 0)
        .expect("real row present");
    let d = frame.feature_dim();
    // Row r of the input: the query if order[r] == 0, otherwise dummy order[r] − 1.
    let input = DMatrix::from_fn(m, d, |r, j| match order[r] {
        0 => query_features[j],
        i => frame.features[(picks[i - 1], j)],
    });
    let placed = frame.place(&input)?;
    let sensitivity = frame.sensitivity();
    let (noisy, receipt) = release(&placed, sensitivity.value, privacy, rng)?;
    let rows = noisy.into_matrix();
    Ok(FrameRelease {
        rows,
        receipt,
        sensitivity,
        real_position,
    })
}

/// The request carrying a frame-protocol release: its rows in their (shuffled) order, `k`,
/// and the public noise std so the server can rank by posterior.
pub fn search_request(r: &FrameRelease, k: usize, ranking: Ranking) -> SearchRequest {
    SearchRequest {
        query_rows: r
            .rows
            .row_iter()
            .map(|x| x.iter().copied().collect())
            .collect(),
        anchor_rows: None,
        k,
        noise_std: Some(r.receipt.noise_scale),
        ranking: Some(ranking),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    fn random_unit(rng: &mut ChaCha8Rng, m: usize, d: usize) -> DMatrix<f64> {
        let x = DMatrix::from_fn(m, d, |_, _| rng.random::<f64>() - 0.5);
        normalize_rows(&x, "x").unwrap()
    }

    fn toy(rng: &mut ChaCha8Rng, s: f64) -> AnchorFrame {
        let feats = random_unit(rng, 40, 6);
        let rows = DMatrix::from_fn(40, 2, |_, _| 3.0 * (rng.random::<f64>() - 0.5));
        AnchorFrame::new(&feats, &rows, s).unwrap()
    }

    /// Adversarial audit: no two inputs move the placement further than the bound — random
    /// pairs, the anchors themselves, and a hill-climb that pushes two points apart.
    #[test]
    fn sensitivity_bound_holds_adversarially() {
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        for &s in &[0.01, 0.1, 1.0, 10.0] {
            let frame = toy(&mut rng, s);
            let bound = frame.sensitivity().value;
            let mut worst = 0.0f64;
            let mut check = |a: &DMatrix<f64>| {
                let p = frame.place(a).unwrap();
                for i in 0..p.nrows() {
                    for j in 0..i {
                        worst = worst.max((p.row(i) - p.row(j)).norm());
                    }
                }
            };
            check(&random_unit(&mut rng, 60, 6));
            check(&frame.features.clone());
            // Hill-climb: move one point away from another.
            let mut pair = random_unit(&mut rng, 2, 6);
            for step in 0..400 {
                let scale = 0.5 / (1.0 + step as f64 / 50.0);
                let mut cand = pair.clone();
                for j in 0..6 {
                    cand[(step % 2, j)] += scale * (rng.random::<f64>() - 0.5);
                }
                let cand = normalize_rows(&cand, "c").unwrap();
                let dist = |m: &DMatrix<f64>| {
                    let p = frame.place(m).unwrap();
                    (p.row(0) - p.row(1)).norm()
                };
                if dist(&cand) >= dist(&pair) {
                    pair = cand;
                }
            }
            check(&pair);
            assert!(worst <= bound, "s={s}: {worst} > {bound}");
            // The bound is not absurdly loose: at small s anchors land on their own rows.
            if s <= 0.01 {
                assert!(worst > 0.5 * frame.sensitivity().diameter, "s={s}: {worst}");
            }
        }
    }

    #[test]
    fn placement_is_a_convex_combination_and_blocks_agree() {
        let mut rng = ChaCha8Rng::seed_from_u64(4);
        let frame = toy(&mut rng, 0.3);
        let x = random_unit(&mut rng, 2_500, 6); // crosses block boundaries
        let p = frame.place(&x).unwrap();
        for j in 0..2 {
            let (lo, hi) = (frame.rows.column(j).min(), frame.rows.column(j).max());
            assert!(p.column(j).iter().all(|&v| v >= lo && v <= hi));
        }
        let one = frame.place(&x.rows(2_100, 1).into_owned()).unwrap();
        assert!((one.row(0) - p.row(2_100)).amax() < 1e-12);
        // An anchor at the smallest bandwidth admitted lands (almost) on its own frame row
        // (a smaller one, whose least weight nears underflow, is refused).
        assert!(AnchorFrame::new(&frame.features, &frame.rows, 1e-4).is_err());
        let sharp = AnchorFrame::new(&frame.features, &frame.rows, 0.01).unwrap();
        let a = sharp
            .place(&frame.features.rows(7, 1).into_owned())
            .unwrap();
        assert!((a.row(0) - frame.rows.row(7)).amax() < 1e-6);
    }

    #[test]
    fn hostile_frames_and_inputs_are_refused() {
        let mut rng = ChaCha8Rng::seed_from_u64(5);
        let feats = random_unit(&mut rng, 10, 4);
        let rows = DMatrix::from_element(10, 2, 1.0);
        let mut bad = rows.clone();
        bad[(3, 1)] = f64::NAN;
        assert!(matches!(
            AnchorFrame::new(&feats, &bad, 0.1),
            Err(Error::NonFinite { .. })
        ));
        bad[(3, 1)] = 1e300;
        assert!(AnchorFrame::new(&feats, &bad, 0.1).is_err());
        assert!(AnchorFrame::new(&feats, &rows.rows(0, 9).into_owned(), 0.1).is_err());
        assert!(AnchorFrame::new(&feats, &DMatrix::zeros(10, 17), 0.1).is_err());
        assert!(AnchorFrame::new(&feats, &rows, -1.0).is_err());
        let frame = AnchorFrame::new(&feats, &rows, 0.1).unwrap();
        // A frame whose rows coincide has diameter 0: the placement is constant, and the
        // release needs only the float slack (which is positive, so the mechanism still works).
        assert_eq!(frame.sensitivity().diameter, 0.0);
        let p = PrivacyParams::default();
        assert!(matches!(
            privatize_in_frame(&[1.0, 0.0, 0.0], &frame, 3, &p, &mut rng),
            Err(Error::DimensionMismatch { .. })
        ));
        assert!(matches!(
            privatize_in_frame(&[f64::NAN, 0.0, 0.0, 0.0], &frame, 3, &p, &mut rng),
            Err(Error::NonFinite { .. })
        ));
        assert!(matches!(
            privatize_in_frame(&[0.0; 4], &frame, 3, &p, &mut rng),
            Err(Error::ZeroRow { .. })
        ));
        assert!(privatize_in_frame(&[1.0, 0.0, 0.0, 0.0], &frame, 10_000, &p, &mut rng).is_err());
    }

    /// The real row sits at every position equally often, and its noise has the calibrated std.
    #[test]
    fn release_shuffles_and_adds_calibrated_noise() {
        let mut rng = ChaCha8Rng::seed_from_u64(6);
        let frame = toy(&mut rng, 0.3);
        let q: Vec<f64> = random_unit(&mut rng, 1, 6).iter().copied().collect();
        let exact = frame.place(&DMatrix::from_row_slice(1, 6, &q)).unwrap();
        let p = PrivacyParams {
            epsilon: 2.0,
            ..Default::default()
        };
        let trials = 4_000;
        let mut counts = [0usize; 4];
        let mut sq = 0.0;
        let mut std = 0.0;
        for _ in 0..trials {
            let r = privatize_in_frame(&q, &frame, 3, &p, &mut rng).unwrap();
            assert_eq!(r.rows.shape(), (4, 2));
            counts[r.real_position()] += 1;
            sq += (r.rows.row(r.real_position()) - exact.row(0)).norm_squared();
            std = r.receipt.noise_scale;
            assert!(r.receipt.sensitivity >= frame.sensitivity().value);
        }
        // Each position: binomial(4,000, 1/4), sd ≈ 27; 6 sd either side.
        assert!(
            counts.iter().all(|&c| (c as f64 - 1_000.0).abs() < 165.0),
            "{counts:?}"
        );
        let est = (sq / (2.0 * trials as f64)).sqrt();
        // Relative SE of a std estimated from 8,000 entries: ≈ 0.8 %; allow 6 SE.
        assert!((est / std - 1.0).abs() < 0.05, "{est} vs {std}");
    }
}
