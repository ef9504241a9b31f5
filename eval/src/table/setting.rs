//! One seed's setting (gallery, anchors, queries and their true neighbours) and the scoring
//! of a method's rankings on it.

use embed::model::Model;
use paper::laplacian::normalize_rows;
use paper::metrics::{average_precision, mean, overlap, recall_at_k};
use paper::retrieve::{full_ranking, gallery_rows};
use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha20Rng;
use rayon::prelude::*;
use shared::DMatrix;

use data::fashion::Split;

use super::report::Triple;
use crate::args::{Args, EvalSplit, Features};

/// One seed's data: gallery and anchors as unit feature rows with labels.
pub(super) struct Setting {
    pub(super) gallery: DMatrix<f64>,
    pub(super) gallery_rows: Vec<Vec<f64>>,
    pub(super) labels: Vec<u32>,
    pub(super) predicted: Vec<u32>,
    pub(super) anchors: DMatrix<f64>,
    pub(super) anchor_labels: Vec<u32>,
    /// True k nearest gallery neighbours of each query in feature space.
    pub(super) truth: Vec<Vec<usize>>,
}

impl Setting {
    /// The first `gallery` gallery items, `anchors` anchors and `queries` queries.
    pub(super) fn subset(
        &self,
        gallery: usize,
        anchors: usize,
        queries: usize,
        k: usize,
    ) -> Setting {
        let g = gallery.min(self.labels.len());
        let a = anchors.min(self.anchor_labels.len());
        let gallery_rows = self.gallery_rows[..g].to_vec();
        let truth = (0..queries.min(g))
            .into_par_iter()
            .map(|q| {
                let mut r = full_ranking(&gallery_rows, &gallery_rows[q], Some(q));
                r.truncate(k);
                r
            })
            .collect();
        Setting {
            gallery: self.gallery.rows(0, g).into_owned(),
            gallery_rows,
            labels: self.labels[..g].to_vec(),
            predicted: self.predicted[..g].to_vec(),
            anchors: self.anchors.rows(0, a).into_owned(),
            anchor_labels: self.anchor_labels[..a].to_vec(),
            truth,
        }
    }
}

/// Features of images `idx` of a split (unit rows) and the labels a client would use.
pub(super) fn featurize(
    model: &Model,
    features: Features,
    split: &Split,
    idx: &[usize],
) -> (DMatrix<f64>, Vec<u32>) {
    match features {
        Features::Pixels => (
            DMatrix::from_fn(idx.len(), 784, |i, j| {
                split.images.image(idx[i])[j] as f64 / 255.0
            }),
            idx.iter().map(|&i| split.labels[i] as u32).collect(),
        ),
        Features::Model => {
            let inf: Vec<_> = idx
                .par_iter()
                .map(|&i| model.infer(split.images.image(i)).expect("28×28 images"))
                .collect();
            let d = inf[0].features.len();
            (
                DMatrix::from_fn(idx.len(), d, |i, j| inf[i].features[j] as f64),
                inf.iter().map(|r| r.label).collect(),
            )
        }
    }
}

pub(super) fn setting(
    args: &Args,
    model: &Model,
    test: &Split,
    train: &Split,
    seed: u64,
) -> Result<Setting, Box<dyn std::error::Error>> {
    let mut rng = ChaCha20Rng::seed_from_u64(seed);
    let mut tidx: Vec<usize> = (0..train.labels.len()).collect();
    tidx.shuffle(&mut rng);
    let per_class = args.anchors.div_ceil(10);
    let mut taken = [0usize; 10];
    let (aidx, rest): (Vec<usize>, Vec<usize>) = tidx.into_iter().partition(|&i| {
        let c = train.labels[i] as usize;
        taken[c] += 1;
        taken[c] <= per_class
    });
    let aidx: Vec<usize> = aidx.into_iter().take(args.anchors).collect();
    let (split, mut gidx) = match args.split {
        EvalSplit::Test => {
            let mut g: Vec<usize> = (0..test.labels.len()).collect();
            g.shuffle(&mut rng);
            (test, g)
        }
        EvalSplit::Train => (train, rest),
    };
    gidx.truncate(args.gallery.min(gidx.len()));
    let (gallery_raw, predicted) = featurize(model, args.features, split, &gidx);
    let gallery = normalize_rows(&gallery_raw, "gallery")?;
    let (anchors, _) = featurize(model, args.features, train, &aidx);
    let labels: Vec<u32> = gidx.iter().map(|&i| split.labels[i] as u32).collect();
    let anchor_labels: Vec<u32> = aidx.iter().map(|&i| train.labels[i] as u32).collect();
    let gallery_rows = gallery_rows(&gallery);
    let nq = args.queries.min(gidx.len());
    let truth = (0..nq)
        .into_par_iter()
        .map(|q| {
            let mut r = full_ranking(&gallery_rows, &gallery_rows[q], Some(q));
            r.truncate(args.k);
            r
        })
        .collect();
    Ok(Setting {
        gallery,
        gallery_rows,
        labels,
        predicted,
        anchors,
        anchor_labels,
        truth,
    })
}

/// Mean metrics over the queries, given each query's full ranking (itself excluded).
pub(super) fn score(
    s: &Setting,
    k: usize,
    rank: impl Fn(usize) -> Result<Vec<usize>, shared::Error> + Sync,
) -> Result<Triple, shared::Error> {
    let per: Vec<Triple> = (0..s.truth.len())
        .into_par_iter()
        .map(|q| {
            let ranking = rank(q)?;
            let ranked: Vec<u32> = ranking.iter().map(|&i| s.labels[i]).collect();
            let relevant = s.labels.iter().filter(|&&l| l == s.labels[q]).count() - 1;
            Ok([
                recall_at_k(&ranked, s.labels[q], k),
                average_precision(&ranked, s.labels[q], relevant),
                overlap(&ranking[..k.min(ranking.len())], &s.truth[q]),
            ])
        })
        .collect::<Result<_, shared::Error>>()?;
    let col = |j: usize| mean(&per.iter().map(|t| t[j]).collect::<Vec<_>>());
    Ok([col(0), col(1), col(2)])
}
