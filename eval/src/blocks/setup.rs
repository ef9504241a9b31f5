//! The block evaluation's inputs: its constants, the galleries (features, labels, thumbnails),
//! the held-out queries and public anchors (`Ctx`), and the exact nearest-neighbour helpers.

use std::time::Instant;

use embed::model::Model;
use publish::partition::Overlap;
use publish::publish::{GalleryView, Thumbnails, COVERAGE_K};
use rayon::prelude::*;

use data::fashion::Split;

use crate::args::Args;

pub(super) type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// k of fidelity@k, Recall@k and mAP@k (the published coverage's k).
pub(super) const K: usize = COVERAGE_K;

/// Thumbnail side (the 28×28 image itself).
pub(super) const THUMB: usize = 28;

/// Test-split size: the small gallery.
pub(super) const SMALL: usize = 10_000;

pub(super) fn parse_overlap(s: &str) -> Res<Overlap> {
    let bad = || format!("unknown variant {s:?} (none, spill-R, closure-M)");
    if s == "none" {
        return Ok(Overlap::None);
    }
    let (kind, v) = s.split_once('-').ok_or_else(bad)?;
    let v: u32 = v.parse().map_err(|_| bad())?;
    match kind {
        "spill" if v > 0 => Ok(Overlap::Spill(v)),
        "closure" if v > 0 => Ok(Overlap::Closure(v)),
        _ => Err(bad().into()),
    }
}

#[inline]
pub(super) fn sq_dist(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| (x - y) * (x - y)).sum()
}

/// Model features of images `idx` of a split, flat (unit rows, as the server stores them).
pub(super) fn infer(model: &Model, split: &Split, idx: &[usize]) -> Res<Vec<f32>> {
    let rows: Vec<Vec<f32>> = idx
        .par_iter()
        .map(|&i| model.infer(split.images.image(i)).map(|r| r.features))
        .collect::<Result<_, _>>()?;
    Ok(rows.concat())
}

/// Search features of images `idx` of a split, flat: what a client queries with
/// (`Model::search_features`, the query model's views).
pub(super) fn search_rows(model: &Model, split: &Split, idx: &[usize]) -> Res<Vec<f32>> {
    let rows: Vec<Vec<f32>> = idx
        .par_iter()
        .map(|&i| model.search_features(split.images.image(i)))
        .collect::<Result<_, _>>()?;
    Ok(rows.concat())
}

/// Model features of flat 28×28 images, 8 to a pass (`Model::infer_batch`, equal bit for bit to
/// `infer`), flat unit rows.
pub(super) fn infer_rows(model: &Model, pixels: &[u8]) -> Res<Vec<f32>> {
    let rows: Vec<Vec<f32>> = pixels
        .par_chunks(784 * 8)
        .map(|group| {
            let imgs: Vec<&[u8]> = group.chunks_exact(784).collect();
            model.infer_batch(&imgs).map(|rs| {
                rs.into_iter()
                    .flat_map(|r| r.features)
                    .collect::<Vec<f32>>()
            })
        })
        .collect::<Result<_, _>>()?;
    Ok(rows.concat())
}

/// One gallery: ids (= index, as the server numbers the demo gallery), labels, features,
/// thumbnails.
pub struct Gallery {
    pub(super) ids: Vec<u64>,
    pub(super) labels: Vec<u8>,
    pub(super) features: Vec<f32>,
    pub(super) thumbs: Vec<u8>,
    pub(super) dim: usize,
}

impl Gallery {
    pub(super) fn n(&self) -> usize {
        self.ids.len()
    }
    pub(super) fn row(&self, i: usize) -> &[f32] {
        &self.features[i * self.dim..(i + 1) * self.dim]
    }
    pub(super) fn view(&self) -> GalleryView<'_> {
        GalleryView {
            ids: &self.ids,
            labels: &self.labels,
            features: &self.features,
            dim: self.dim,
            thumbnails: Thumbnails::Packed(&self.thumbs),
            thumb_side: THUMB,
        }
    }
}

/// Held-out queries and the public anchors.
pub(super) struct Ctx<'a> {
    pub(super) args: &'a Args,
    pub(super) dim: usize,
    pub(super) q_features: Vec<f32>,
    pub(super) q_labels: Vec<u8>,
    pub(super) a_features: Vec<f32>,
    pub(super) a_labels: Vec<u32>,
    pub(super) t0: Instant,
}

impl Ctx<'_> {
    pub(super) fn nq(&self) -> usize {
        self.q_labels.len()
    }
    pub(super) fn query(&self, q: usize) -> &[f32] {
        &self.q_features[q * self.dim..(q + 1) * self.dim]
    }
    pub(super) fn log(&self, msg: impl AsRef<str>) {
        eprintln!(
            "[blocks {:>6.1} s] {}",
            self.t0.elapsed().as_secs_f64(),
            msg.as_ref()
        );
    }
}

/// The `m` nearest gallery rows to `query`, nearest first, ties to the lower index (the same
/// order as `partition::nearest_k`).
pub(super) fn exact_top(rows: &[f32], dim: usize, query: &[f32], m: usize) -> Vec<u32> {
    let mut d: Vec<(f32, u32)> = rows
        .chunks_exact(dim)
        .enumerate()
        .map(|(i, r)| (sq_dist(r, query), i as u32))
        .collect();
    let cmp = |a: &(f32, u32), b: &(f32, u32)| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1));
    let m = m.min(d.len());
    if m < d.len() {
        d.select_nth_unstable_by(m, cmp);
        d.truncate(m);
    }
    d.sort_unstable_by(cmp);
    d.into_iter().map(|(_, i)| i).collect()
}
