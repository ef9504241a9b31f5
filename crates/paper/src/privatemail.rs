//! PrivateMail end to end: the client's private release and post-processing (Algorithm 1,
//! client side), and the server's plain SMLQ embedding of its gallery.
//!
//! # What is protected
//! The privacy unit is the query's **features given its label**. The released rows are
//! (ε, δ)-DP with respect to replacing the query's feature vector by any other unit vector (and
//! the first, noisy iteration also with respect to its label). The label is NOT covered by
//! (ε, δ): it enters `L_Y`, which the post-processing iterations use again. The label is hidden
//! only by the dummy rows — one public anchor of every other class, with the real row's position
//! drawn uniformly at random and known only to the caller — so a server that sees one release
//! learns which class was asked about with probability 1/C by guessing, but nothing about the
//! features beyond (ε, δ).

use nalgebra::DMatrix;
use rand::seq::SliceRandom;
use rand::{Rng, RngCore};
use rand_distr::StandardNormal;
use shared::api::SearchRequest;

use crate::laplacian::{
    dist2, min_unit_weight, normalize_rows, weights_in_place, DenseKernel, DenseKernel32,
    LabelLaplacian,
};
use crate::sensitivity::{sensitivity, BoundInputs, Sensitivity};
use crate::smlq::{renormalize, smlq, smlq_step};
use dp::mechanism::{release, release_zcdp, NoisyEmbedding, Receipt};
use shared::error::{ensure_query, Error, Result};
use shared::params::{limits, Params, PostBandwidth, SmlqParams};

/// The public anchor set with its anchor–anchor kernel precomputed once (it is public, so the
/// client may cache it across searches).
#[derive(Debug, Clone)]
pub struct Anchors {
    features: DMatrix<f64>,
    labels: Vec<u32>,
    kernel_scale: f64,
    weights: DMatrix<f64>,
    by_class: Vec<Vec<usize>>,
    num_classes: u32,
}

impl Anchors {
    /// Validate, normalise rows to unit length, and precompute the anchor kernel.
    pub fn new(features: &DMatrix<f64>, labels: &[u32], smlq: &SmlqParams) -> Result<Self> {
        smlq.validate()?;
        let (n, d) = features.shape();
        if labels.len() != n {
            return Err(Error::DimensionMismatch {
                what: "anchor labels",
                expected: n,
                got: labels.len(),
            });
        }
        let rows_total = n + smlq.num_classes as usize;
        if rows_total > limits::MAX_CLIENT_ROWS {
            return Err(Error::TooLarge {
                what: "anchors + query + dummies",
                count: rows_total,
                limit: limits::MAX_CLIENT_ROWS,
            });
        }
        if d == 0 || d > limits::MAX_FEATURE_DIM {
            return Err(Error::InvalidParameter {
                name: "feature dimension",
                reason: format!("must be in 1..={}", limits::MAX_FEATURE_DIM),
            });
        }
        let features = normalize_rows(features, "anchor features")?;
        let mut by_class = vec![Vec::new(); smlq.num_classes as usize];
        for (i, &y) in labels.iter().enumerate() {
            if y >= smlq.num_classes {
                return Err(Error::LabelOutOfRange {
                    label: y,
                    max: smlq.max_label(),
                });
            }
            by_class[y as usize].push(i);
        }
        if let Some(missing) = by_class.iter().position(|v| v.is_empty()) {
            return Err(Error::MissingClass {
                class: missing as u32,
            });
        }
        let weights = DenseKernel::from_unit_rows(&features, smlq.kernel_scale).to_dense();
        Ok(Anchors {
            features,
            labels: labels.to_vec(),
            kernel_scale: smlq.kernel_scale,
            weights,
            by_class,
            num_classes: smlq.num_classes,
        })
    }

    pub fn len(&self) -> usize {
        self.labels.len()
    }
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }
    pub fn dim(&self) -> usize {
        self.features.ncols()
    }
    pub fn labels(&self) -> &[u32] {
        &self.labels
    }
    pub fn features(&self) -> &DMatrix<f64> {
        &self.features
    }
}

/// What the client sends, and what it keeps.
#[derive(Debug, Clone)]
pub struct ClientRelease {
    /// The query row among the dummy rows (C rows, k columns), in a uniformly random order.
    pub query_rows: DMatrix<f64>,
    /// The anchor rows, in the public anchor order (n_P rows).
    pub anchor_rows: DMatrix<f64>,
    pub receipt: Receipt,
    pub sensitivity: Sensitivity,
    real_position: usize,
}

