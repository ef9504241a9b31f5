//! Our negacyclic NTT (`lattice::ntt`) against the maintained `tfhe-ntt` (Zama's; AVX2 and
//! AVX-512 kernels chosen at run time) on the kernels the hintless ranking runs: N = 4,096
//! modulo Q = 2⁶² − 2¹⁶ + 1 and modulo the special prime P = 2³² − 2²⁰ + 1 (as u32 in
//! `tfhe-ntt`'s 32-bit plan). Each: a forward transform, an inverse, and a whole negacyclic
//! product (two forwards, the pointwise product, an inverse). The products are checked equal
//! before anything is timed. `cargo bench -p privatemail-lattice --bench ntt_libs`.

use criterion::{criterion_group, criterion_main, Criterion};
use lattice::modq::{Modulus, P, Q};
use lattice::ntt::Ntt;
use lattice::N;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha20Rng;

fn ours_product(ntt: &Ntt, m: Modulus, a: &[u64], b: &[u64]) -> Vec<u64> {
    let (mut x, mut y) = (a.to_vec(), b.to_vec());
    ntt.forward(&mut x);
    ntt.forward(&mut y);
    for (u, v) in x.iter_mut().zip(&y) {
        *u = m.mul(*u, *v);
    }
    ntt.inverse(&mut x);
    x
}

fn theirs64(plan: &tfhe_ntt::prime64::Plan, a: &[u64], b: &[u64]) -> Vec<u64> {
    let (mut x, mut y) = (a.to_vec(), b.to_vec());
    plan.fwd(&mut x);
    plan.fwd(&mut y);
    plan.mul_assign_normalize(&mut x, &y);
    plan.inv(&mut x);
    x
}

fn theirs32(plan: &tfhe_ntt::prime32::Plan, a: &[u32], b: &[u32]) -> Vec<u32> {
    let (mut x, mut y) = (a.to_vec(), b.to_vec());
    plan.fwd(&mut x);
    plan.fwd(&mut y);
    plan.mul_assign_normalize(&mut x, &y);
    plan.inv(&mut x);
    x
}

fn bench(c: &mut Criterion) {
    let mut rng = ChaCha20Rng::seed_from_u64(7);
    for (name, m) in [("q62", Q), ("p32", P)] {
        let q = m.value;
        let a: Vec<u64> = (0..N).map(|_| rng.random_range(0..q)).collect();
        let b: Vec<u64> = (0..N).map(|_| rng.random_range(0..q)).collect();
        let ours = Ntt::new(N, m);
        let want = ours_product(&ours, m, &a, &b);
        let mut group = c.benchmark_group(format!("ntt_n4096_{name}"));
        group.bench_function("ours_forward", |bch| {
            let mut x = a.clone();
            bch.iter(|| ours.forward(&mut x));
        });
        group.bench_function("ours_inverse", |bch| {
            let mut x = a.clone();
            bch.iter(|| ours.inverse(&mut x));
        });
        group.bench_function("ours_product", |bch| {
            bch.iter(|| ours_product(&ours, m, &a, &b));
        });
        if name == "q62" {
            let plan = tfhe_ntt::prime64::Plan::try_new(N, q).expect("Q is NTT-friendly");
            assert_eq!(theirs64(&plan, &a, &b), want, "tfhe-ntt's product differs");
            group.bench_function("tfhe_ntt_forward", |bch| {
                let mut x = a.clone();
                bch.iter(|| plan.fwd(&mut x));
            });
            group.bench_function("tfhe_ntt_inverse", |bch| {
                let mut x = a.clone();
                bch.iter(|| plan.inv(&mut x));
            });
            group.bench_function("tfhe_ntt_product", |bch| {
                bch.iter(|| theirs64(&plan, &a, &b));
            });
        } else {
            let q32 = q as u32;
            let plan = tfhe_ntt::prime32::Plan::try_new(N, q32).expect("P is NTT-friendly");
            let (a32, b32): (Vec<u32>, Vec<u32>) = (
                a.iter().map(|&x| x as u32).collect(),
                b.iter().map(|&x| x as u32).collect(),
            );
            let got: Vec<u64> = theirs32(&plan, &a32, &b32)
                .into_iter()
                .map(u64::from)
                .collect();
            assert_eq!(got, want, "tfhe-ntt's product differs");
            group.bench_function("tfhe_ntt_forward", |bch| {
                let mut x = a32.clone();
                bch.iter(|| plan.fwd(&mut x));
            });
            group.bench_function("tfhe_ntt_inverse", |bch| {
                let mut x = a32.clone();
                bch.iter(|| plan.inv(&mut x));
            });
            group.bench_function("tfhe_ntt_product", |bch| {
                bch.iter(|| theirs32(&plan, &a32, &b32));
            });
        }
        group.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
