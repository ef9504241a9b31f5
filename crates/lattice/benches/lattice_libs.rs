//! Our ring kernels (`lattice`) against the maintained lattice libraries on the same shapes
//! (issue #31): N = 4,096, Q = 2⁶² − 2¹⁶ + 1, the automorphism τ₃ (X ↦ X³), a key switch with
//! two 31-bit gadget digits. Every group runs ours and theirs one after the other in one
//! process, so both see the same machine.
//!
//! - **fhe.rs** (`fhe-math`, `fhe`; stable Rust, always built): `fhe-math`'s own NTT (its
//!   default, without the `tfhe-ntt` feature, which only hands the transform to `tfhe-ntt`,
//!   measured in `ntt_libs`) — forward, inverse, whole negacyclic product, the product checked
//!   equal to ours; `Poly::substitute` (τ₃ on coefficients), checked equal to ours; and the only
//!   public way to its key switch, a BFV Galois key (`EvaluationKey::rotates_columns_by(1)` =
//!   τ₃ then a key switch), at one 62-bit modulus, where `fhe` decomposes in base 2³¹: two digits
//!   like ours but no special modulus. Its decryption is checked against τ₃ of the message.
//! - **poulpy** (`poulpy-core`/`-hal`/`-cpu-avx`/`-cpu-portable` 0.10; nightly Rust only, see
//!   `lattice/Cargo.toml`): GLWE key switching and GLWE automorphism (τ₃ + switch) at rank 1,
//!   N = 4,096, a 62-bit torus precision, two 31-bit digits and a 32-bit auxiliary guard (our
//!   special prime P is 32 bits), on its AVX2 FFT backend (`FFT64Avx`, base 2¹⁷ limbs, and base
//!   2¹⁶ limbs with whole-limb 32-bit digits) and its AVX2 NTT backend (`NTT4x30Avx`, base 2³¹
//!   limbs: the digits are whole limbs); and its transform of one 62-bit polynomial, forward,
//!   inverse, and the product by a transformed small operand. Its representation (base-2ᵏ limbs
//!   over the torus) is not ours, so outputs cannot be compared element for element: the
//!   product is checked against a schoolbook one modulo 2⁶², the switches' decrypted noise is
//!   checked small.
//!
//! `cargo bench -p privatemail-lattice --bench lattice_libs` (fhe.rs only), or with poulpy:
//! `RUSTFLAGS="--cfg lattice_nightly -C target-feature=+avx2,+fma" cargo +nightly bench -p
//! privatemail-lattice --bench lattice_libs`.

use criterion::{criterion_group, criterion_main, Criterion};
use fhe::bfv::{BfvParametersBuilder, Encoding, EvaluationKeyBuilder, Plaintext};
use fhe_math::rq::traits::TryConvertFrom;
use fhe_math::rq::{Context, Poly, Representation, SubstitutionExponent};
use fhe_traits::{FheDecoder, FheDecrypter, FheEncoder, FheEncrypter};
use lattice::modq::{Modulus, Q};
use lattice::ntt::Ntt;
use lattice::rlwe::{encrypt, phase, AutomorphismKey, Gadget, Ring, SecretKey};
use lattice::N;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha20Rng;

/// The automorphism every library applies: τ₃ (fhe.rs's column rotation by one).
const K: usize = 3;

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

fn fhe_math_product(
    op: &fhe_math::ntt::NttOperator,
    m: &fhe_math::zq::Modulus,
    a: &[u64],
    b: &[u64],
) -> Vec<u64> {
    let (mut x, mut y) = (a.to_vec(), b.to_vec());
    op.forward(&mut x);
    op.forward(&mut y);
    m.mul_vec(&mut x, &y);
    op.backward(&mut x);
    x
}