impl ClientRelease {
    /// Which of `query_rows` is the real query. Never send this.
    pub fn real_position(&self) -> usize {
        self.real_position
    }
}

/// The rows of one client input `[query ; dummies ; anchors]`, as positions into the anchor set.
struct ClientRows {
    /// Anchor index of each dummy, one per class other than the query's.
    dummies: Vec<usize>,
    labels: Vec<u32>,
}

fn pick_dummies(anchors: &Anchors, label: u32, rng: &mut impl Rng) -> ClientRows {
    let mut dummies = Vec::with_capacity(anchors.num_classes as usize - 1);
    let mut labels = vec![label];
    for class in 0..anchors.num_classes {
        if class != label {
            let members = &anchors.by_class[class as usize];
            dummies.push(members[rng.random_range(0..members.len())]);
            labels.push(class);
        }
    }
    labels.extend_from_slice(&anchors.labels);
    ClientRows { dummies, labels }
}

/// The dense feature kernel over `[query ; dummies ; anchors]`, reusing the anchor cache: only
/// the query's row is new work (O(n·d)); dummy rows are copies of anchor rows.
fn client_kernel(anchors: &Anchors, query: &DMatrix<f64>, rows: &ClientRows) -> DenseKernel {
    let m = 1 + rows.dummies.len();
    let n = m + anchors.len();
    // Position of every client row in the anchor set (the query has none).
    let src: Vec<Option<usize>> = std::iter::once(None)
        .chain(rows.dummies.iter().map(|&a| Some(a)))
        .chain((0..anchors.len()).map(Some))
        .collect();
    let q_dots = &anchors.features * query.transpose(); // n_P × 1
    let s = anchors.kernel_scale;
    let mut qw: Vec<f64> = q_dots
        .iter()
        .map(|g| (2.0 - 2.0 * g).clamp(0.0, 4.0))
        .collect();
    weights_in_place(&mut qw, s, min_unit_weight(s));
    // Packed column by column (W is symmetric): the anchor part of each column is a contiguous
    // copy of a cached anchor column, or of the query's weights.
    DenseKernel::from_columns(n, |j, col| {
        let sj = src[j];
        for i in (j + 1)..m {
            col[i - j - 1] = match (src[i], sj) {
                (None, None) => 0.0,
                (None, Some(a)) | (Some(a), None) => qw[a],
                (Some(a), Some(b)) if a == b => 1.0, // the same public point twice
                (Some(a), Some(b)) => anchors.weights[(a, b)],
            };
        }
        let a0 = (j + 1).max(m) - m; // first anchor row in this column
        let tail = &mut col[(m.max(j + 1) - j - 1)..];
        match sj {
            None => tail.copy_from_slice(&qw[a0..]),
            Some(b) => {
                let na = anchors.len();
                tail.copy_from_slice(&anchors.weights.as_slice()[b * na + a0..(b + 1) * na]);
                // A dummy's own copy in the anchor block is the same point: weight 1.
                if j < m && b >= a0 {
                    tail[b - a0] = 1.0;
                }
            }
        }
    })
}

/// Random initial embedding `Q`, entries i.i.d. N(0, σ_q²). Data-independent.
pub fn initial_embedding(rng: &mut impl Rng, rows: usize, smlq: &SmlqParams) -> DMatrix<f64> {
    DMatrix::from_fn(rows, smlq.embed_dim, |_, _| {
        smlq.sigma_q * rng.sample::<f64, _>(StandardNormal)
    })
}

