//! The hyper-parameter studies: Algorithm 1's (the paper's Figure 5) and the frame protocol's.

use shared::protocol::frame::{privatize_in_frame, AnchorFrame};
use shared::protocol::retrieve::{full_ranking, gallery_rows};
use shared::{PrivacyParams, SmlqParams};

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