/// The NTT modulo Q: ours and `fhe-math`'s.
fn bench_ntt(c: &mut Criterion, rng: &mut ChaCha20Rng) {
    let q = Q.value;
    let a: Vec<u64> = (0..N).map(|_| rng.random_range(0..q)).collect();
    let b: Vec<u64> = (0..N).map(|_| rng.random_range(0..q)).collect();
    let ours = Ntt::new(N, Q);
    let want = ours_product(&ours, Q, &a, &b);
    let m = fhe_math::zq::Modulus::new(q).expect("Q has at most 62 bits");
    let op = fhe_math::ntt::NttOperator::new(&m, N).expect("Q = 1 mod 2N");
    assert_eq!(
        fhe_math_product(&op, &m, &a, &b),
        want,
        "fhe-math's product differs"
    );
    let mut group = c.benchmark_group("lattice_ntt_n4096_q62");
    group.bench_function("ours_forward", |bch| {
        let mut x = a.clone();
        bch.iter(|| ours.forward(&mut x));
    });
    group.bench_function("fhe_math_forward", |bch| {
        let mut x = a.clone();
        bch.iter(|| op.forward(&mut x));
    });
    group.bench_function("ours_inverse", |bch| {
        let mut x = a.clone();
        bch.iter(|| ours.inverse(&mut x));
    });
    group.bench_function("fhe_math_inverse", |bch| {
        let mut x = a.clone();
        bch.iter(|| op.backward(&mut x));
    });
    group.bench_function("ours_product", |bch| {
        bch.iter(|| ours_product(&ours, Q, &a, &b));
    });
    group.bench_function("fhe_math_product", |bch| {
        bch.iter(|| fhe_math_product(&op, &m, &a, &b));
    });
    // The product poulpy's GLWE operations are built of (below): one operand transformed once
    // and reused (a secret, a key row), so a forward, the pointwise product, an inverse.
    let mut fb = b.clone();
    ours.forward(&mut fb);
    group.bench_function("ours_product_by_prepared", |bch| {
        bch.iter(|| {
            let mut x = a.clone();
            ours.forward(&mut x);
            for (u, v) in x.iter_mut().zip(&fb) {
                *u = Q.mul(*u, *v);
            }
            ours.inverse(&mut x);
            x
        });
    });
    #[cfg(lattice_nightly)]
    {
        poulpy::transform!(poulpy_cpu_avx::FFT64Avx, "poulpy_fft64avx", 17, &mut group);
        poulpy::transform!(
            poulpy_cpu_avx::NTT4x30Avx,
            "poulpy_ntt4x30avx",
            31,
            &mut group
        );
    }
    group.finish();
}