/// The private part: one SMLQ iteration on `[query ; dummies ; anchors]`, released through the
/// mechanism.
///
/// Guarantee: (ε, `receipt.proven_delta`)-DP with respect to replacing the query's unit feature
/// vector (and, for this iteration alone, its label). Proof: `Q` is drawn independently of the
/// data; [`sensitivity`] bounds the change of the computed f(X) for any replacement of one row
/// given `Q` and the public parameters; [`release`] is private for that sensitivity.
fn private_release(
    query: &DMatrix<f64>,
    anchors: &Anchors,
    rows: &ClientRows,
    params: &Params,
    rng: &mut impl RngCore,
) -> Result<(NoisyEmbedding, Receipt, Sensitivity)> {
    let gx = client_kernel(anchors, query, rows);
    let ly = LabelLaplacian::new(
        &rows.labels,
        params.smlq.num_classes,
        params.smlq.kernel_scale,
    )?;
    let q = initial_embedding(rng, rows.labels.len(), &params.smlq);
    let f = smlq_step(&gx, &ly, params.smlq.alpha, &q);
    let sens = sensitivity(
        &BoundInputs {
            rows: rows.labels.len(),
            alpha: params.smlq.alpha,
            kernel_scale: params.smlq.kernel_scale,
            max_label: params.smlq.max_label(),
        },
        &q,
    )?;
    let (noisy, receipt) = release(&f, sens.value, &params.privacy, rng)?;
    Ok((noisy, receipt, sens))
}

/// Post-processing: rebuild the feature kernel from the NOISY embedding and run `T` SMLQ
/// iterations with it. Its inputs are the released embedding, the labels and public
/// parameters — it cannot read raw features, so it cannot weaken the feature guarantee.
pub fn post_process(
    noisy: &NoisyEmbedding,
    labels: &[u32],
    params: &Params,
) -> Result<DMatrix<f64>> {
    let mut z = noisy.matrix().clone();
    if params.smlq.renormalize {
        renormalize(&mut z);
    }
    let s = match params.post_bandwidth {
        PostBandwidth::Fixed(s) => s,
        PostBandwidth::Median(factor) => factor * median_sq_distance(&z).max(f64::MIN_POSITIVE),
    };
    // f32: released data only, and the bulk of a browser search (see `DenseKernel32`).
    let gx = DenseKernel32::from_points(&z, s);
    let ly = LabelLaplacian::new(labels, params.smlq.num_classes, params.smlq.kernel_scale)?;
    Ok(smlq(
        &gx,
        &ly,
        params.smlq.alpha,
        z,
        params.smlq.iterations,
        params.smlq.renormalize,
    ))
}

/// Median squared distance over ~20,000 row pairs taken at a fixed stride (an estimate of
/// the bandwidth is all post-processing needs).
pub fn median_sq_distance(z: &DMatrix<f64>) -> f64 {
    let rows = crate::retrieve::gallery_rows(z);
    let n = rows.len();
    let pairs = n * n.saturating_sub(1) / 2;
    let stride = (pairs / 20_000).max(1);
    let mut d: Vec<f64> = Vec::with_capacity(pairs / stride + 1);
    // Pairs in row-major order (i < j) whose index is a multiple of `stride`, visited directly
    // (no test per pair: integer division is slow in WebAssembly).
    let (mut start, mut next) = (0usize, 0usize);
    for i in 0..n {
        let len = n - i - 1;
        while next < start + len {
            d.push(dist2(&rows[i], &rows[i + 1 + next - start]));
            next += stride;
        }
        start += len;
    }
    if d.is_empty() {
        return 1.0;
    }
    let mid = d.len() / 2;
    *d.select_nth_unstable_by(mid, f64::total_cmp).1
}

/// The whole client side of Algorithm 1.
///
/// Guarantee: the returned rows are (ε, `receipt.proven_delta`)-DP with respect to the query's
/// features given its label (see the module docs for the label). Proof: [`private_release`]
/// is the only step that reads the features; everything after it — post-processing, the
/// shuffle (independent randomness) — reads only its output, the labels and public data.
pub fn privatize(
    query_features: &[f64],
    query_label: u32,
    anchors: &Anchors,
    params: &Params,
    rng: &mut impl RngCore,
) -> Result<ClientRelease> {
    let query = checked_query(query_features, query_label, anchors, params)?;
    let rows = pick_dummies(anchors, query_label, rng);
    let (noisy, receipt, sens) = private_release(&query, anchors, &rows, params, rng)?;
    drop(query); // nothing below may read it
    let emb = post_process(&noisy, &rows.labels, params)?;
    Ok(shuffled(emb, &rows, anchors.len(), receipt, sens, rng))
}

