//! On-device model inference for one 28×28 image (native). The wasm figure comes from the
//! browser benchmark of the browser-client issue.

use criterion::{criterion_group, criterion_main, Criterion};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use shared::embed::model::{Model, Weights, PIXELS};

fn bench(c: &mut Criterion) {
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    let mut w = Weights::zeros();
    for t in w.tensors_mut() {
        t.iter_mut().for_each(|v| *v = rng.random::<f32>() - 0.5);
    }
    let model = Model { w };
    let img: Vec<u8> = (0..PIXELS).map(|_| rng.random()).collect();
    c.bench_function("model_infer_28x28", |b| {
        b.iter(|| model.infer(&img).unwrap())
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