/// τ₃ of a plain polynomial, and τ₃ followed by a key switch on a ciphertext: ours, fhe.rs's,
/// and (nightly) poulpy's.
fn bench_switch(c: &mut Criterion, rng: &mut ChaCha20Rng) {
    let ring = Ring::new(N);
    let sk = SecretKey::generate(&ring, rng);
    let q = Q.value;
    let a: Vec<u64> = (0..N).map(|_| rng.random_range(0..q)).collect();

    // fhe-math's automorphism on the same coefficients, checked equal to ours.
    let ctx = Context::new_arc(&[q], N).expect("one NTT-friendly modulus");
    let pa = Poly::try_convert_from(a.as_slice(), &ctx, false, Representation::PowerBasis)
        .expect("coefficients below Q");
    let sub = SubstitutionExponent::new(&ctx, K).expect("odd exponent");
    let theirs = pa.substitute(&sub).expect("substitution");
    assert_eq!(
        theirs.coefficients().row(0).to_vec(),
        ring.automorphism(&a, K),
        "fhe-math's automorphism differs"
    );

    // Our automorphism key (τ₃ then a switch with the deployed gadget: two 31-bit digits, the
    // special prime P), checked to decrypt to τ₃ of the message.
    let msg: Vec<u64> = (0..N)
        .map(|_| Q.mul(rng.random_range(0..1000), 1 << 40))
        .collect();
    let ct = encrypt(&ring, &sk, &msg, rng);
    let key = AutomorphismKey::generate(&ring, Gadget::DEFAULT, (&[2; 32], 0), &sk, K, rng);
    let want = ring.automorphism(&msg, K);
    let got = phase(&ring, &sk, &key.apply(&ring, &ct));
    let errors: Vec<f64> = got
        .iter()
        .zip(&want)
        .map(|(&g, &w)| Q.centered(Q.sub(g, w)) as f64)
        .collect();
    let worst = errors.iter().fold(0f64, |m, e| m.max(e.abs()));
    let std = (errors.iter().map(|e| e * e).sum::<f64>() / N as f64).sqrt();
    eprintln!(
        "ours: automorphism noise log2(std) = {:.1}, log2(max) = {:.1} (relative to Q)",
        std.log2() - 62.0,
        worst.log2() - 62.0
    );
    assert!(worst < (1u64 << 20) as f64, "our switch's error is {worst}");

    // fhe.rs: BFV at N = 4,096 with the single modulus Q (its key switch then decomposes in
    // base 2³¹: two digits) and a small plaintext modulus, its Galois key for τ₃.
    let t = 257u64;
    let par = BfvParametersBuilder::new()
        .set_degree(N)
        .set_plaintext_modulus(t)
        .set_moduli(&[q])
        .build_arc()
        .expect("BFV parameters");
    let fsk = fhe::bfv::SecretKey::random(&par, rng);
    let ek = EvaluationKeyBuilder::new(&fsk)
        .and_then(|mut b| b.enable_column_rotation(1).and_then(|b| b.build(rng)))
        .expect("Galois key for τ₃");
    let m: Vec<u64> = (0..N).map(|_| rng.random_range(0..t)).collect();
    let pt = Plaintext::try_encode(&m, Encoding::poly(), &par).expect("encoding");
    let fct: fhe::bfv::Ciphertext = fsk.try_encrypt(&pt, rng).expect("encryption");
    let rotated = ek.rotates_columns_by(&fct, 1).expect("τ₃ and a switch");
    let dec = fsk.try_decrypt(&rotated).expect("decryption");
    let got = Vec::<u64>::try_decode(&dec, Encoding::poly()).expect("decoding");
    // τ₃ of m over Z_t, through ours over Z_Q (coefficients < t, negations to t − c).
    let want_t: Vec<u64> = ring
        .automorphism(&m, K)
        .into_iter()
        .map(|x| if x < t { x } else { (t - (q - x)) % t })
        .collect();
    assert_eq!(got, want_t, "fhe.rs's rotation does not decrypt to τ₃(m)");
    // SAFETY: `measure_noise` is `unsafe` only for running in variable time (a benchmark key).
    let bits = unsafe { fsk.measure_noise(&rotated) }.expect("noise");
    eprintln!(
        "fhe.rs: automorphism noise log2(max) = {}",
        bits as f64 - 62.0
    );

    let mut group = c.benchmark_group("lattice_switch_n4096_q62");
    group.sample_size(20);
    group.bench_function("ours_automorphism", |bch| {
        bch.iter(|| ring.automorphism(&a, K));
    });
    group.bench_function("fhe_math_automorphism", |bch| {
        bch.iter(|| pa.substitute(&sub).unwrap());
    });
    group.bench_function("ours_key_switch", |bch| {
        bch.iter(|| key.ksk.switch(&ring, &ct));
    });
    group.bench_function("ours_automorphism_key_switch", |bch| {
        bch.iter(|| key.apply(&ring, &ct));
    });
    group.bench_function("fhe_automorphism_key_switch", |bch| {
        bch.iter(|| ek.rotates_columns_by(&fct, 1).unwrap());
    });
    #[cfg(lattice_nightly)]
    {
        use poulpy_cpu_avx::{FFT64Avx, NTT4x30Avx};
        poulpy::glwe!(FFT64Avx, "poulpy_fft64avx", 17, 31, &mut group);
        poulpy::glwe!(FFT64Avx, "poulpy_fft64avx_b16_d32", 16, 32, &mut group);
        poulpy::glwe!(NTT4x30Avx, "poulpy_ntt4x30avx", 31, 31, &mut group);
    }
    group.finish();
}