/// The extended paper's protocol (its Algorithm 1): `private_iterations` SMLQ steps that each
/// read the features, each released with noise, the budget split equally among them; then the
/// usual post-processing. The extended paper bounds each step's sensitivity only with
/// probability 1 − β and composes Laplace noise by strong composition; here every step uses the
/// valid bound of [`sensitivity`] and discrete Gaussian noise composed in zCDP (tighter).
///
/// Guarantee: (ε, `receipt.proven_delta`)-DP with respect to the query's unit feature vector
/// (and its label, for the noisy steps). Proof: step t computes one SMLQ step from the
/// features and the previous RELEASED iterate `X_{t−1}` (public once released); the bound of
/// [`sensitivity`] holds for any `Q`, so with `Q := X_{t−1}` it bounds step t's sensitivity;
/// [`release_zcdp`] makes step t (ρ/T)-zCDP, where ρ is the zCDP budget that converts to
/// (ε, δ); adaptively composed, the T steps are ρ-zCDP (Bun & Steinke 2016, Lemma 2.3), and
/// the receipt's `proven_delta` converts the exact sum of the sampled steps' ρ. Renormalising
/// between steps and everything after the last step read only released values.
pub fn privatize_multi(
    query_features: &[f64],
    query_label: u32,
    anchors: &Anchors,
    params: &Params,
    private_iterations: usize,
    rng: &mut impl RngCore,
) -> Result<ClientRelease> {
    let query = checked_query(query_features, query_label, anchors, params)?;
    if !(1..=limits::MAX_ITERATIONS).contains(&private_iterations) {
        return Err(Error::InvalidParameter {
            name: "private_iterations",
            reason: format!("must be in 1..={}", limits::MAX_ITERATIONS),
        });
    }
    let rows = pick_dummies(anchors, query_label, rng);
    let gx = client_kernel(anchors, &query, &rows);
    drop(query);
    let ly = LabelLaplacian::new(
        &rows.labels,
        params.smlq.num_classes,
        params.smlq.kernel_scale,
    )?;
    let inp = BoundInputs {
        rows: rows.labels.len(),
        alpha: params.smlq.alpha,
        kernel_scale: params.smlq.kernel_scale,
        max_label: params.smlq.max_label(),
    };
    // The ρ a single discrete-Gaussian release of this (ε, δ) would spend, split T ways.
    let sigma1 = dp::mechanism::zcdp_sigma(params.privacy.epsilon, params.privacy.delta, 1.0)?;
    let rho_step = 1.0 / (2.0 * sigma1 * sigma1) / private_iterations as f64;
    let mut x = initial_embedding(rng, rows.labels.len(), &params.smlq);
    let mut last = None;
    let (mut rho, mut worst) = (0.0, None::<Sensitivity>);
    for _ in 0..private_iterations {
        let sens = sensitivity(&inp, &x)?;
        let f = smlq_step(&gx, &ly, params.smlq.alpha, &x);
        let (noisy, r) = release_zcdp(&f, sens.value, rho_step, &params.privacy, rng)?;
        rho += r.zcdp_rho;
        if worst.is_none_or(|w| w.value < sens.value) {
            worst = Some(sens);
        }
        x = noisy.matrix().clone();
        if params.smlq.renormalize {
            renormalize(&mut x);
        }
        last = Some((noisy, r));
    }
    let (noisy, mut receipt) = last.expect("at least one private iteration");
    receipt.zcdp_rho = rho;
    receipt.proven_delta = dp::mechanism::cdp_delta(rho, params.privacy.epsilon);
    receipt.sensitivity = worst.map_or(0.0, |w| w.value);
    let emb = post_process(&noisy, &rows.labels, params)?;
    Ok(shuffled(
        emb,
        &rows,
        anchors.len(),
        receipt,
        worst.expect("set"),
        rng,
    ))
}

/// Validate the inputs of a client release and normalise the query.
fn checked_query(
    query_features: &[f64],
    query_label: u32,
    anchors: &Anchors,
    params: &Params,
) -> Result<DMatrix<f64>> {
    params.validate()?;
    if anchors.kernel_scale != params.smlq.kernel_scale
        || anchors.num_classes != params.smlq.num_classes
    {
        return Err(Error::InvalidParameter {
            name: "anchors",
            reason: "built with a different kernel_scale or num_classes".into(),
        });
    }
    ensure_query(query_features, anchors.dim())?;
    if query_label >= params.smlq.num_classes {
        return Err(Error::LabelOutOfRange {
            label: query_label,
            max: params.smlq.max_label(),
        });
    }
    normalize_rows(
        &DMatrix::from_row_slice(1, query_features.len(), query_features),
        "query features",
    )
}

