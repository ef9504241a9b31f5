//! The committed query model on photos through the client's pipeline (`embed::photo`),
//! against the gallery model's features of the gallery, and its out-of-distribution check
//! (`embed::ood`), on a small fixed sample so a regression cannot pass silently. The full figures come from `eval --photos`
//! (`docs/eval/photos.md`).

use data::assets::{MODEL_WEIGHTS, QUERY_WEIGHTS};
use data::fashion::{balanced_anchors, load_split, reserved_train, Split, DEFAULT_DIR};
use data::photos::{render, Shot};
use embed::model::Model;
use embed::ood::{assess, FamiliarityModel};
use embed::photo::to_model_input;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const SIDE: usize = 112;

fn splits() -> (Split, Split) {
    let dir = std::path::Path::new(DEFAULT_DIR);
    (
        load_split(dir, "t10k").unwrap(),
        load_split(dir, "train").unwrap(),
    )
}

fn top8(gallery: &[Vec<f32>], q: &[f32]) -> Vec<usize> {
    let mut s: Vec<(f32, usize)> = gallery
        .iter()
        .enumerate()
        .map(|(j, g)| (g.iter().zip(q).map(|(a, b)| a * b).sum::<f32>(), j))
        .collect();
    s.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    s[..8].iter().map(|x| x.1).collect()
}

/// The model a photo is queried with (`weights`), the training split, the first 2,000 test
/// images' features under the gallery model (the gallery) and the first `n` held-out training
/// images (outside the anchors).
fn setup_with(weights: &[u8], n: usize) -> (Model, Split, Vec<Vec<f32>>, Vec<usize>) {
    let model = Model::from_bytes(weights).unwrap();
    let gallery_model = Model::from_bytes(MODEL_WEIGHTS).unwrap();
    let (test, train) = splits();
    let anchors = balanced_anchors(&train, 1000);
    let gallery: Vec<Vec<f32>> = (0..2000)
        .map(|i| gallery_model.infer(test.images.image(i)).unwrap().features)
        .collect();
    let held: Vec<usize> = reserved_train(train.labels.len(), &anchors)
        .into_iter()
        .take(n)
        .collect();
    (model, train, gallery, held)
}

/// [`setup_with`] the committed query model.
fn neighbours_setup(n: usize) -> (Model, Split, Vec<Vec<f32>>, Vec<usize>) {
    setup_with(QUERY_WEIGHTS, n)
}

/// Held-out photos on an off-white background find (nearly) the same exact neighbours as on
/// white, and keep their class.
#[test]
fn off_white_backgrounds_keep_the_neighbours() {
    let (model, train, gallery, held) = neighbours_setup(60);
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    let (mut shared_hits, mut same_class) = (0, 0);
    for &i in &held {
        let inf = |bg: u8, rng: &mut ChaCha8Rng| {
            let shot = Shot {
                background: bg,
                ..Shot::clean(SIDE)
            };
            let photo = render(train.images.image(i), &shot, rng);
            model
                .infer_photo(&to_model_input(&photo, SIDE, SIDE).unwrap())
                .unwrap()
        };
        let (white, off) = (inf(255, &mut rng), inf(235, &mut rng));
        let (a, b) = (top8(&gallery, &white.search), top8(&gallery, &off.search));
        shared_hits += a.iter().filter(|x| b.contains(x)).count();
        same_class += (white.inference.label == off.inference.label) as usize;
    }
    let agreement = shared_hits as f64 / (8 * held.len()) as f64;
    println!(
        "background 235: top-8 agreement {agreement:.3}, same class {same_class}/{}",
        held.len()
    );
    assert!(agreement >= 0.9, "top-8 agreement {agreement}");
    assert!(same_class >= held.len() - 2, "same class {same_class}");
}

/// The share of the exact top 8 over `gallery` that each held-out photo taken as `shot(k)` (k:
/// its place in `held`) shares with the same photo clean.
fn agreement_with_clean(
    (model, train, gallery, held): &(Model, Split, Vec<Vec<f32>>, Vec<usize>),
    seed: u64,
    shot: impl Fn(usize) -> Shot,
) -> f64 {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut shared_hits = 0;
    for (k, &i) in held.iter().enumerate() {
        let mut features = |shot: &Shot| {
            let photo = render(train.images.image(i), shot, &mut rng);
            let pixels = to_model_input(&photo, SIDE, SIDE).unwrap();
            model.search_features(&pixels).unwrap()
        };
        let (clean, taken) = (features(&Shot::clean(SIDE)), features(&shot(k)));
        let a = top8(gallery, &clean);
        shared_hits += top8(gallery, &taken)
            .iter()
            .filter(|x| a.contains(x))
            .count();
    }
    shared_hits as f64 / (8 * held.len()) as f64
}