/// poulpy's GLWE key switch and automorphism, one backend at a time: a macro rather than a
/// generic function, so the backend's many capability traits need not be spelled out.
#[cfg(lattice_nightly)]
mod poulpy {
    pub use poulpy_core::api::{
        GLWEAutomorphism, GLWEAutomorphismKeyEncryptSk, GLWEAutomorphismKeyPreparedFactory,
        GLWEEncryptSk, GLWEKeyswitch, GLWENoise, GLWESecretPreparedFactory, GLWESecretSampling,
        GLWESwitchingKeyEncryptSk, GLWESwitchingKeyPreparedFactory,
    };
    pub use poulpy_core::layouts::prepared::{
        GGLWEPreparedToBackendRef, GLWEAutomorphismKeyPreparedToBackendRef,
    };
    pub use poulpy_core::layouts::{
        GLWEAlloc, GLWEAutomorphismKeyAlloc, GLWEAutomorphismKeyLayout, GLWELayout,
        GLWEPlaintextAlloc, GLWESecretAlloc, GLWESwitchingKeyAlloc, GLWESwitchingKeyLayout,
        TorusPrecision,
    };
    pub use poulpy_cpu_portable::ScalarZnxFill;
    pub use poulpy_hal::api::{
        ModuleNew, ScratchOwnedAlloc, ScratchOwnedBorrow, VecZnxAutomorphismAssign,
        VecZnxFillUniformSource,
    };
    pub use poulpy_hal::api::{
        SvpApplyDftToDftAssign, SvpPPolAlloc, SvpPPolPrepare, VecZnxBigAlloc, VecZnxBigNormalize,
        VecZnxBigNormalizeTmpBytes, VecZnxDftAlloc, VecZnxDftApply, VecZnxIdftApply,
        VecZnxIdftApplyTmpBytes,
    };
    pub use poulpy_hal::layouts::{
        Module, PrepareHint, ScratchOwned, SvpPPolToBackendMut, SvpPPolToBackendRef,
        VecZnxBigToBackendMut, VecZnxBigToBackendRef, VecZnxDftToBackendMut, VecZnxDftToBackendRef,
        VecZnxToBackendRef, ZnxView,
    };
    pub use poulpy_hal::source::Source;
    pub use poulpy_hal::test_suite::scalar_znx_backend_ref;
    pub use poulpy_hal::test_suite::vec_znx_backend_mut;

    /// Bits of torus precision of a ciphertext (our Q) and of the key's guard (our P), and the
    /// number of gadget digits (ours: `Gadget::DEFAULT`, two of 31 bits).
    pub const K_CT: usize = 62;
    pub const K_AUX: usize = 32;
    pub const DNUM: usize = 2;