/// Shuffle the query and dummy rows of a post-processed embedding (independent randomness).
fn shuffled(
    emb: DMatrix<f64>,
    rows: &ClientRows,
    anchor_count: usize,
    receipt: Receipt,
    sensitivity: Sensitivity,
    rng: &mut impl RngCore,
) -> ClientRelease {
    let m = 1 + rows.dummies.len();
    let mut order: Vec<usize> = (0..m).collect();
    order.shuffle(rng);
    let real_position = order
        .iter()
        .position(|&r| r == 0)
        .expect("query row present");
    let k = emb.ncols();
    let query_rows = DMatrix::from_fn(m, k, |i, j| emb[(order[i], j)]);
    let anchor_rows = emb.rows(m, anchor_count).into_owned();
    ClientRelease {
        query_rows,
        anchor_rows,
        receipt,
        sensitivity,
        real_position,
    }
}

/// Up to this many rows (gallery + anchors) the exact dense kernel is used (≤ 0.6 GB); above
/// it, the Nyström approximation with [`NYSTROM_LANDMARKS`] landmarks (O(N·m) memory).
pub const DENSE_MAX_ROWS: usize = 12_000;
/// Measured on 3,000 images with the model's features (`crates/data/tests/models/nystrom_vs_dense.rs`). With the
/// photo-trained weights (cnn-v1-6135bf58efcc9c0c), 2,500 landmarks share 96.9 % of the exact
/// embedding's 8 nearest neighbours (Recall@8 0.915 vs 0.917, aligned residual 0.0001) where
/// 2,000 shared only 79 %; with the weights before them, 1,500 shared 24 %, 2,000 91 %.
pub const NYSTROM_LANDMARKS: usize = 2_500;
/// The Nyström factor holds rows × landmarks f32 entries; above this many (800 MB, reached past
/// 100,000 rows) the landmarks shrink to fit, so a 1,000,000-image gallery embeds in bounded
/// memory (200 landmarks: a coarser non-private embedding, which only the paper's protocol
/// ranks — and that protocol returns category guesses at honest noise anyway).
pub const NYSTROM_MAX_ENTRIES: usize = 200_000_000;

/// Landmarks for a Nyström embedding of `rows` rows (see [`NYSTROM_MAX_ENTRIES`]).
pub fn nystrom_landmarks(rows: usize) -> usize {
    NYSTROM_LANDMARKS
        .min(NYSTROM_MAX_ENTRIES / rows.max(1))
        .max(100)
}

/// The server's non-private embedding of `[gallery ; anchors]` (unit-normalised features):
/// `T + 1` SMLQ iterations from its own random start with the feature kernel throughout.
/// Dense, O(N²) memory: for small galleries and as the reference for [`embed_nystrom`].
pub fn embed_dense(
    features: &DMatrix<f64>,
    labels: &[u32],
    smlq_params: &SmlqParams,
    rng: &mut impl Rng,
) -> Result<DMatrix<f64>> {
    smlq_params.validate()?;
    let x = normalize_rows(features, "gallery features")?;
    let q = initial_embedding(rng, x.nrows(), smlq_params);
    let gx = DenseKernel::from_unit_rows(&x, smlq_params.kernel_scale);
    embed_with(&gx, labels, smlq_params, q)
}

/// As [`embed_dense`] (but consuming the features, to save a copy), with the Nyström kernel over
/// `landmarks` rows spread over the features by D² sampling ([`spread_landmarks`]): O(N·m)
/// memory and O(N·m·d) time, for large galleries.
pub fn embed_nystrom(
    features: DMatrix<f64>,
    labels: &[u32],
    smlq_params: &SmlqParams,
    landmarks: usize,
    rng: &mut impl Rng,
) -> Result<DMatrix<f64>> {
    smlq_params.validate()?;
    let x = crate::laplacian::normalize_rows_owned(features, "gallery features")?;
    let n = x.nrows();
    // Q first, so a seeded run starts from the same Q as `embed_dense`.
    let q = initial_embedding(rng, n, smlq_params);
    let idx = spread_landmarks(&x, landmarks.clamp(1, n), rng);
    let gx = crate::nystrom::NystromKernel::from_unit_rows(&x, &idx, smlq_params.kernel_scale);
    embed_with(&gx, labels, smlq_params, q)
}

