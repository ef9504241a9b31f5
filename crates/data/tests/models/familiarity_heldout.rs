//! The familiarity check (`embed::ood`) on held-out sets it was never fitted or calibrated
//! on: 480 generated non-clothing images of eight kinds (`data::not_clothing`) and 480
//! clothing photos — Fashion-MNIST test images as they are (the gallery's own kind), rendered
//! as photos people take (`data::photos::Shot::random`), and light garments on light
//! backgrounds. Per-kind rates are printed; docs/model.md records them.
//!
//! The target (#61, point 4) is at least 0.95 of non-clothing flagged with at most 0.02
//! of clothing flagged. The check (`embed::ood::assess`: the score and the photo's own
//! statistics, `embed::photo::Scene`) meets the clothing side and not the non-clothing side
//! (docs/model.md, "Familiarity on held-out kinds": 0.773 and 0.015 on this sample at the
//! commit recorded there); this test asserts the clothing target and what holds of the other,
//! so a change that makes the check worse on these sets fails, and prints the gap.

use data::assets::QUERY_WEIGHTS;
use data::fashion::{balanced_anchors, load_split, Split, DEFAULT_DIR};
use data::not_clothing::{generate, KINDS};
use data::photos::{render, Shot};
use embed::model::Model;
use embed::ood::{
    assess, fit, look, scene_unlike_a_product, Reference, MAX_EDGE_SHARE, MAX_RING_DIFFERS,
    MIN_BOX_FILLED, MIN_LARGEST_PART,
};
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

/// What the client decides of a photo: flagged (warned about or refused), its score, and the
/// photo's own statistics (`embed::photo::Scene`, as shares) where it has them.
struct Decision {
    flagged: bool,
    score: f32,
    photo: Option<[f32; 4]>,
}