    macro_rules! glwe {
        ($be:ty, $name:expr, $base2k:expr, $k_digit:expr, $group:expr) => {{
            use $crate::poulpy::*;
            let n = lattice::N;
            let base2k: usize = $base2k;
            let k_digit = TorusPrecision($k_digit);
            let module = Module::<$be>::new(n as u64);
            let ct_infos = GLWELayout {
                n: n.into(),
                base2k: base2k.into(),
                k: K_CT.into(),
                rank: 1usize.into(),
            };
            let ksk_infos = GLWESwitchingKeyLayout {
                n: n.into(),
                base2k: base2k.into(),
                dnum: DNUM.into(),
                k_aux: K_AUX.into(),
                k_digit,
                k_offset: TorusPrecision(0),
                rank_in: 1usize.into(),
                rank_out: 1usize.into(),
            };
            let atk_infos = GLWEAutomorphismKeyLayout {
                n: n.into(),
                base2k: base2k.into(),
                dnum: DNUM.into(),
                k_aux: K_AUX.into(),
                rank: 1usize.into(),
                k_digit,
            };
            let mut scratch: ScratchOwned<$be> = ScratchOwned::alloc(
                [
                    module.glwe_switching_key_encrypt_sk_tmp_bytes(&ksk_infos),
                    module.glwe_automorphism_key_encrypt_sk_tmp_bytes(&atk_infos),
                    module.glwe_encrypt_sk_tmp_bytes(&ct_infos),
                    module.glwe_switching_key_prepare_tmp_bytes(&ksk_infos),
                    module.glwe_automorphism_key_prepare_tmp_bytes(&atk_infos),
                    module.glwe_keyswitch_tmp_bytes(&ct_infos, &ct_infos, &ksk_infos),
                    module.glwe_automorphism_tmp_bytes(&ct_infos, &ct_infos, &atk_infos),
                    module.glwe_noise_tmp_bytes(&ct_infos),
                ]
                .into_iter()
                .max()
                .unwrap(),
            );
            let (mut xs, mut xe, mut xa) = (
                Source::new([5u8; 32]),
                Source::new([6u8; 32]),
                Source::new([7u8; 32]),
            );
            let mut sk_in = module.glwe_secret_alloc(1usize.into());
            module.glwe_secret_fill_ternary_prob(&mut sk_in, 0.5, &mut xs);
            let mut sk_out = module.glwe_secret_alloc(1usize.into());
            module.glwe_secret_fill_ternary_prob(&mut sk_out, 0.5, &mut xs);
            let mut sk_in_p = module.glwe_secret_prepared_alloc(1usize.into());
            module.glwe_secret_prepare(&mut sk_in_p, &sk_in);
            let mut sk_out_p = module.glwe_secret_prepared_alloc(1usize.into());
            module.glwe_secret_prepare(&mut sk_out_p, &sk_out);

            // A random plaintext over the whole precision, encrypted under `sk_in`.
            let mut pt = module.glwe_plaintext_alloc_from_infos(&ct_infos);
            module.vec_znx_fill_uniform_source(
                base2k,
                K_CT,
                &mut vec_znx_backend_mut::<$be>(pt.data_mut()),
                0,
                &mut Source::new([8u8; 32]),
            );
            let mut ct = module.glwe_alloc_from_infos(&ct_infos);
            module.glwe_encrypt_sk(
                &mut ct,
                &pt,
                &sk_in_p,
                &mut xe,
                &mut xa,
                &mut scratch.borrow(),
            );

            // Key switch `sk_in` → `sk_out`.
            let mut ksk = module.glwe_switching_key_alloc_from_infos(&ksk_infos);
            module.glwe_switching_key_encrypt_sk(
                &mut ksk,
                &sk_in,
                &sk_out,
                &mut xe,
                &mut xa,
                &mut scratch.borrow(),
            );
            let mut ksk_p = module.glwe_switching_key_prepared_alloc_from_infos(&ksk);
            module.glwe_switching_key_prepare(&mut ksk_p, &ksk, &mut scratch.borrow());
            let mut out = module.glwe_alloc_from_infos(&ct_infos);
            module.glwe_keyswitch(
                &mut out,
                &ct,
                &ksk_p.to_backend_ref(),
                &mut scratch.borrow(),
            );
            let noise = module
                .glwe_noise(&out, &pt, &sk_out_p, &mut scratch.borrow())
                .std()
                .log2();
            eprintln!("{}: key switch noise log2(std) = {noise:.1} (torus)", $name);
            assert!(noise < -40.0, "{}: key switch noise 2^{noise}", $name);

            // τ₃ and a switch back to `sk_in`.
            let mut atk = module.glwe_automorphism_key_alloc_from_infos(&atk_infos);
            module.glwe_automorphism_key_encrypt_sk(
                &mut atk,
                $crate::K as i64,
                &sk_in,
                &mut xe,
                &mut xa,
                &mut scratch.borrow(),
            );
            let mut atk_p = module.glwe_automorphism_key_prepared_alloc_from_infos(&atk_infos);
            module.glwe_automorphism_key_prepare(&mut atk_p, &atk, &mut scratch.borrow());
            module.glwe_automorphism(
                &mut out,
                &ct,
                &GLWEAutomorphismKeyPreparedToBackendRef::<$be>::to_backend_ref(&atk_p),
                &mut scratch.borrow(),
            );
            let mut pt_rot = module.glwe_plaintext_alloc_from_infos(&ct_infos);
            module.vec_znx_fill_uniform_source(
                base2k,
                K_CT,
                &mut vec_znx_backend_mut::<$be>(pt_rot.data_mut()),
                0,
                &mut Source::new([8u8; 32]),
            );
            module.vec_znx_automorphism_assign(
                $crate::K as i64,
                &mut vec_znx_backend_mut::<$be>(pt_rot.data_mut()),
                0,
                &mut scratch.borrow(),
            );
            let noise = module
                .glwe_noise(&out, &pt_rot, &sk_in_p, &mut scratch.borrow())
                .std()
                .log2();
            eprintln!(
                "{}: automorphism noise log2(std) = {noise:.1} (torus)",
                $name
            );
            assert!(noise < -40.0, "{}: automorphism noise 2^{noise}", $name);

            let group = $group;
            group.bench_function(concat!($name, "_key_switch"), |bch| {
                bch.iter(|| {
                    module.glwe_keyswitch(
                        &mut out,
                        &ct,
                        &ksk_p.to_backend_ref(),
                        &mut scratch.borrow(),
                    )
                });
            });
            group.bench_function(concat!($name, "_automorphism_key_switch"), |bch| {
                bch.iter(|| {
                    module.glwe_automorphism(
                        &mut out,
                        &ct,
                        &GLWEAutomorphismKeyPreparedToBackendRef::<$be>::to_backend_ref(&atk_p),
                        &mut scratch.borrow(),
                    )
                });
            });
        }};
    }
    pub(crate) use glwe;