/// `m` landmark rows of the unit rows `x`, drawn by D² sampling (k-means++ seeding): each next
/// landmark with probability proportional to its squared distance from the nearest landmark so
/// far. Why not uniformly: the kernel is sharp (`exp(−d²/s)` with `s` = 0.2), so a row with no
/// landmark near it has its whole kernel row approximated as nearly 0, and its neighbours in the
/// embedding move; spread landmarks leave no region without one. O(n·m·d) time, O(n) memory.
fn spread_landmarks(x: &DMatrix<f64>, m: usize, rng: &mut impl Rng) -> Vec<usize> {
    let (n, d) = x.shape();
    // Row-major copy: one contiguous dot product a row and landmark.
    let rows: Vec<f64> = (0..n)
        .flat_map(|i| x.row(i).iter().copied().collect::<Vec<_>>())
        .collect();
    let mut chosen = Vec::with_capacity(m);
    let mut nearest = vec![f64::INFINITY; n];
    let mut next = rng.random_range(0..n);
    loop {
        chosen.push(next);
        nearest[next] = 0.0;
        if chosen.len() == m {
            return chosen;
        }
        let l = &rows[next * d..(next + 1) * d];
        let mut total = 0.0;
        for (d_i, r) in nearest.iter_mut().zip(rows.chunks_exact(d)) {
            if *d_i > 0.0 {
                // Unit rows: |a − b|² = 2 − 2·a·b.
                let dot: f64 = r.iter().zip(l).map(|(a, b)| a * b).sum();
                *d_i = d_i.min((2.0 - 2.0 * dot).max(0.0));
                total += *d_i;
            }
        }
        // The next landmark: row i with probability nearest[i] / total (rows at distance 0 —
        // landmarks and their duplicates — never); if every row is at 0, the first unchosen.
        let mut t = rng.random::<f64>() * total;
        let pick = nearest.iter().position(|&v| {
            if v > 0.0 && t < v {
                return true;
            }
            t -= if v > 0.0 { v } else { 0.0 };
            false
        });
        next = pick
            .or_else(|| nearest.iter().rposition(|&v| v > 0.0))
            .or_else(|| (0..n).find(|i| !chosen.contains(i)))
            .expect("m ≤ n rows");
    }
}

fn embed_with(
    gx: &impl crate::laplacian::GraphOperator,
    labels: &[u32],
    smlq_params: &SmlqParams,
    q: DMatrix<f64>,
) -> Result<DMatrix<f64>> {
    if labels.len() != gx.len() {
        return Err(Error::DimensionMismatch {
            what: "gallery labels",
            expected: gx.len(),
            got: labels.len(),
        });
    }
    let ly = LabelLaplacian::new(labels, smlq_params.num_classes, smlq_params.kernel_scale)?;
    Ok(smlq(
        gx,
        &ly,
        smlq_params.alpha,
        q,
        smlq_params.iterations + 1,
        smlq_params.renormalize,
    ))
}

