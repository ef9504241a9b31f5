//! Lattice maths beneath the PIR schemes (crate `pir`): Ring-LWE over `Z_Q[X]/(Xᴺ + 1)` and the
//! discrete Gaussian both RLWE and SimplePIR's LWE draw their errors from. It knows nothing of
//! databases, queries or answers; the schemes built on it (SimplePIR, the hintless scores,
//! InspiRING packing) are in `pir`.
//!
//! - [`modq`] — arithmetic modulo the prime `Q = 2⁶² − 2¹⁶ + 1` (and the special prime `P`);
//! - [`ntt`] — the negacyclic transform of `Z_Q[X]/(Xᴺ + 1)` (AVX2 builds chosen at run time,
//!   [`fast_x86`]);
//! - [`rlwe`] — keys, encryption, gadget decomposition, key switching, automorphisms (the
//!   online step's AVX-512 kernels chosen at run time), LWE ciphertexts under a ring secret;
//! - [`lwe`] — the error distribution (σ = 6.4) and its sampler, normal-form secrets, `u32`
//!   inner products.
//!
//! # Security of the parameters
//! `N = 4,096`, `log₂ Q = 62`, ternary secrets, Gaussian errors of σ = 6.4: the
//! homomorphic-encryption security standard (Albrecht et al. 2018, Table 1, ternary secrets,
//! σ ≈ 3.2) gives 128-bit classical security to `N = 4,096` up to `log₂ Q = 109`; a larger σ
//! only helps. `N = 2,048` would allow only `log₂ Q ≤ 54`, so it is used here in tests only.

#[cfg(target_arch = "x86_64")]
mod avx512;
pub mod lwe;
pub mod modq;
pub mod ntt;
pub mod rlwe;

/// The ring degree of the deployed parameter set.
pub const N: usize = 4096;

/// Whether the AVX2 + BMI2 builds of the hot loops may run here (the transforms and the key
/// switch's products are compiled twice and chosen at run time).
#[cfg(target_arch = "x86_64")]
pub fn fast_x86() -> bool {
    std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("bmi2")
}
