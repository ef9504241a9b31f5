//! A small published gallery for tests, here and in the crates above (feature `fixture`):
//! 400 unit features in 40 tight clusters, published whole and at the default levels.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::partition::{build_level, gallery_neighbours, nearest_k};
use crate::publish::*;
use shared::api::PartitionDoc;

pub const N: usize = 400;
pub const DIM: usize = 8;
pub const T: usize = 3;

pub fn gallery() -> (Vec<u64>, Vec<u8>, Vec<f32>, Vec<u8>) {
    // 40 tight clusters, so blocks closed under neighbourhoods stay small.
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    let centres: Vec<f32> = (0..40 * DIM).map(|_| rng.random::<f32>() - 0.5).collect();
    let mut features: Vec<f32> = (0..N * DIM)
        .map(|i| centres[(i / DIM % 40) * DIM + i % DIM] + 0.02 * rng.random::<f32>())
        .collect();
    for r in features.chunks_mut(DIM) {
        let norm = r.iter().map(|x| x * x).sum::<f32>().sqrt();
        r.iter_mut().for_each(|x| *x /= norm);
    }
    let ids: Vec<u64> = (0..N as u64).map(|i| 1000 + i).collect();
    let labels: Vec<u8> = (0..N).map(|i| (i % 10) as u8).collect();
    let thumbs: Vec<u8> = (0..N * T * T).map(|i| i as u8).collect();
    (ids, labels, features, thumbs)
}

/// [`gallery`] as a view, with probes (its first 20 items) and their true top-k.
pub fn with_gallery<R>(f: impl FnOnce(&GalleryView<'_>, &[f32], &[Vec<u32>]) -> R) -> R {
    let (ids, labels, features, thumbs) = gallery();
    let g = GalleryView {
        ids: &ids,
        labels: &labels,
        features: &features,
        dim: DIM,
        thumbnails: Thumbnails::Packed(&thumbs),
        thumb_side: T,
    };
    let probes = &features[..20 * DIM];
    let truth: Vec<Vec<u32>> = probes
        .chunks(DIM)
        .map(|p| nearest_k(&features, DIM, p, COVERAGE_K))
        .collect();
    f(&g, probes, &truth)
}

/// A 400-item partition (whole level + the default levels): the document, every level's
/// block files, and the gallery features (ids are 1000 + index).
/// A 400-item partition's document, block files, centroids files and gallery features.
pub type Small = (PartitionDoc, Vec<Vec<Vec<u8>>>, Vec<Vec<u8>>, Vec<f32>);

pub fn small_partition() -> Small {
    with_gallery(|g, probes, truth| {
        let nb = gallery_neighbours(g.features, DIM, DEFAULT_CLOSURE as usize, 0..N, None).unwrap();
        let mut levels = vec![publish_whole(g).unwrap()];
        for spec in default_specs(N) {
            let level = build_level(g.features, DIM, spec, 1, Some(&nb)).unwrap();
            levels.push(publish_level(g, &level, probes, truth).unwrap());
        }
        let files = levels.iter().map(|l| l.files.clone()).collect();
        let cents = levels.iter().map(|l| l.centroids.clone()).collect();
        let docs = levels.into_iter().map(|l| l.doc).collect();
        (
            document(docs, g, "/x".into(), 0.3, true, 20),
            files,
            cents,
            g.features.to_vec(),
        )
    })
}
