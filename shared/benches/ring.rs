//! The ring layer at the deployed degree N = 4,096: one transform, one key switch (the unit of
//! packing's cost), and packing N LWE ciphertexts (N − 1 switches) — whole, and the online
//! half a server runs per query once it holds the plan for fixed `a` parts.

use criterion::{criterion_group, criterion_main, Criterion};
use rand::SeedableRng;
use rand_chacha::ChaCha20Rng;
use shared::pir::ring::pack::{lwe_encrypt, lwe_to_rlwe, pack, PackingMasks, PackingPlan};
use shared::pir::ring::rlwe::{encrypt, AutomorphismKey, Gadget, Ring, SecretKey};
use shared::pir::ring::N;

fn bench(c: &mut Criterion) {
    let ring = Ring::new(N);
    let mut rng = ChaCha20Rng::seed_from_u64(1);
    let sk = SecretKey::generate(&ring, &mut rng);
    let mut group = c.benchmark_group("ring_n4096");
    group.sample_size(10);
    let poly: Vec<u64> = sk.coeffs().to_vec();
    group.bench_function("ntt_forward", |b| {
        b.iter(|| ring.to_ntt(&poly));
    });
    let ct = encrypt(&ring, &sk, &poly, &mut rng);
    let g = Gadget::DEFAULT;
    let key = AutomorphismKey::generate(&ring, g, (&[2; 32], 0), &sk, 3, &mut rng);
    group.bench_function("key_switch", |b| {
        b.iter(|| key.apply(&ring, &ct));
    });
    let masks = PackingMasks::from_seed(&ring, g, &[3; 32]);
    let bodies = masks.bodies(&ring, &sk, &mut rng);
    let cts: Vec<_> = (0..N)
        .map(|i| lwe_to_rlwe(&ring, &lwe_encrypt(&ring, &sk, i as u64, &mut rng)))
        .collect();
    group.bench_function("pack_4096_lwe_whole", |b| {
        b.iter(|| pack(&ring, &masks, &bodies, &cts));
    });
    let a_parts: Vec<Vec<u64>> = cts.iter().map(|c| c.a.clone()).collect();
    let b_parts: Vec<Vec<u64>> = cts.iter().map(|c| c.b.clone()).collect();
    let plan = PackingPlan::new(&ring, &masks, &a_parts);
    group.bench_function("pack_4096_lwe_online", |b| {
        b.iter(|| plan.pack(&ring, &bodies, &b_parts));
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
