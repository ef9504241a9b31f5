//! Ring-LWE building blocks for private ranking without a client hint (work in progress for
//! issue #18's million-image case; nothing in the serving path uses them yet).
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

pub mod modq;
pub mod ntt;
pub mod pack;
pub mod rlwe;
pub mod scores;

/// The ring degree of the deployed parameter set.
pub const N: usize = 4096;

/// Whether the AVX2 + BMI2 builds of the hot loops may run here (the transforms, the key
/// switch's division, the scoring pass are compiled twice and chosen at run time).
#[cfg(target_arch = "x86_64")]
fn fast_x86() -> bool {
    std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("bmi2")
}
