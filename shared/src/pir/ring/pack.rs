//! Packing LWE ciphertexts into one RLWE ciphertext (Chen, Dai, Kim & Song, "Efficient
//! homomorphic conversion between (ring) LWE ciphertexts", ACNS 2021, Algorithm 2), written
//! from the paper.
//!
//! An LWE ciphertext `(a, b)` of dimension `N` under the RLWE secret's coefficients `s` has
//! phase `b − ⟨a, s⟩ = m + e`. [`lwe_to_rlwe`] turns it into an RLWE ciphertext whose constant
//! coefficient carries that phase. [`pack`] merges `n ≤ N` such ciphertexts into one whose
//! coefficient `i·N/n'` (`n'` = `n` rounded up to a power of two) carries message `i`, and
//! clears the others with the ring's trace. A server holding many LWE answers thus returns
//! `⌈count/N⌉` RLWE ciphertexts instead of needing the client to know `⟨a_i, s⟩`'s public part:
//! the *hint* of SimplePIR-style schemes becomes unnecessary (YPIR, Menon & Wu 2024).
//!
//! # Error
//! Inputs are scaled by `N⁻¹ mod Q` and every merge doubles the message, so the output phase
//! at a message coefficient is exactly the input's `m + e` plus key-switching errors. At a
//! merge of height `h` (combining `2ʰ` inputs; the trace steps count as further heights up to
//! `log N`), `ct_even + Xʳ·ct_odd + τ(ct_even − Xʳ·ct_odd)` takes each message coefficient
//! from exactly one child, twice (`τ` fixes message positions up to the sign the construction
//! cancels), and adds one switch error. So the switch error of a height-`h` merge reaches the
//! output multiplied by `2^(log N − h)`, once per level: the output error is the input error
//! plus a sum of independent sub-Gaussians with variance proxy
//! `Σ_h 4^(log N − h)·v = (N² − 1)/3 · v`, `v` = [`Gadget::switch_variance`]
//! ([`added_variance`]).

use super::modq::Q;
use super::rlwe::{AutomorphismKey, Ciphertext, Gadget, Ring, SecretKey};
use rand::RngCore;

/// An LWE ciphertext of dimension `N` modulo `Q`; phase `b − ⟨a, s⟩`.
#[derive(Clone, Debug)]
pub struct LweCiphertext {
    pub a: Vec<u64>,
    pub b: u64,
}

/// The RLWE ciphertext whose constant coefficient's phase is the LWE phase: the constant
/// coefficient of `A·s` is `A₀s₀ − Σ_{j≥1} A_{N−j}s_j`, so `A₀ = a₀` and `A_{N−j} = −a_j`.
pub fn lwe_to_rlwe(ring: &Ring, lwe: &LweCiphertext) -> Ciphertext {
    let n = ring.n();
    assert_eq!(lwe.a.len(), n);
    let mut a = vec![0u64; n];
    a[0] = lwe.a[0];
    for j in 1..n {
        a[n - j] = Q.neg(lwe.a[j]);
    }
    let mut b = vec![0u64; n];
    b[0] = lwe.b;
    Ciphertext { a, b }
}

/// The automorphism keys packing needs: `τ_k` for `k = 2ʲ + 1`, `j = 1 … log N`.
pub struct PackingKeys {
    keys: Vec<AutomorphismKey>,
}

impl PackingKeys {
    pub fn generate(
        ring: &Ring,
        gadget: Gadget,
        sk: &SecretKey,
        rng: &mut impl RngCore,
    ) -> PackingKeys {
        let log_n = ring.n().trailing_zeros();
        let keys = (1..=log_n)
            .map(|j| AutomorphismKey::generate(ring, gadget, sk, (1 << j) + 1, rng))
            .collect();
        PackingKeys { keys }
    }

    /// The key for `τ_{2ʲ+1}`.
    fn key(&self, j: u32) -> &AutomorphismKey {
        &self.keys[j as usize - 1]
    }
}

/// Packs `cts` (each from [`lwe_to_rlwe`], at most `N`) into one ciphertext whose coefficient
/// `i·N/n'` has phase `m_i + e_i + (packing error)`, `n'` = `cts.len()` rounded up to a power
/// of two; every other coefficient has phase 0 plus packing error.
pub fn pack(ring: &Ring, keys: &PackingKeys, cts: &[Ciphertext]) -> Ciphertext {
    let n = ring.n();
    assert!(!cts.is_empty() && cts.len() <= n);
    let width = cts.len().next_power_of_two();
    let log_width = width.trailing_zeros();
    let n_inv = Q.inv(n as u64);
    let scaled: Vec<Ciphertext> = (0..width)
        .map(|i| {
            cts.get(i)
                .map_or_else(|| Ciphertext::zero(n), |c| c.scale(n_inv))
        })
        .collect();
    let mut ct = merge(ring, keys, &scaled);
    // The trace down to the subring of X^(N/width) doubles message positions and cancels the rest.
    for j in (log_width + 1)..=n.trailing_zeros() {
        ct = ct.add(&keys.key(j).apply(ring, &ct));
    }
    ct
}

