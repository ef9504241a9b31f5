//! The familiarity check measured on held-out sets it was never fitted or calibrated on (issue
//! 61, point 4), in one place for the models test (`familiarity_heldout`) and `eval --photos`:
//! [`non_clothing`] (60 images of each of [`crate::not_clothing::KINDS`]) and [`clothing`]
//! (160 test images in each of [`CLOTHING_PARTS`]), each image decided as a client decides
//! ([`decide`]: `embed::ood::look`, then `embed::ood::assess`).

use crate::fashion::{balanced_anchors, Split};
use crate::not_clothing::{generate, KINDS};
use crate::photos::{render, Shot};
use embed::ood::{assess, fit, look, FamiliarityModel, Reference};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rayon::prelude::*;

/// Non-clothing images per kind.
pub const PER_KIND: usize = 60;
/// Clothing images per part.
pub const PER_PART: usize = 160;
/// The held-out clothing's parts, in the order [`clothing`] gives them.
pub const CLOTHING_PARTS: [&str; 3] = [
    "Fashion-MNIST test images",
    "family photos",
    "light garments on light backgrounds",
];

/// The reference a server fits by default: `embed::ood::fit` on the familiarity model's
/// features and layer means of `balanced_anchors(train, 1000)`.
pub fn reference(train: &Split) -> Reference {
    let model = embed::ood::FamiliarityModel::compiled().model();
    let idx = balanced_anchors(train, 1000);
    let images: Vec<&[u8]> = idx.iter().map(|&i| train.images.image(i)).collect();
    let out = model
        .infer_batch_with_layer_means(&images)
        .expect("28×28 images");
    let flat: Vec<f32> = out.iter().flat_map(|o| o.0.features.clone()).collect();
    let layers: Vec<f32> = out.iter().flat_map(|o| o.1.clone()).collect();
    let labels: Vec<u32> = idx.iter().map(|&i| train.labels[i] as u32).collect();
    fit(
        &flat,
        &layers,
        &labels,
        flat.len() / idx.len(),
        model.w.arch.layer_dim(),
    )
    .expect("the anchors fit")
}

/// What the client decides of a photo: flagged (warned about or refused), its score, the
/// learned detector's output, and the photo's own statistics (`embed::photo::Scene`, as
/// shares) where it has them.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    pub flagged: bool,
    /// Refused as nothing to see (`embed::ood::look`).
    pub refused: bool,
    pub score: f32,
    pub detector: f32,
    pub photo: Option<[f32; 4]>,
}

/// The client's decision of an RGBA photo.
pub fn decide(reference: &Reference, rgba: &[u8], w: usize, h: usize) -> Decision {
    match look(rgba, w, h).expect("the photo's sizes") {
        Err(_) => Decision {
            flagged: true,
            refused: true,
            score: f32::INFINITY,
            detector: f32::INFINITY,
            photo: None,
        },
        Ok(framing) => {
            let f = assess(&framing, reference, FamiliarityModel::compiled()).expect("lengths");
            Decision {
                flagged: f.unfamiliar,
                refused: false,
                score: f.score,
                detector: f.detector,
                photo: framing.scene.map(|sc| {
                    [
                        sc.ring_differs,
                        sc.box_filled,
                        sc.largest_part,
                        sc.edge_share,
                    ]
                    .map(|t| f32::from(t) / 1000.0)
                }),
            }
        }
    }
}

/// The decisions on the held-out non-clothing, per kind ([`KINDS`]' order), [`PER_KIND`]
/// each (seeds `0..PER_KIND`).
pub fn non_clothing(reference: &Reference) -> Vec<Vec<Decision>> {
    (0..KINDS.len())
        .map(|kind| {
            (0..PER_KIND as u64)
                .into_par_iter()
                .map(|seed| {
                    let img = generate(kind, seed);
                    decide(reference, &img.rgba, img.width, img.height)
                })
                .collect()
        })
        .collect()
}

/// The decisions on the held-out clothing, per part ([`CLOTHING_PARTS`]), [`PER_PART`] each:
/// test images from 5,000 on (the first 2,000 are the default gallery; any is the gallery's
/// kind), a different stretch for each part — as they are (28×28), photographed
/// (`Shot::random`, 112–400 pixels), and light (ink at a half or a third) on light
/// backgrounds (225–250). One seeded stream, drawn in order.
pub fn clothing(reference: &Reference, test: &Split) -> Vec<Vec<Decision>> {
    let mut rng = ChaCha8Rng::seed_from_u64(6104);
    (0..CLOTHING_PARTS.len())
        .map(|part| {
            // Drawn in order (one stream), decided in parallel.
            let photos: Vec<(Vec<u8>, usize)> = (0..PER_PART)
                .map(|k| {
                    clothing_photo(
                        test.images.image(5000 + part * PER_PART + k),
                        part,
                        &mut rng,
                    )
                })
                .collect();
            photos
                .par_iter()
                .map(|(rgba, side)| decide(reference, rgba, *side, *side))
                .collect()
        })
        .collect()
}

/// Fashion-MNIST image `img` as clothing photo of `way` ([`CLOTHING_PARTS`]' order): as it is
/// (28×28), photographed (`Shot::random`, 112–400 pixels), or light (ink at a half or a third)
/// on a light background (225–250). RGBA and its side; the held-out set and the detector's
/// fitting draw their clothing with it, from their own images and seeds.
pub fn clothing_photo(img: &[u8], way: usize, rng: &mut impl Rng) -> (Vec<u8>, usize) {
    if way == 0 {
        return (img.iter().flat_map(|&v| [v, v, v, 255]).collect(), 28);
    }
    let side = rng.random_range(112..=400);
    let (img, shot) = if way == 1 {
        (img.to_vec(), Shot::random(side, rng))
    } else {
        let faint = img.iter().map(|&v| v / rng.random_range(2..=3)).collect();
        let shot = Shot {
            background: rng.random_range(225..=250),
            ..Shot::random(side, rng)
        };
        (faint, shot)
    };
    (render(&img, &shot, rng), side)
}

/// How many of `decisions` are flagged.
pub fn flagged(decisions: &[Decision]) -> usize {
    decisions.iter().filter(|d| d.flagged).count()
}