    /// `s·a` with `a` one polynomial at 62 bits of torus precision (its limbs) and `s` small
    /// (ternary): poulpy's transform of `a` (every limb), the inverse with the normalisation
    /// back to limbs, and the whole product (transform, pointwise by the prepared `s`,
    /// inverse, normalise) — the product every poulpy GLWE operation is built of; it has no
    /// product of two full-width polynomials. Checked against a schoolbook product mod 2⁶².
    macro_rules! transform {
        ($be:ty, $name:expr, $base2k:expr, $group:expr) => {{
            use $crate::poulpy::*;
            let n = lattice::N;
            let base2k: usize = $base2k;
            let size = K_CT.div_ceil(base2k);
            let module = Module::<$be>::new(n as u64);
            let mut a = module.vec_znx_alloc(n, 1, size);
            module.vec_znx_fill_uniform_source(
                base2k,
                K_CT,
                &mut vec_znx_backend_mut::<$be>(&mut a),
                0,
                &mut Source::new([9u8; 32]),
            );
            let mut s = module.scalar_znx_alloc(n, 1);
            s.fill_ternary_prob(0, 0.5, &mut Source::new([10u8; 32]));
            let mut s_dft = module.svp_ppol_alloc(n, 1, PrepareHint::Reuse);
            module.svp_ppol_prepare(
                &mut s_dft.to_backend_mut(),
                0,
                &scalar_znx_backend_ref::<$be>(&s),
                0,
            );
            let mut a_dft = module.vec_znx_dft_alloc(n, 1, size);
            let mut big = module.vec_znx_big_alloc(n, 1, size);
            let mut res = module.vec_znx_alloc(n, 1, size);
            let mut scratch: ScratchOwned<$be> = ScratchOwned::alloc(
                module
                    .vec_znx_idft_apply_tmp_bytes()
                    .max(module.vec_znx_big_normalize_tmp_bytes()),
            );
            let product =
                |a_dft: &mut _, big: &mut _, res: &mut _, scratch: &mut ScratchOwned<$be>| {
                    module.vec_znx_dft_apply(
                        1,
                        0,
                        &mut VecZnxDftToBackendMut::<$be>::to_backend_mut(a_dft),
                        0,
                        &VecZnxToBackendRef::<$be>::to_backend_ref(&a),
                        0,
                    );
                    module.svp_apply_dft_to_dft_assign(
                        &mut VecZnxDftToBackendMut::<$be>::to_backend_mut(a_dft),
                        0,
                        &s_dft.to_backend_ref(),
                        0,
                    );
                    module.vec_znx_idft_apply(
                        &mut VecZnxBigToBackendMut::<$be>::to_backend_mut(big),
                        0,
                        &VecZnxDftToBackendRef::<$be>::to_backend_ref(a_dft),
                        0,
                        &mut scratch.borrow(),
                    );
                    module.vec_znx_big_normalize(
                        &mut vec_znx_backend_mut::<$be>(res),
                        base2k,
                        K_CT,
                        0,
                        0,
                        &VecZnxBigToBackendRef::<$be>::to_backend_ref(big),
                        base2k,
                        0,
                        &mut scratch.borrow(),
                    );
                };
            product(&mut a_dft, &mut big, &mut res, &mut scratch);
            // Schoolbook s·a mod 2⁶² (wrapping i64, then the low 62 bits sign-extended); the
            // decoded values are rounded to 62 bits, so allow N units of rounding.
            let (mut av, mut rv) = (vec![0i64; n], vec![0i64; n]);
            a.decode_vec_i64(base2k, 0, K_CT, &mut av);
            res.decode_vec_i64(base2k, 0, K_CT, &mut rv);
            let sv = s.at(0, 0).to_vec();
            let mut want = vec![0i64; n];
            for (i, &si) in sv.iter().enumerate() {
                if si == 0 {
                    continue;
                }
                for (j, &aj) in av.iter().enumerate() {
                    let t = si.wrapping_mul(aj);
                    let k = i + j;
                    if k < n {
                        want[k] = want[k].wrapping_add(t);
                    } else {
                        want[k - n] = want[k - n].wrapping_sub(t);
                    }
                }
            }
            let worst = want
                .iter()
                .zip(&rv)
                .map(|(&w, &r)| ((w.wrapping_sub(r) << 2) >> 2).unsigned_abs())
                .max()
                .unwrap();
            assert!(worst <= n as u64, "{}: s·a off by {worst}", $name);
            let group = $group;
            group.bench_function(concat!($name, "_forward_62bit"), |bch| {
                bch.iter(|| {
                    module.vec_znx_dft_apply(
                        1,
                        0,
                        &mut a_dft.to_backend_mut(),
                        0,
                        &VecZnxToBackendRef::<$be>::to_backend_ref(&a),
                        0,
                    )
                });
            });
            group.bench_function(concat!($name, "_inverse_normalize_62bit"), |bch| {
                bch.iter(|| {
                    module.vec_znx_idft_apply(
                        &mut big.to_backend_mut(),
                        0,
                        &a_dft.to_backend_ref(),
                        0,
                        &mut scratch.borrow(),
                    );
                    module.vec_znx_big_normalize(
                        &mut vec_znx_backend_mut::<$be>(&mut res),
                        base2k,
                        K_CT,
                        0,
                        0,
                        &big.to_backend_ref(),
                        base2k,
                        0,
                        &mut scratch.borrow(),
                    );
                });
            });
            group.bench_function(concat!($name, "_product_small_by_62bit"), |bch| {
                bch.iter(|| product(&mut a_dft, &mut big, &mut res, &mut scratch));
            });
        }};
    }
    pub(crate) use transform;
}

fn bench(c: &mut Criterion) {
    let mut rng = ChaCha20Rng::seed_from_u64(31);
    bench_ntt(c, &mut rng);
    bench_switch(c, &mut rng);
}

criterion_group!(benches, bench);
criterion_main!(benches);
