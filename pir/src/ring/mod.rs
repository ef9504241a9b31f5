//! Ring-LWE building blocks for private ranking without a client hint (issue #18's
//! million-image case; `shared::pir::hintless` serves [`scores`] on a capped level).
//!
//! - [`modq`] — arithmetic modulo the prime `Q = 2⁶² − 2¹⁶ + 1`;
//! - [`ntt`] — the negacyclic transform of `Z_Q[X]/(Xᴺ + 1)`;
//! - [`rlwe`] — keys, encryption, gadget decomposition, key switching, automorphisms;
//! - [`pack`] — many LWE ciphertexts into one RLWE ciphertext (the server's answer
//!   compression that makes a hint unnecessary);
//! - [`scores`] — encrypted exact distance scores of the items of one privately chosen block.
//!
//! # Security of the parameters
//! `N = 4,096`, `log₂ Q = 62`, ternary secrets, Gaussian errors of σ = 6.4: the
//! homomorphic-encryption security standard (Albrecht et al. 2018, Table 1, ternary secrets,
//! σ ≈ 3.2) gives 128-bit classical security to `N = 4,096` up to `log₂ Q = 109`; a larger σ
//! only helps. `N = 2,048` would allow only `log₂ Q ≤ 54`, so it is used here in tests only.

#[cfg(target_arch = "x86_64")]
mod avx512;
pub mod inspiring;
pub mod modq;
pub mod ntt;
pub mod pack;
pub mod rlwe;
pub mod scores;

/// `f` over `items`, in order: on every core with the `parallel` feature (the server), serially
/// otherwise (the browser). With `micros`, the calls' summed time (≈ the CPU time of this
/// compute-bound work) is added to it, µs — what the server reports per search; not measured on
/// wasm32, which has no clock here.
pub(crate) fn par_map<T: Sync, U: Send>(
    items: &[T],
    f: impl Fn(&T) -> U + Sync + Send,
    micros: Option<&std::sync::atomic::AtomicU64>,
) -> Vec<U> {
    let timed = |x: &T| {
        #[cfg(not(target_arch = "wasm32"))]
        if let Some(m) = micros {
            let t = std::time::Instant::now();
            let out = f(x);
            let us = t.elapsed().as_micros() as u64;
            m.fetch_add(us, std::sync::atomic::Ordering::Relaxed);
            return out;
        }
        let _ = micros;
        f(x)
    };
    #[cfg(feature = "parallel")]
    {
        use rayon::prelude::*;
        items.par_iter().map(timed).collect()
    }
    #[cfg(not(feature = "parallel"))]
    {
        items.iter().map(timed).collect()
    }
}

/// The ring degree of the deployed parameter set.
pub const N: usize = 4096;

/// Whether the AVX2 + BMI2 builds of the hot loops may run here (the transforms, the key
/// switch's division, the scoring pass are compiled twice and chosen at run time).
#[cfg(target_arch = "x86_64")]
fn fast_x86() -> bool {
    std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("bmi2")
}