fn decide(model: &Model, reference: &Reference, rgba: &[u8], w: usize, h: usize) -> Decision {
    match look(rgba, w, h).unwrap() {
        Err(_) => Decision {
            flagged: true,
            score: f32::INFINITY,
            photo: None,
        },
        Ok(framing) => {
            let (inf, layers) = model.infer_with_layer_means(&framing.pixels).unwrap();
            let f = assess(&framing, &inf.features, &layers, reference).unwrap();
            Decision {
                flagged: f.unfamiliar,
                score: f.score,
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

fn report(name: &str, decisions: &[Decision]) -> usize {
    let n = decisions.iter().filter(|d| d.flagged).count();
    let mut scores: Vec<f32> = decisions.iter().map(|d| d.score).collect();
    scores.sort_by(f32::total_cmp);
    let median = |k: usize| {
        let mut v: Vec<f32> = decisions
            .iter()
            .filter_map(|d| d.photo.map(|p| p[k]))
            .collect();
        v.sort_by(f32::total_cmp);
        v.get(v.len() / 2).copied().unwrap_or(f32::NAN)
    };
    println!(
        "{name:>36}: flagged {n:>3}/{}  score min {:.2} median {:.2} max {:.2}  \
         photo: ring differs {:.3}, box filled {:.3}, largest part {:.3}, edge {:.3}",
        decisions.len(),
        scores[0],
        scores[scores.len() / 2],
        scores[scores.len() - 1],
        median(0),
        median(1),
        median(2),
        median(3)
    );
    n
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
        let decisions: Vec<Decision> = (0..PER_KIND as u64)
            .map(|seed| {
                let img = generate(kind, seed);
                decide(&model, &reference, &img.rgba, img.width, img.height)
            })
            .collect();
        non += report(name, &decisions);
    }
    let mut rng = ChaCha8Rng::seed_from_u64(6104);
    let grey = |px: &[u8]| -> Vec<u8> { px.iter().flat_map(|&v| [v, v, v, 255]).collect() };
    let parts = [
        "Fashion-MNIST test images",
        "family photos",
        "light garments on light backgrounds",
    ];
    let mut clothing = 0;
    for (part, name) in parts.iter().enumerate() {
        let decisions: Vec<Decision> = (0..PER_PART)
            .map(|k| {
                // Test images 5,000.. (the first 2,000 are the default gallery; any is the
                // gallery's kind), a different stretch for each part.
                let img = test.images.image(5000 + part * PER_PART + k);
                if part == 0 {
                    return decide(&model, &reference, &grey(img), 28, 28);
                }
                let side = rng.random_range(112..=400);
                let (img, shot) = if part == 1 {
                    (img.to_vec(), Shot::random(side, &mut rng))
                } else {
                    let faint = img.iter().map(|&v| v / rng.random_range(2..=3)).collect();
                    let shot = Shot {
                        background: rng.random_range(225..=250),
                        ..Shot::random(side, &mut rng)
                    };
                    (faint, shot)
                };
                let photo = render(&img, &shot, &mut rng);
                decide(&model, &reference, &photo, side, side)
            })
            .collect();
        clothing += report(name, &decisions);
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
    // The clothing side of the target holds. Of the non-clothing side what holds today (not
    // the target): three in four flagged (371 of 480); a binomial sample of 480 at 0.773 has a
    // standard deviation of 0.019, so 0.73 is two below.
    assert!(
        clothing_rate <= TARGET_CLOTHING,
        "clothing flagged {clothing_rate:.3}"
    );
    assert!(non_rate >= 0.73, "non-clothing flagged {non_rate:.3}");
}

/// An opaque RGBA image of `w × h` from a colour function.
fn rgba(w: usize, h: usize, f: impl Fn(usize, usize) -> [u8; 3]) -> Vec<u8> {
    (0..w * h)
        .flat_map(|i| {
            let [r, g, b] = f(i % w, i / w);
            [r, g, b, 255]
        })
        .collect()
}

/// A garment-like photo: a dark rounded box on a light background, with mild noise.
fn product(w: usize, h: usize) -> Vec<u8> {
    rgba(w, h, |x, y| {
        let (u, v) = (x as f32 / w as f32 - 0.5, y as f32 / h as f32 - 0.5);
        let n = ((x * 7919 + y * 104_729) % 9) as u8;
        if u.abs() < 0.3 && v.abs() < 0.35 && (u * u + v * v) < 0.15 {
            [60 + n, 40 + n, 50 + n]
        } else {
            [236 + n, 236 + n, 236 + n]
        }
    })
}

/// A product photo's own statistics are a product's; a page of text, a horizon and a line
/// drawing are not, each by its own statistic; a 28×28 image has none.
#[test]
fn the_photos_own_statistics_tell_a_scene_from_a_product() {
    let scene = |rgba: &[u8], w: usize, h: usize| embed::photo::analyse(rgba, w, h).unwrap().scene;
    let p = scene(&product(112, 112), 112, 112).unwrap();
    assert!(!scene_unlike_a_product(&p), "{p:?}");
    assert_eq!(scene(&product(28, 28), 28, 28), None);
    // Lines of short dark dashes on white: many small parts, little of the box filled.
    let text = rgba(200, 160, |x, y| {
        if (20..140).contains(&y) && y % 12 < 3 && (10..190).contains(&x) && x % 9 < 5 {
            [20, 20, 20]
        } else {
            [245, 245, 245]
        }
    });
    let t = scene(&text, 200, 160).unwrap();
    assert!(t.largest_part < MIN_LARGEST_PART, "{t:?}");
    assert!(scene_unlike_a_product(&t));
    // A horizon: sky above, ground below, so half the border differs from its median.
    let horizon = rgba(200, 160, |_, y| {
        if y < 70 {
            [150, 190, 240]
        } else {
            [70, 120, 40]
        }
    });
    let h = scene(&horizon, 200, 160).unwrap();
    assert!(h.ring_differs > MAX_RING_DIFFERS, "{h:?}");
    // A drawn outline: all edge, little of its box filled.
    let outline = rgba(160, 160, |x, y| {
        let d = ((x as f32 - 80.0).hypot(y as f32 - 80.0) - 50.0).abs();
        if d < 1.5 {
            [10, 10, 10]
        } else {
            [250, 250, 250]
        }
    });
    let o = scene(&outline, 160, 160).unwrap();
    assert!(
        o.box_filled < MIN_BOX_FILLED && o.edge_share > MAX_EDGE_SHARE,
        "{o:?}"
    );
}

/// Each held-out kind is a pure function of its seed, at a camera-like size, with something
/// drawn in it, and two seeds give two images.
#[test]
fn each_held_out_kind_is_deterministic_sized_and_drawn() {
    for (kind, name) in KINDS.iter().enumerate() {
        for seed in 0..3 {
            let a = generate(kind, seed);
            assert_eq!(a, generate(kind, seed), "{name}");
            assert!((200..=640).contains(&a.width) && (200..=640).contains(&a.height));
            assert_eq!(a.rgba.len(), a.width * a.height * 4);
            // Something is drawn: the green levels spread well beyond the noise.
            let green: Vec<u8> = a.rgba.chunks_exact(4).map(|p| p[1]).collect();
            let (lo, hi) = (green.iter().min().unwrap(), green.iter().max().unwrap());
            assert!(hi - lo > 60, "{name} {seed}: {lo}..{hi}");
        }
        assert_ne!(generate(kind, 0), generate(kind, 1), "{name}");
    }
}
