//! Client-side privatization: n = 1,010 rows (1 query + 9 dummies + 1,000 anchors), k = 2,
//! T = 5, d ∈ {64, 784}. "cold" includes building the anchor kernel (first search in a
//! session); "warm" reuses it (the anchors are public and fixed, so the client caches them).

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use paper::privatemail::{privatize, Anchors};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha20Rng;
use shared::{DMatrix, Params};

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("privatize_n1010_k2_T5");
    group.sample_size(20);
    for d in [64usize, 784] {
        let mut rng = ChaCha20Rng::seed_from_u64(1);
        let feats = DMatrix::from_fn(1000, d, |_, _| rng.random::<f64>());
        let labels: Vec<u32> = (0..1000).map(|i| (i % 10) as u32).collect();
        let query: Vec<f64> = (0..d).map(|_| rng.random::<f64>()).collect();
        let mut params = Params::default();
        params.smlq.iterations = 5;
        let anchors = Anchors::new(&feats, &labels, &params.smlq).unwrap();
        group.bench_with_input(BenchmarkId::new("warm", d), &d, |b, _| {
            b.iter(|| privatize(&query, 3, &anchors, &params, &mut rng).unwrap())
        });
        group.bench_with_input(BenchmarkId::new("cold", d), &d, |b, _| {
            b.iter(|| {
                let anchors = Anchors::new(&feats, &labels, &params.smlq).unwrap();
                privatize(&query, 3, &anchors, &params, &mut rng).unwrap()
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