/// Held-out photos turned 10° either way find more of the same exact neighbours as upright,
/// now that the photo pipeline turns them back at the photo's resolution (on this sample
/// 0.861 with the query model's search features, against 0.650 when the 28×28 input was
/// turned instead).
#[test]
fn tilted_photos_keep_the_neighbours() {
    let setup = neighbours_setup(100);
    let agreement = agreement_with_clean(&setup, 5, |k| Shot {
        degrees: if k % 2 == 0 { 10.0 } else { -10.0 },
        ..Shot::clean(SIDE)
    });
    println!("rotation ±10°: top-8 agreement {agreement:.3}");
    assert!(agreement >= 0.7, "top-8 agreement {agreement}");
}

/// Held-out garments (T-shirts, pullovers, dresses, coats, shirts) photographed turned 10°
/// either way reach the model upright as their level photo does: the principal axis of the
/// model's input (before the model's own step) within 1° of the level photo's. A turn can take
/// an axis past the 12° where the pipeline levels a base instead of turning the axis
/// (`photo_turn`); a garment's base is its hem, which the framing puts in the input's last row
/// (`embed::base`). Pure pipeline, no model. On this sample 0.953 of them (0.887 with
/// the pixel's middle plus the level below as the base's depth, which read a hem in the last
/// row as level).
#[test]
fn tilted_garments_are_turned_back() {
    let (_, train) = splits();
    let anchors = balanced_anchors(&train, 1000);
    let garments: Vec<usize> = reserved_train(train.labels.len(), &anchors)
        .into_iter()
        .filter(|&i| [0, 2, 3, 4, 6].contains(&train.labels[i]))
        .take(300)
        .collect();
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    let axis = |i: usize, degrees: f32, rng: &mut ChaCha8Rng| {
        let shot = Shot {
            degrees,
            ..Shot::clean(SIDE)
        };
        let photo = render(train.images.image(i), &shot, rng);
        let pixels = embed::photo::to_model_input(&photo, SIDE, SIDE).unwrap();
        embed::upright::orientation(&pixels)
            .unwrap()
            .offset
            .to_degrees()
    };
    let upright = garments
        .iter()
        .enumerate()
        .filter(|&(k, &i)| {
            let level = axis(i, 0.0, &mut rng);
            let turned = axis(i, if k % 2 == 0 { 10.0 } else { -10.0 }, &mut rng);
            (turned - level).abs() < 1.0
        })
        .count() as f64
        / garments.len() as f64;
    println!("garments turned ±10°: {upright:.3} upright as their level photo");
    assert!(upright >= 0.93, "{upright}");
}

/// Held-out photos of shoes (sandals, sneakers, ankle boots) turned 10° either way keep their
/// exact neighbours: their principal axis is a diagonal the model's own step keeps as the
/// shape, so the pipeline levels their base instead (`embed::base`). On this sample
/// 0.838 with the query model's search features; 0.635 when the pipeline turned them by the
/// model's step's rule (with a query model trained for that).
#[test]
fn tilted_shoes_keep_the_neighbours() {
    let (model, train, gallery, _) = neighbours_setup(0);
    let anchors = balanced_anchors(&train, 1000);
    let shoes: Vec<usize> = reserved_train(train.labels.len(), &anchors)
        .into_iter()
        .filter(|&i| [5, 7, 9].contains(&train.labels[i]))
        .take(90)
        .collect();
    let agreement = agreement_with_clean(&(model, train, gallery, shoes), 9, |k| Shot {
        degrees: if k % 2 == 0 { 10.0 } else { -10.0 },
        ..Shot::clean(SIDE)
    });
    println!("shoes, rotation ±10°: top-8 agreement {agreement:.3}");
    assert!(agreement >= 0.75, "top-8 agreement {agreement}");
}