/// The request carrying an Algorithm 1 release: its query rows in their (shuffled) order
/// and its anchor rows in the public anchor order, for the server to align.
pub fn search_request(r: &ClientRelease, k: usize) -> SearchRequest {
    let rows =
        |m: &nalgebra::DMatrix<f64>| m.row_iter().map(|x| x.iter().copied().collect()).collect();
    SearchRequest {
        query_rows: rows(&r.query_rows),
        anchor_rows: Some(rows(&r.anchor_rows)),
        k,
        noise_std: None,
        ranking: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::laplacian::GraphOperator;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    /// Landmarks are distinct rows; two tight, far clusters each get one of two landmarks;
    /// rows that all coincide still give `m` distinct landmarks.
    #[test]
    fn spread_landmarks_cover_every_cluster_and_are_distinct() {
        let mut rng = ChaCha8Rng::seed_from_u64(4);
        let mut hits = 0;
        for _ in 0..50 {
            // 99 rows near e1, 1 row near −e1 (uniform sampling would miss it 98 % of the time).
            let x = DMatrix::from_fn(100, 3, |i, j| match (i, j) {
                (99, 0) => -1.0,
                (_, 0) => 1.0,
                (i, 1) => 1e-3 * (i % 7) as f64,
                _ => 0.0,
            });
            let x = crate::laplacian::normalize_rows_owned(x, "x").unwrap();
            let l = spread_landmarks(&x, 2, &mut rng);
            assert_eq!(l.len(), 2);
            assert_ne!(l[0], l[1]);
            hits += l.contains(&99) as usize;
        }
        assert!(
            hits >= 49,
            "the far row was a landmark in only {hits} of 50 draws"
        );
        let same = DMatrix::from_fn(10, 2, |_, j| if j == 0 { 1.0 } else { 0.0 });
        let mut l = spread_landmarks(&same, 10, &mut rng);
        l.sort_unstable();
        assert_eq!(l, (0..10).collect::<Vec<_>>());
    }

    /// The cached client kernel equals the kernel computed from scratch on the explicit
    /// `[query ; dummies ; anchors]` matrix.
    #[test]
    fn cached_client_kernel_matches_the_definition() {
        let mut rng = ChaCha8Rng::seed_from_u64(9);
        let smlq = SmlqParams {
            num_classes: 4,
            kernel_scale: 0.7,
            ..SmlqParams::default()
        };
        let feats = DMatrix::from_fn(30, 5, |_, _| rng.random::<f64>() - 0.3);
        let labels: Vec<u32> = (0..30).map(|i| (i % 4) as u32).collect();
        let anchors = Anchors::new(&feats, &labels, &smlq).unwrap();
        let query =
            normalize_rows(&DMatrix::from_fn(1, 5, |_, _| rng.random::<f64>()), "q").unwrap();
        let rows = pick_dummies(&anchors, 2, &mut rng);
        let fast = client_kernel(&anchors, &query, &rows);
        let explicit = DMatrix::from_fn(1 + rows.dummies.len() + 30, 5, |i, j| {
            if i == 0 {
                query[(0, j)]
            } else if i <= rows.dummies.len() {
                anchors.features[(rows.dummies[i - 1], j)]
            } else {
                anchors.features[(i - 1 - rows.dummies.len(), j)]
            }
        });
        let slow = DenseKernel::from_unit_rows(&explicit, 0.7);
        assert!((fast.to_dense() - slow.to_dense()).amax() < 1e-12);
        let (a, b) = (fast.degrees(), slow.degrees());
        assert!(a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-10));
        assert_eq!(rows.labels[0], 2);
    }

    /// The extended protocol spends no more than one release of the same (ε, δ): its steps'
    /// ρ add up to the single release's ρ (up to the grid), so the proven δ stays ≤ δ; more
    /// steps mean more noise per step.
    #[test]
    fn multi_step_release_splits_the_budget() {
        let mut rng = ChaCha8Rng::seed_from_u64(12);
        let smlq = SmlqParams {
            num_classes: 3,
            kernel_scale: 1.0,
            ..SmlqParams::default()
        };
        let feats = DMatrix::from_fn(24, 4, |_, _| rng.random::<f64>() - 0.3);
        let labels: Vec<u32> = (0..24).map(|i| (i % 3) as u32).collect();
        let anchors = Anchors::new(&feats, &labels, &smlq).unwrap();
        let params = Params {
            smlq,
            ..Params::default()
        };
        let q = [0.3, -0.2, 0.5, 0.1];
        let one = privatize(&q, 1, &anchors, &params, &mut rng).unwrap();
        let multi = privatize_multi(&q, 1, &anchors, &params, 3, &mut rng).unwrap();
        assert_eq!(multi.query_rows.shape(), one.query_rows.shape());
        assert_eq!(multi.anchor_rows.shape(), one.anchor_rows.shape());
        let (r1, r3) = (one.receipt.zcdp_rho, multi.receipt.zcdp_rho);
        assert!(r3 <= r1 * (1.0 + 1e-6) && r3 > 0.95 * r1, "{r3} vs {r1}");
        assert!(multi.receipt.proven_delta <= params.privacy.delta * (1.0 + 1e-6));
        // Each step's noise relative to its sensitivity is √3 times the single release's.
        let ratio = |r: &Receipt| r.noise_scale / r.grid_sensitivity;
        let want = 3f64.sqrt() * ratio(&one.receipt);
        assert!((ratio(&multi.receipt) / want - 1.0).abs() < 0.01);
        assert!(privatize_multi(&q, 1, &anchors, &params, 0, &mut rng).is_err());
    }
}
