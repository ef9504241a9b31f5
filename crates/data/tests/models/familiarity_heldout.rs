//! The familiarity check (`embed::ood`) on held-out sets it was never fitted or calibrated
//! on: 480 generated non-clothing images of eight kinds (`data::not_clothing`) and 480
//! clothing photos — Fashion-MNIST test images as they are (the gallery's own kind), rendered
//! as photos people take (`data::photos::Shot::random`), and light garments on light
//! backgrounds. Per-kind rates are printed; docs/model.md records them.
//!
//! The target (#61, point 4) is at least 0.95 of non-clothing flagged with at most 0.02
//! of clothing flagged. The deployed check does **not** meet it (docs/model.md, "Familiarity on
//! held-out kinds": 0.377 and 0.023 on this sample at the commit recorded there); this test
//! asserts what holds, so a change that makes the check worse on these sets fails, and prints
//! the gap to the target.

use data::assets::QUERY_WEIGHTS;
use data::fashion::{balanced_anchors, load_split, Split, DEFAULT_DIR};
use data::not_clothing::{generate, KINDS};
use data::photos::{render, Shot};
use embed::model::Model;
use embed::ood::{assess_input, fit, look, Reference};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// The target: the share of non-clothing flagged, at most this share of clothing.
const TARGET_NON: f64 = 0.95;
const TARGET_CLOTHING: f64 = 0.02;

/// Non-clothing images per kind.
const PER_KIND: usize = 60;
/// Clothing images per part (three parts).
const PER_PART: usize = 160;

fn reference(model: &Model, train: &Split) -> Reference {
    let idx = balanced_anchors(train, 1000);
    let images: Vec<&[u8]> = idx.iter().map(|&i| train.images.image(i)).collect();
    let out = model.infer_batch_with_layer_means(&images).unwrap();
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
    .unwrap()
}

/// Whether the client would warn about (or refuse) the photo, and its score.
fn flagged(model: &Model, reference: &Reference, rgba: &[u8], w: usize, h: usize) -> (bool, f32) {
    match look(rgba, w, h).unwrap() {
        Err(_) => (true, f32::INFINITY),
        Ok(framing) => {
            let (inf, layers) = model.infer_with_layer_means(&framing.pixels).unwrap();
            let f = assess_input(&framing.pixels, &inf.features, &layers, reference).unwrap();
            (f.unfamiliar, f.score)
        }
    }
}

/// The rates on both held-out sets, per kind and per part (printed), with what holds today
/// asserted.
#[test]
fn held_out_rates_per_kind() {
    let model = Model::from_bytes(QUERY_WEIGHTS).unwrap();
    let dir = std::path::Path::new(DEFAULT_DIR);
    let (test, train) = (
        load_split(dir, "t10k").unwrap(),
        load_split(dir, "train").unwrap(),
    );
    let reference = reference(&model, &train);
    let mut non = 0;
    for (kind, name) in KINDS.iter().enumerate() {
        let mut scores = Vec::new();
        let n = (0..PER_KIND as u64)
            .filter(|&seed| {
                let img = generate(kind, seed);
                let (f, s) = flagged(&model, &reference, &img.rgba, img.width, img.height);
                scores.push(s);
                f
            })
            .count();
        scores.sort_by(f32::total_cmp);
        println!(
            "{name:>17}: flagged {n}/{PER_KIND}  scores {:.2} {:.2} {:.2}",
            scores[0],
            scores[PER_KIND / 2],
            scores[PER_KIND - 1]
        );
        non += n;
    }
    let mut rng = ChaCha8Rng::seed_from_u64(6104);
    let grey = |px: &[u8]| -> Vec<u8> { px.iter().flat_map(|&v| [v, v, v, 255]).collect() };
    let mut clothing = 0;
    for part in 0..3 {
        let mut scores = Vec::new();
        let n = (0..PER_PART)
            .filter(|&k| {
                // Test images 5,000.. (the first 2,000 are the default gallery; any is the
                // gallery's kind), a different stretch for each part.
                let i = 5000 + part * PER_PART + k;
                let img = test.images.image(i);
                let (f, s) = match part {
                    0 => flagged(&model, &reference, &grey(img), 28, 28),
                    1 => {
                        let side = rng.random_range(112..=400);
                        let shot = Shot::random(side, &mut rng);
                        flagged(
                            &model,
                            &reference,
                            &render(img, &shot, &mut rng),
                            side,
                            side,
                        )
                    }
                    _ => {
                        let side = rng.random_range(112..=400);
                        let faint: Vec<u8> =
                            img.iter().map(|&v| v / rng.random_range(2..=3)).collect();
                        let shot = Shot {
                            background: rng.random_range(225..=250),
                            ..Shot::random(side, &mut rng)
                        };
                        flagged(
                            &model,
                            &reference,
                            &render(&faint, &shot, &mut rng),
                            side,
                            side,
                        )
                    }
                };
                scores.push(s);
                f
            })
            .count();
        scores.sort_by(f32::total_cmp);
        println!(
            "clothing part {part}: flagged {n}/{PER_PART}  scores {:.2} {:.2} {:.2}",
            scores[0],
            scores[PER_PART / 2],
            scores[PER_PART - 1]
        );
        clothing += n;
    }
    let (non_rate, clothing_rate) = (
        non as f64 / (PER_KIND * KINDS.len()) as f64,
        clothing as f64 / (3 * PER_PART) as f64,
    );
    println!(
        "non-clothing flagged {non}/{} ({non_rate:.3}; target >= {TARGET_NON}), clothing \
         {clothing}/{} ({clothing_rate:.3}; target <= {TARGET_CLOTHING})",
        PER_KIND * KINDS.len(),
        3 * PER_PART
    );
    // What holds today (not the target): more than a third of the held-out non-clothing is
    // flagged (181 of 480), and no more than 3 % of the clothing (11 of 480). A binomial
    // sample of 480 at 0.377 has a standard deviation of 0.022, so 0.33 is two below.
    assert!(non_rate >= 0.33, "non-clothing flagged {non_rate:.3}");
    assert!(clothing_rate <= 0.03, "clothing flagged {clothing_rate:.3}");
}