/// Held-out photos with the object at 70 % of the frame, or with sensor noise, keep their
/// exact neighbours: the box's short side keeps its exact length (not rounded to whole model
/// pixels), the noise is removed by a knee that leaves the object's levels as they are, and
/// the box ignores the faint ramp at the object's edge (`PHOTO_MASK_FLOOR`). On this sample
/// 0.927 and 0.945 with the query model's search features, against 0.819 and 0.886 with the
/// short side rounded, the noise threshold subtracted and the dataset's floor.
#[test]
fn smaller_and_noisy_photos_keep_the_neighbours() {
    let setup = neighbours_setup(100);
    let smaller = agreement_with_clean(&setup, 6, |_| Shot {
        scale: 0.7,
        ..Shot::clean(SIDE)
    });
    let noisy = agreement_with_clean(&setup, 7, |_| Shot {
        noise: 5.0,
        ..Shot::clean(SIDE)
    });
    println!("scale 0.7: top-8 agreement {smaller:.3}; noise σ = 5: {noisy:.3}");
    assert!(smaller >= 0.87, "scale 0.7: top-8 agreement {smaller}");
    assert!(noisy >= 0.91, "noise σ = 5: top-8 agreement {noisy}");
}

/// Held-out photos under the whole family at once (background, shift, scale, rotation, noise:
/// `Shot::random`) keep more of their exact neighbours with the query model than with the
/// gallery model's own features: the query model is trained to put a photo where the gallery
/// model puts its clean image (on this sample, each searched with its search features over the
/// half-pixel views, `embed::views`: 0.873 against 0.853).
#[test]
fn the_query_model_keeps_a_family_photos_neighbours() {
    let family = |weights: &[u8]| {
        agreement_with_clean(&setup_with(weights, 100), 8, |k| {
            Shot::random(SIDE, &mut ChaCha8Rng::seed_from_u64(900 + k as u64))
        })
    };
    let (query, gallery) = (family(QUERY_WEIGHTS), family(MODEL_WEIGHTS));
    println!("whole family: top-8 agreement {query:.3} (the gallery model: {gallery:.3})");
    assert!(query >= gallery + 0.02, "{query} against {gallery}");
    assert!(query >= 0.8, "whole family: top-8 agreement {query}");
}

/// Noise and gradients are flagged; held-out clothing photos rarely are.
#[test]
fn non_clothing_is_flagged_and_clothing_is_not() {
    let (_, train) = splits();
    let (anchors, reference) = (
        balanced_anchors(&train, 1000),
        data::familiarity::reference(&train),
    );
    let mut rng = ChaCha8Rng::seed_from_u64(4);
    let flagged = |rgba: &[u8], side: usize| {
        let framing = embed::photo::analyse(rgba, side, side).unwrap();
        assess(&framing, &reference, FamiliarityModel::compiled())
            .unwrap()
            .unfamiliar
    };
    let mut odd = 0;
    for k in 0..40 {
        let img: Vec<u8> = if k % 2 == 0 {
            // Uniform colour noise.
            (0..64 * 64)
                .flat_map(|_| [rng.random(), rng.random(), rng.random(), 255])
                .collect()
        } else {
            // A linear gradient between two random greys, left to right.
            let (a, b): (f32, f32) = (rng.random_range(0.0..255.0), rng.random_range(0.0..255.0));
            (0..64 * 64)
                .flat_map(|i| {
                    let g = (a + (b - a) * (i % 64) as f32 / 63.0) as u8;
                    [g, g, g, 255]
                })
                .collect()
        };
        odd += flagged(&img, 64) as usize;
    }
    let held: Vec<usize> = reserved_train(train.labels.len(), &anchors)
        .into_iter()
        .take(200)
        .collect();
    let clothing = held
        .iter()
        .filter(|&&i| {
            let shot = Shot::random(SIDE, &mut rng);
            flagged(&render(train.images.image(i), &shot, &mut rng), SIDE)
        })
        .count();
    println!("non-clothing flagged {odd}/40, held-out clothing photos flagged {clothing}/200");
    assert!(odd >= 36, "non-clothing flagged {odd}/40");
    // The check flags about 1.5 % of its calibration photos (score and scene, `embed::ood`); 10
    // of 200 is far in the binomial's tail.
    assert!(clothing <= 10, "clothing flagged {clothing}/200");
}

