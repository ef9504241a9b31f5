//! On-device model inference for one 28×28 image and for 64 one by one against one batch, and
//! the photo pipeline on a tilted photo at
//! the page's largest size (1,024 pixels: `web/photo.js` scales larger photos down) and at
//! 112 (native). The wasm figure comes from the browser benchmark of the browser-client issue.

use criterion::{criterion_group, criterion_main, Criterion};
use embed::model::{Model, Weights, PIXELS};
use embed::photo::to_model_input;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// A `side`-pixel photo: a dark rectangle (60 % by 30 % of the photo) turned 7°, on white.
fn tilted_photo(side: usize) -> Vec<u8> {
    let (s, c) = 7f64.to_radians().sin_cos();
    let mut out = Vec::with_capacity(side * side * 4);
    for y in 0..side {
        for x in 0..side {
            let (px, py) = (
                (x as f64 + 0.5) / side as f64 - 0.5,
                (y as f64 + 0.5) / side as f64 - 0.5,
            );
            let (u, v) = (c * px + s * py, -s * px + c * py);
            let g = if u.abs() < 0.15 && v.abs() < 0.3 {
                40
            } else {
                255
            };
            out.extend_from_slice(&[g, g, g, 255]);
        }
    }
    out
}

fn bench(c: &mut Criterion) {
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    let mut w = Weights::zeros(embed::model::Arch::SMALL);
    for t in w.tensors_mut() {
        t.iter_mut().for_each(|v| *v = rng.random::<f32>() - 0.5);
    }
    let model = Model { w };
    let img: Vec<u8> = (0..PIXELS).map(|_| rng.random()).collect();
    c.bench_function("model_infer_28x28", |b| {
        b.iter(|| model.infer(&img).unwrap())
    });
    // Gallery features: 64 images one at a time against one `infer_batch` pass (eight a SIMD
    // pass; bit-identical, checked by the model's tests).
    let batch: Vec<Vec<u8>> = (0..64)
        .map(|_| (0..PIXELS).map(|_| rng.random()).collect())
        .collect();
    let refs: Vec<&[u8]> = batch.iter().map(|v| v.as_slice()).collect();
    c.bench_function("model_infer_64_one_by_one", |b| {
        b.iter(|| {
            refs.iter()
                .map(|px| model.infer(px).unwrap())
                .collect::<Vec<_>>()
        })
    });
    c.bench_function("model_infer_batch_64", |b| {
        b.iter(|| model.infer_batch(&refs).unwrap())
    });
    for side in [112, 1024] {
        let photo = tilted_photo(side);
        c.bench_function(&format!("photo_pipeline_{side}px_tilted"), |b| {
            b.iter(|| to_model_input(&photo, side, side).unwrap())
        });
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
