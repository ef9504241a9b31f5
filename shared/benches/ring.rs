//! The ring layer at the deployed degree N = 4,096: one transform, one key switch (the unit
//! of packing's cost: the default two digits with the special modulus, and four), and packing N LWE ciphertexts (N − 1 switches).

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use rand::SeedableRng;
use rand_chacha::ChaCha20Rng;
use shared::pir::ring::pack::{lwe_encrypt, lwe_to_rlwe, pack, PackingKeys};
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
    for g in [Gadget::DEFAULT, Gadget::exact(16)] {
        let key = AutomorphismKey::generate(&ring, g, &sk, 3, &mut rng);
        group.bench_with_input(
            BenchmarkId::new("key_switch_digits", g.digits),
            &g,
            |b, _| {
                b.iter(|| key.apply(&ring, &ct));
            },
        );
    }
    let g = Gadget::DEFAULT;
    let keys = PackingKeys::generate(&ring, g, &sk, &mut rng);
    let cts: Vec<_> = (0..N)
        .map(|i| lwe_to_rlwe(&ring, &lwe_encrypt(&ring, &sk, i as u64, &mut rng)))
        .collect();
    group.bench_function("pack_4096_lwe", |b| {
        b.iter(|| pack(&ring, &keys, &cts));
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