/// Nothing to see is refused, clothing never is (`embed::ood::look`): not one of the 10,000
/// test images (the gallery's own, as 28×28 grey RGBA), nor of 600 held-out training images
/// photographed (200 each: the whole family, clean on white, and a light garment — its ink
/// at a third — on a light background of 235–250), is refused; noise and solid colours are.
#[test]
fn nothing_to_see_is_refused_and_clothing_never_is() {
    use embed::ood::{look, NothingToSee};
    let (test, train) = splits();
    let grey_rgba = |px: &[u8]| -> Vec<u8> { px.iter().flat_map(|&v| [v, v, v, 255]).collect() };
    let refused: Vec<(usize, NothingToSee)> = (0..test.labels.len())
        .filter_map(|i| {
            look(&grey_rgba(test.images.image(i)), 28, 28)
                .unwrap()
                .err()
                .map(|why| (i, why))
        })
        .collect();
    assert!(refused.is_empty(), "test images refused: {refused:?}");
    let anchors = balanced_anchors(&train, 1000);
    let held: Vec<usize> = reserved_train(train.labels.len(), &anchors)
        .into_iter()
        .take(200)
        .collect();
    let mut rng = ChaCha8Rng::seed_from_u64(61);
    for (what, k) in [("whole family", 0), ("clean", 1), ("light garment", 2)] {
        let refused: Vec<(usize, NothingToSee)> = held
            .iter()
            .filter_map(|&i| {
                let img: Vec<u8> = if k == 2 {
                    train.images.image(i).iter().map(|&v| v / 3).collect()
                } else {
                    train.images.image(i).to_vec()
                };
                let shot = match k {
                    0 => Shot::random(SIDE, &mut rng),
                    1 => Shot::clean(SIDE),
                    _ => Shot {
                        background: rng.random_range(235..=250),
                        ..Shot::random(SIDE, &mut rng)
                    },
                };
                look(&render(&img, &shot, &mut rng), SIDE, SIDE)
                    .unwrap()
                    .err()
                    .map(|why| (i, why))
            })
            .collect();
        assert!(refused.is_empty(), "{what}: refused {refused:?}");
    }
    for side in [28, 64, SIDE] {
        let noise: Vec<u8> = (0..side * side)
            .flat_map(|_| [rng.random(), rng.random(), rng.random(), 255])
            .collect();
        assert_eq!(
            look(&noise, side, side).unwrap().err(),
            Some(NothingToSee::Noise)
        );
        let c: [u8; 3] = rng.random();
        let solid: Vec<u8> = (0..side * side)
            .flat_map(|_| [c[0], c[1], c[2], 255])
            .collect();
        assert_eq!(
            look(&solid, side, side).unwrap().err(),
            Some(NothingToSee::SolidColour)
        );
    }
}

/// Photos as people take them (issue 61, point 6): light falling unevenly across the frame
/// and a coloured garment keep the clean photo's exact top 8 (`embed::light`,
/// `embed::photo::colour_axis`; the held-out figures, on 1,000 photos a condition, are
/// `eval --photos`'). On this sample of 100 each keeps at least the 0.9. (A soft
/// shadow is not divided out: `embed::light`'s module note.)
#[test]
fn uneven_light_and_colour_keep_the_neighbours() {
    let setup = neighbours_setup(100);
    let mut got = Vec::new();
    for (name, seed, shot) in [
        (
            "uneven light",
            21,
            Shot::uneven_light as fn(usize, &mut ChaCha8Rng) -> Shot,
        ),
        ("coloured garment", 23, Shot::coloured),
    ] {
        let mut draws = ChaCha8Rng::seed_from_u64(seed);
        let shots: Vec<Shot> = (0..setup.3.len()).map(|_| shot(SIDE, &mut draws)).collect();
        let agreement = agreement_with_clean(&setup, seed, |k| shots[k]);
        println!("{name}: top-8 agreement {agreement:.3}");
        got.push((name, agreement));
    }
    for (name, agreement) in got {
        assert!(agreement >= 0.9, "{name}: top-8 agreement {agreement}");
    }
}