/// The recursive merge of CDKS Algorithm 2: `cts.len() = 2ˡ` inputs to one ciphertext whose
/// coefficient `i·N/2ˡ` has phase `2ˡ·(phase of input i)`.
fn merge(ring: &Ring, keys: &PackingKeys, cts: &[Ciphertext]) -> Ciphertext {
    if cts.len() == 1 {
        return cts[0].clone();
    }
    let l = cts.len().trailing_zeros();
    let even: Vec<Ciphertext> = cts.iter().step_by(2).cloned().collect();
    let odd: Vec<Ciphertext> = cts.iter().skip(1).step_by(2).cloned().collect();
    let even = merge(ring, keys, &even);
    let odd = merge(ring, keys, &odd).mul_monomial(ring, ring.n() >> l);
    let sum = even.add(&odd);
    let diff = even.sub(&odd);
    sum.add(&keys.key(l).apply(ring, &diff))
}

/// Variance proxy of the error packing adds to each coefficient (module docs).
pub fn added_variance(n: usize, gadget: Gadget) -> f64 {
    (n as f64 * n as f64 - 1.0) / 3.0 * gadget.switch_variance(n)
}

/// An LWE encryption of `m` under the coefficients of `sk` (for tests and the protocol's
/// client-side checks).
pub fn lwe_encrypt(ring: &Ring, sk: &SecretKey, m: u64, rng: &mut impl RngCore) -> LweCiphertext {
    let a: Vec<u64> = (0..ring.n()).map(|_| super::rlwe::uniform(rng)).collect();
    let e = Q.from_i64(i64::from(crate::pir::lwe::sample_error(rng) as i32));
    let dot = a
        .iter()
        .zip(sk.coeffs())
        .fold(0u64, |acc, (&x, &s)| Q.add(acc, Q.mul(x, s)));
    let b = Q.add(Q.add(dot, e), m);
    LweCiphertext { a, b }
}

#[cfg(test)]
mod tests {
    use super::super::rlwe::{phase, SecretKey};
    use super::*;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha20Rng;

    fn error_at(got: u64, want: u64) -> i64 {
        Q.centered(Q.sub(got, want)).abs()
    }

    /// Packs `count` LWE encryptions of random multiples of 2⁴⁰ and checks every coefficient.
    fn check(n: usize, count: usize, gadget: Gadget, seed: u64) -> f64 {
        let ring = Ring::new(n);
        let mut rng = ChaCha20Rng::seed_from_u64(seed);
        let sk = SecretKey::generate(&ring, &mut rng);
        let keys = PackingKeys::generate(&ring, gadget, &sk, &mut rng);
        let msgs: Vec<u64> = (0..count)
            .map(|_| Q.mul(rng.random_range(0..4096), 1 << 40))
            .collect();
        let cts: Vec<Ciphertext> = msgs
            .iter()
            .map(|&m| lwe_to_rlwe(&ring, &lwe_encrypt(&ring, &sk, m, &mut rng)))
            .collect();
        let got = phase(&ring, &sk, &pack(&ring, &keys, &cts));
        let stride = n / count.next_power_of_two();
        let mut worst = 0i64;
        for (pos, &g) in got.iter().enumerate() {
            let want = if pos % stride == 0 {
                msgs.get(pos / stride).copied().unwrap_or(0)
            } else {
                0
            };
            worst = worst.max(error_at(g, want));
        }
        // The 2⁻⁴⁰ tail of the stated sub-Gaussian bound, plus the input's own error.
        let bound = (2.0 * 41.0 * std::f64::consts::LN_2 * added_variance(n, gadget)).sqrt() + 60.0;
        assert!(
            (worst as f64) < bound,
            "n {n} count {count}: error {worst} bound {bound}"
        );
        worst as f64 / bound
    }

    #[test]
    fn a_single_lwe_ciphertext_converts_exactly() {
        let ring = Ring::new(64);
        let mut rng = ChaCha20Rng::seed_from_u64(8);
        let sk = SecretKey::generate(&ring, &mut rng);
        let lwe = lwe_encrypt(&ring, &sk, 12345 << 30, &mut rng);
        let ph = phase(&ring, &sk, &lwe_to_rlwe(&ring, &lwe));
        assert!(error_at(ph[0], 12345 << 30) <= 60);
    }

    #[test]
    fn packing_places_every_message_and_clears_the_rest() {
        let g = Gadget::DEFAULT;
        for (n, count) in [(32usize, 32usize), (64, 64), (64, 5), (64, 1), (256, 100)] {
            check(n, count, g, n as u64 + count as u64);
        }
    }

    #[test]
    fn packing_error_stays_within_the_bound_at_full_size() {
        // The deployed degree and gadget, every slot used.
        let ratio = check(super::super::N, super::super::N, Gadget::DEFAULT, 9);
        // The bound is a 2⁻⁴⁰ tail; a typical worst coefficient sits well inside it.
        assert!(ratio > 0.05, "the error is real, not zero ({ratio})");
    }
}
