//! The hyper-parameter studies: Algorithm 1's (the paper's Figure 5) and the frame protocol's.

use paper::frame::{privatize_in_frame, AnchorFrame};
use paper::retrieve::{full_ranking, gallery_rows};
use rand_chacha::ChaCha20Rng;
use shared::{Params, PrivacyParams, SmlqParams};

use super::alg1::Alg1;

use super::setting::{score, Setting};
use crate::rng::query_rng;

/// Points of the Algorithm 1 study (k: 4, α: 4, σ: 5, anchors: 3), for progress.
pub(super) const ALG1_STUDY_POINTS: u64 = 16;

/// One axis of Algorithm 1's study: its name, its values, and how to set one.
/// The setter gets the SMLQ parameters and the number of anchors.
pub(super) type StudyAxis = (
    &'static str,
    &'static [f64],
    fn(&mut SmlqParams, &mut usize, f64),
);

/// Algorithm 1's study setting (smaller: every point is a full server embedding).
pub(super) const STUDY_GALLERY: usize = 1000;
pub(super) const STUDY_ANCHORS: usize = 500;
pub(super) const STUDY_QUERIES: usize = 100;

/// mAP of the frame protocol, non-private and private, for one frame.
pub(super) fn frame_maps(
    s: &Setting,
    f: &AnchorFrame,
    seed: u64,
    p: &PrivacyParams,
) -> Result<Vec<(&'static str, f64)>, shared::Error> {
    let placed = gallery_rows(&f.place(&s.gallery)?);
    let np = score(s, 8, |q| Ok(full_ranking(&placed, &placed[q], Some(q))))?;
    let private = score(s, 8, |q| {
        let mut rng = query_rng(seed, q, 7, p.epsilon);
        let feats: Vec<f64> = s.gallery.row(q).iter().copied().collect();
        let r = privatize_in_frame(&feats, f, 9, p, &mut rng)?;
        let row: Vec<f64> = r.rows.row(r.real_position()).iter().copied().collect();
        Ok(full_ranking(&placed, &row, Some(q)))
    })?;
    Ok(vec![("non-private", np[1]), ("ε = 8", private[1])])
}

pub(super) fn study_push(study: &mut Vec<(String, f64, Vec<f64>)>, key: String, x: f64, v: f64) {
    match study.iter_mut().find(|(k, xx, _)| *k == key && *xx == x) {
        Some((_, _, vs)) => vs.push(v),
        None => study.push((key, x, vec![v])),
    }
}

/// Algorithm 1's study on one seed's setting, into `alg1_study` (one progress step a point).
#[allow(clippy::too_many_arguments)]
pub(super) fn study_alg1(
    s: &Setting,
    params: Params,
    privacy: &impl Fn(f64) -> PrivacyParams,
    seed: u64,
    k: usize,
    rng: &mut ChaCha20Rng,
    alg1_study: &mut Vec<(String, f64, Vec<f64>)>,
    step: &impl Fn(String),
) -> Result<(), shared::Error> {
    // Algorithm 1 (the paper's Figure 5): embedding dimension k, label weight α, kernel
    // scale s (the paper's σ) and the number of anchors, one at a time around the
    // defaults, non-private and at ε = 8, on a smaller setting (each point is a full
    // server embedding).
    let base = params.smlq;
    let (default_anchors, nq_study) = (
        STUDY_ANCHORS.min(s.anchors.nrows()),
        STUDY_QUERIES.min(s.truth.len()),
    );
    let default_small = s.subset(STUDY_GALLERY, default_anchors, nq_study, k);
    let grid: [StudyAxis; 4] = [
        ("k", &[2.0, 4.0, 8.0, 16.0], |p, _, v| {
            p.embed_dim = v as usize
        }),
        ("alpha", &[0.05, 0.5, 2.0, 8.0], |p, _, v| p.alpha = v),
        ("sigma", &[0.03, 0.1, 0.3, 1.0, 3.0], |p, _, v| {
            p.kernel_scale = v
        }),
        ("anchors", &[100.0, 250.0, 500.0], |_, n, v| *n = v as usize),
    ];
    for (what, values, set) in grid {
        for &v in values {
            let mut pm = params;
            pm.smlq = base;
            let mut anchors = default_anchors;
            set(&mut pm.smlq, &mut anchors, v);
            if anchors > s.anchors.nrows() {
                step(format!(
                    "seed {seed}: Algorithm 1 study, {what} = {v} skipped (only {} anchors)",
                    s.anchors.nrows()
                ));
                continue; // not that many anchors in this run
            }
            // The k, α and σ settings share one subset (its truth is a full kNN).
            let other;
            let small = if anchors == default_anchors {
                &default_small
            } else {
                other = s.subset(STUDY_GALLERY, anchors, nq_study, k);
                &other
            };
            let server = Alg1::new(small, &pm, rng)?;
            let np = server.non_private(small, k)?;
            let pr = server.private(small, &privacy(8.0), 1, seed, 12, k)?;
            for (label, t) in [("SMLQ non-private", np), ("PrivateMail ε = 8", pr)] {
                study_push(alg1_study, format!("{what}|{label}|Recall@{k}"), v, t[0]);
                study_push(alg1_study, format!("{what}|{label}|mAP"), v, t[1]);
            }
            step(format!("seed {seed}: Algorithm 1 study, {what} = {v}"));
        }
    }
    Ok(())
}

/// The frame protocol's study on one seed's setting, into `study` (one progress step a point).
pub(super) fn study_frame(
    s: &Setting,
    frame_kernel_scale: f64,
    privacy: &impl Fn(f64) -> PrivacyParams,
    seed: u64,
    study: &mut Vec<(String, f64, Vec<f64>)>,
    step: &impl Fn(String),
) -> Result<(), shared::Error> {
    // Frame protocol: kernel scale and number of anchors, non-private and at ε = 8. From 0.01:
    // a client refuses a scale whose least weight is below 2⁻⁶⁰⁰ (below 0.00962,
    // `paper::laplacian::check_kernel_scale`).
    for &scale in &[0.01, 0.02, 0.05, 0.1, 0.3] {
        let f = AnchorFrame::class_simplex(&s.anchors, &s.anchor_labels, 10, scale)?;
        for (label, m) in frame_maps(s, &f, seed, &privacy(8.0))? {
            study_push(study, format!("kernel scale|{label}"), scale, m);
        }
        step(format!("seed {seed}: frame study, kernel scale = {scale}"));
    }
    for &n in &[100usize, 250, 500, 1000] {
        let n = n.min(s.anchors.nrows());
        let f = AnchorFrame::class_simplex(
            &s.anchors.rows(0, n).into_owned(),
            &s.anchor_labels[..n],
            10,
            frame_kernel_scale,
        )?;
        for (label, m) in frame_maps(s, &f, seed, &privacy(8.0))? {
            study_push(study, format!("anchors|{label}"), n as f64, m);
        }
        step(format!("seed {seed}: frame study, anchors = {n}"));
    }
    Ok(())
}