/// A garment cut by the frame's edge by 10–15 % is said to be (`embed::cut`); one framed
/// tightly (the clean photo: from edge to edge, as the dataset frames it) or with a margin is
/// not. Pure pipeline, no model, 300 held-out images.
#[test]
fn a_garment_cut_by_the_frame_is_said_to_be() {
    let (_, train) = splits();
    let anchors = balanced_anchors(&train, 1000);
    let held: Vec<usize> = reserved_train(train.labels.len(), &anchors)
        .into_iter()
        .take(300)
        .collect();
    let mut rng = ChaCha8Rng::seed_from_u64(31);
    let (mut cut, mut tight, mut margin, mut reaching) = (0, 0, 0, 0);
    for &i in &held {
        let img = train.images.image(i);
        let said = |shot: &Shot, rng: &mut ChaCha8Rng| {
            let photo = render(img, shot, rng);
            embed::photo::analyse(&photo, SIDE, SIDE).unwrap().cut_off as usize
        };
        // The light of a clean photo and of one with a margin is even: left alone.
        for shot in [
            Shot::clean(SIDE),
            Shot {
                scale: 0.8,
                ..Shot::clean(SIDE)
            },
        ] {
            let f = embed::photo::analyse(&render(img, &shot, &mut rng), SIDE, SIDE).unwrap();
            assert!(!f.light_evened, "image {i}: {shot:?}");
        }
        let shot = Shot::cut(img, SIDE, &mut rng);
        cut += said(&shot, &mut rng);
        tight += said(&Shot::clean(SIDE), &mut rng);
        let scale = rng.random_range(0.7..=0.9);
        margin += said(
            &Shot {
                scale,
                ..Shot::clean(SIDE)
            },
            &mut rng,
        );
        // Whole, shifted within its margin: often reaching an edge, which its box touches.
        let m = (1.0 - scale) / 2.0;
        let shift = (rng.random_range(-m..=m), rng.random_range(-m..=m));
        reaching += said(
            &Shot {
                scale,
                shift,
                ..Shot::clean(SIDE)
            },
            &mut rng,
        );
    }
    let n = held.len() as f64;
    let (cut, tight, margin, reaching) = (
        cut as f64 / n,
        tight as f64 / n,
        margin as f64 / n,
        reaching as f64 / n,
    );
    println!(
        "cut off said: cut {cut:.3}, framed tightly {tight:.3}, with a margin {margin:.3}, \
         whole and reaching an edge {reaching:.3}"
    );
    assert!(cut >= 0.9, "cut photos said to be cut: {cut}");
    assert!(tight <= 0.05 && margin <= 0.02, "{tight} {margin}");
    // The box alone said so for 0.120 of them (`embed::cut::EDGE_STRENGTH`).
    assert!(
        reaching <= 0.03,
        "whole garments said to be cut: {reaching}"
    );
}

/// The share of the gallery model's own exact top 8 for each held-out image (its features of
/// the dataset image itself, over `gallery`) that the same image photographed as `shot(k)` finds
/// with `model`'s search features: how many of the true neighbours a photo's search returns.
fn shared_with_gallery_model(
    (model, train, gallery, held): &(Model, Split, Vec<Vec<f32>>, Vec<usize>),
    seed: u64,
    shot: impl Fn(usize) -> Shot,
) -> f64 {
    let gallery_model = Model::from_bytes(MODEL_WEIGHTS).unwrap();
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut shared_hits = 0;
    for (k, &i) in held.iter().enumerate() {
        let own = top8(
            gallery,
            &gallery_model.infer(train.images.image(i)).unwrap().features,
        );
        let photo = render(train.images.image(i), &shot(k), &mut rng);
        let pixels = to_model_input(&photo, SIDE, SIDE).unwrap();
        let found = top8(gallery, &model.search_features(&pixels).unwrap());
        shared_hits += found.iter().filter(|x| own.contains(x)).count();
    }
    shared_hits as f64 / (8 * held.len()) as f64
}

/// Held-out photos find the gallery's true neighbours, not just their clean photo's: the
/// committed query model's search returns at least 0.78 of the gallery model's own top 8 for
/// the image on clean photos and 0.75 under the whole family (`Shot::random`), 200 photos each.
/// A query model can keep a photo's top 8 under shadows and light while drifting from the
/// gallery's geometry, which agreement with the clean photo alone never sees: on this sample
/// the committed query model keeps 0.796 and 0.770, the gallery model itself 0.727 and 0.698,
/// and the query model fine-tuned on shadowed photos that `eval --photos` measured and was not
/// adopted (docs/model.md, "A query model trained on shadows") 0.759 and 0.738 (2026-12-07).
#[test]
fn photos_find_the_gallery_models_own_neighbours_of_the_image() {
    let setup = neighbours_setup(200);
    let clean = shared_with_gallery_model(&setup, 31, |_| Shot::clean(SIDE));
    let family = shared_with_gallery_model(&setup, 32, |k| {
        Shot::random(SIDE, &mut ChaCha8Rng::seed_from_u64(3100 + k as u64))
    });
    println!("the gallery model's top 8 found: clean {clean:.3}, whole family {family:.3}");
    assert!(clean >= 0.78, "clean photos: {clean}");
    assert!(family >= 0.75, "whole family: {family}");
}
