//! The ring layer at the deployed degree N = 4,096: one transform, one key switch (the unit of
//! packing's cost), and packing N LWE ciphertexts (N − 1 switches) with the tree (CDKS, the
//! baseline, `pack.rs` beside this file: only this bench uses it) — whole, and the online half a
//! server runs per query once it holds the plan for fixed `a` parts — against InspiRING.

use criterion::{criterion_group, criterion_main, Criterion};
use lattice::rlwe::{
    encrypt, lwe_encrypt, lwe_to_rlwe, uniform, AutomorphismKey, Gadget, Ring, SecretKey,
};
use lattice::N;
use pack::{pack, PackingMasks, PackingPlan};
use pir::inspiring::{InspiringMasks, InspiringPlan};
use rand::SeedableRng;
use rand_chacha::ChaCha20Rng;

// The tree's error figures are for its tests (`tests/tree_pack.rs`), not the bench.
#[allow(dead_code)]
mod pack;

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
    group.bench_function("ntt_inverse", |b| {
        let mut p = poly.clone();
        b.iter(|| ring.ntt.inverse(&mut p));
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
        .map(|i| lwe_encrypt(&ring, &sk, i as u64, &mut rng))
        .collect();
    group.bench_function("pack_4096_lwe_whole", |b| {
        b.iter(|| pack(&ring, &masks, &bodies, &cts));
    });
    let a_parts: Vec<Vec<u64>> = cts.iter().map(|c| lwe_to_rlwe(&ring, c).a).collect();
    let b_parts: Vec<u64> = cts.iter().map(|c| c.b).collect();
    let plan = PackingPlan::new(&ring, &masks, &a_parts);
    group.bench_function("pack_4096_lwe_online", |b| {
        b.iter(|| plan.pack(&ring, &bodies, &b_parts));
    });
    // InspiRING at the deployed width (N/2 inputs, one key): the same number of switches a
    // slot of output as the tree's 4,096.
    let gamma = N / 2;
    let imasks = InspiringMasks::from_seed(&ring, g, &[4; 32], gamma);
    let ibodies = imasks.bodies(&ring, &sk, &mut rng);
    let iplan = InspiringPlan::new(&ring, &imasks, &a_parts[..gamma]);
    group.bench_function("inspiring_2048_lwe_online", |b| {
        b.iter(|| iplan.pack_b(&ring, &ibodies, &b_parts[..gamma]));
    });
    group.bench_function("inspiring_2048_lwe_plan", |b| {
        b.iter(|| InspiringPlan::new(&ring, &imasks, &a_parts[..gamma]));
    });
    // The scoring pass a hintless ranking would run before packing (projected in
    // docs/eval/pir.md): 11,000 rows (a block's items at 1M, B = 256) × 16,384 columns
    // (256 blocks × 64 dimensions) of one signed 8-bit feature plane against a query mod Q.
    let (rows, cols) = (11_000usize, 16_384usize);
    let plane: Vec<i8> = (0..rows * cols)
        .map(|i| ((i * 2_654_435_761) >> 7) as i8)
        .collect();
    let query: Vec<u64> = (0..cols).map(|_| uniform(&mut rng)).collect();
    group.bench_function("score_pass_11000x16384_i8", |b| {
        b.iter(|| score_pass(&plane, &query));
    });
    group.finish();
}

/// `plane · query mod Q`, row by row: the query split into 31-bit halves so every product and
/// sum fits an `i64` (|d| ≤ 2⁷, 2¹⁴ columns: |sum| < 2⁵²).
fn score_pass(plane: &[i8], query: &[u64]) -> Vec<u64> {
    use lattice::modq::Q;
    let lo: Vec<i64> = query.iter().map(|&x| (x & 0x7fff_ffff) as i64).collect();
    let hi: Vec<i64> = query.iter().map(|&x| (x >> 31) as i64).collect();
    plane
        .chunks_exact(query.len())
        .map(|row| {
            let (mut s_lo, mut s_hi) = (0i64, 0i64);
            for ((&d, &l), &h) in row.iter().zip(&lo).zip(&hi) {
                s_lo += i64::from(d) * l;
                s_hi += i64::from(d) * h;
            }
            Q.add(Q.mul(Q.from_i64(s_hi), 1 << 31), Q.from_i64(s_lo))
        })
        .collect()
}

criterion_group!(benches, bench);
criterion_main!(benches);
