//! Quality of the on-device model on a split: classification accuracy and leave-one-out
//! retrieval with its features (cosine = Euclidean on unit vectors).

use embed::model::Model;
use rayon::prelude::*;

use crate::fashion::Split;

#[derive(Debug, Clone, Copy)]
pub struct Quality {
    pub accuracy: f64,
    pub recall1: f64,
    pub recall8: f64,
}

/// Features of the first `n` images of `split` (unit rows, row-major) and predicted labels.
pub fn features(model: &Model, split: &Split, n: usize) -> (Vec<Vec<f32>>, Vec<u32>) {
    (0..n)
        .into_par_iter()
        .map(|i| {
            let inf = model.infer(split.images.image(i)).expect("28×28 images");
            (inf.features, inf.label)
        })
        .unzip()
}

/// Accuracy and LOO Recall@1/@8 over the first `n` images.
pub fn model_quality(model: &Model, split: &Split, n: usize) -> Quality {
    let (f, pred) = features(model, split, n);
    quality_of(&f, &f, &pred, split, n)
}

/// [`model_quality`] of a query model against a gallery model: each of the first `n` images,
/// its features from `query`, ranks the others' features from `gallery` (as a photo's query
/// ranks the server's gallery); accuracy is `query`'s.
pub fn query_quality(query: &Model, gallery: &Model, split: &Split, n: usize) -> Quality {
    let ((q, pred), (g, _)) =
        rayon::join(|| features(query, split, n), || features(gallery, split, n));
    quality_of(&q, &g, &pred, split, n)
}

fn quality_of(
    q_rows: &[Vec<f32>],
    f: &[Vec<f32>],
    pred: &[u32],
    split: &Split,
    n: usize,
) -> Quality {
    let labels: Vec<u32> = (0..n).map(|i| split.labels[i] as u32).collect();
    let accuracy = pred.iter().zip(&labels).filter(|(a, b)| a == b).count() as f64 / n as f64;
    let hits: Vec<(f64, f64)> = (0..n)
        .into_par_iter()
        .map(|q| {
            let qf = &q_rows[q];
            let mut sims: Vec<(f32, usize)> = (0..n)
                .filter(|&j| j != q)
                .map(|j| (qf.iter().zip(&f[j]).map(|(a, b)| a * b).sum::<f32>(), j))
                .collect();
            sims.select_nth_unstable_by(7, |a, b| b.0.total_cmp(&a.0));
            let mut top: Vec<(f32, usize)> = sims[..8].to_vec();
            top.sort_by(|a, b| b.0.total_cmp(&a.0));
            let r1 = (labels[top[0].1] == labels[q]) as u8 as f64;
            let r8 = top.iter().any(|&(_, j)| labels[j] == labels[q]) as u8 as f64;
            (r1, r8)
        })
        .collect();
    Quality {
        accuracy,
        recall1: hits.iter().map(|h| h.0).sum::<f64>() / n as f64,
        recall8: hits.iter().map(|h| h.1).sum::<f64>() / n as f64,
    }
}
