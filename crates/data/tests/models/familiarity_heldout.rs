//! The familiarity check (`embed::ood`) on held-out sets it was never fitted or calibrated
//! on: 480 generated non-clothing images of eight kinds (`data::not_clothing`) and 480
//! clothing photos — Fashion-MNIST test images as they are (the gallery's own kind), rendered
//! as photos people take (`data::photos::Shot::random`), and light garments on light
//! backgrounds. Per-kind rates are printed; docs/model.md records them.
//!
//! The target (#61, point 4) is at least 0.95 of non-clothing flagged with at most 0.02
//! of clothing flagged. The check (`embed::ood::assess`: the score, the photo's own
//! statistics `embed::photo::Scene`, and the learned detector `embed::detector`, fitted on
//! clothing against `data::not_garments` — other code and seeds than these sets) is measured
//! here by `data::familiarity` (docs/model.md, "Familiarity on held-out kinds", records the
//! figures per kind with date and commit); this test asserts both sides of the target, so a
//! change that makes the check worse on these sets fails. (These 480 images have been looked
//! at while the check was built; docs/model.md gives further draws of the same kinds.)

use data::familiarity::{
    clothing, flagged, non_clothing, reference, Decision, CLOTHING_PARTS, PER_KIND, PER_PART,
};
use data::fashion::{load_split, DEFAULT_DIR};
use data::not_clothing::{generate, KINDS};
use embed::ood::MIN_LARGEST_PART;
use embed::ood::{scene_unlike_a_product, MAX_EDGE_SHARE, MAX_RING_DIFFERS, MIN_BOX_FILLED};

/// The target: at least this share of non-clothing flagged, at most this share of
/// clothing (what is measured: printed here, recorded in docs/model.md).
const TARGET_NON: f64 = 0.95;
const TARGET_CLOTHING: f64 = 0.02;

fn report(name: &str, decisions: &[Decision]) -> usize {
    let n = flagged(decisions);
    let median = |f: &dyn Fn(&Decision) -> Option<f32>| {
        let mut v: Vec<f32> = decisions.iter().filter_map(f).collect();
        v.sort_by(f32::total_cmp);
        v.get(v.len() / 2).copied().unwrap_or(f32::NAN)
    };
    println!(
        "{name:>36}: flagged {n:>3}/{}  median score {:.2}, detector {:.2}  \
         photo: ring differs {:.3}, box filled {:.3}, largest part {:.3}, edge {:.3}",
        decisions.len(),
        median(&|d| Some(d.score)),
        median(&|d| Some(d.detector)),
        median(&|d| d.photo.map(|p| p[0])),
        median(&|d| d.photo.map(|p| p[1])),
        median(&|d| d.photo.map(|p| p[2])),
        median(&|d| d.photo.map(|p| p[3])),
    );
    n
}

/// The rates on both held-out sets, per kind and per part (printed), with the target
/// asserted.
#[test]
fn held_out_rates_per_kind() {
    let dir = std::path::Path::new(DEFAULT_DIR);
    let (test, train) = (
        load_split(dir, "t10k").unwrap(),
        load_split(dir, "train").unwrap(),
    );
    let reference = reference(&train);
    let non: usize = non_clothing(&reference)
        .iter()
        .zip(KINDS)
        .map(|(d, name)| report(name, d))
        .sum();
    let clothes: usize = clothing(&reference, &test)
        .iter()
        .zip(CLOTHING_PARTS)
        .map(|(d, name)| report(name, d))
        .sum();
    let (non_rate, clothing_rate) = (
        non as f64 / (PER_KIND * KINDS.len()) as f64,
        clothes as f64 / (CLOTHING_PARTS.len() * PER_PART) as f64,
    );
    println!(
        "non-clothing flagged {non}/{} ({non_rate:.3}; target >= {TARGET_NON}), clothing \
         {clothes}/{} ({clothing_rate:.3}; target <= {TARGET_CLOTHING})",
        PER_KIND * KINDS.len(),
        CLOTHING_PARTS.len() * PER_PART
    );
    assert!(
        clothing_rate <= TARGET_CLOTHING,
        "clothing flagged {clothing_rate:.3}"
    );
    assert!(non_rate >= TARGET_NON, "non-clothing flagged {non_rate:.3}");
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
