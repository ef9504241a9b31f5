//! Ring-LWE encryption over `R_Q = Z_Q[X]/(Xᴺ + 1)`, gadget decomposition, key switching and
//! the ring's automorphisms `X ↦ Xᵏ`.
//!
//! A ciphertext `(a, b)` under secret `s` has *phase* `b − a·s = m + e`: the message `m`
//! (already scaled by the caller) plus an error `e`. Encryption draws `a` uniform from the
//! CSPRNG the caller passes, `e` with independent coefficients from the discrete Gaussian of
//! [`crate::lwe`] (σ = 6.4).
//!
//! # Key switching, and its error
//! Hybrid key switching with a special modulus (Gentry, Halevi & Smart 2012, §3.2 of the
//! "GHS" variant; the form used by SEAL and Lattigo): a key from `s'` to `s` holds, for each
//! of the `ℓ` gadget digits `t`, an encryption modulo `P·Q` of `P·Bᵗ·s'` under `s`:
//! `(a_t, a_t·s + e_t + P·Bᵗ·s')`. Switching `(a, b)` writes the centered `a = Σ_t Bᵗ·d_t`
//! with signed digits `|d_t| ≤ B/2 + 1` ([`Gadget::decompose`]), forms `(A, B) = Σ_t d_t·(a_t, b_t)`
//! modulo `P·Q`, and divides by `P` with rounding: `(−⌊A/P⌉, b − ⌊B/P⌉)`. Since
//! `B − A·s ≡ E + P·a·s' (mod P·Q)` with `E = Σ_t d_t·e_t`, the new phase is
//! `b − a·s' + k` with `k = (β − α·s − E)/P` exactly, where `α, β ∈ (−P/2, P/2]` are the
//! remainders the rounding drops. Of the two parts of `k`:
//!
//! - **`E/P` — rigorous.** The digits `d_t` are functions of the public `a` being switched
//!   (nothing here switches a secret-dependent `a`), the key errors `e_t` fresh and
//!   independent of them; each coefficient of `E` is a signed sum of `ℓ·N` products `d·e`
//!   with `|d| ≤ B/2 + 1` and distinct `e`s, each a centered discrete Gaussian with variance
//!   proxy σ² (Micciancio–Peikert 2012, Lemma 2.8). So, given the digits, `E/P` is
//!   sub-Gaussian with proxy `ℓ·N·(B/2 + 1)²·σ²/P²` — a theorem, not a model.
//! - **The rounding term `(β − α·s)/P`.** *Rigorous worst case:* `|β|, |α_j| ≤ P/2` and the
//!   secret has `h ≤ N` non-zero coefficients `±1`, so every coefficient is at most
//!   `(1 + h)/2 ≤ (1 + N)/2` ([`Gadget::rounding_worst_case`]). *Heuristic (independence
//!   assumption):* modelling the remainders as independent uniform values, independent of
//!   `s` (the standard model of RLWE noise analyses, e.g. Costache & Smart 2016) makes the
//!   term a sum of `1 + h` independent terms of magnitude ≤ ½, sub-Gaussian with proxy
//!   `(1 + N)/4` (Hoeffding). The remainders are in fact deterministic functions of public
//!   data and of the keys, so this is a model, not a proof.
//!
//! [`Gadget::switch_variance`] adds the rigorous proxy of `E/P` and the heuristic one of the
//! rounding term. With `P ≈ 2³²` two digits of 31 bits give `E/P` a proxy of
//! `2·4,096·(2³⁰ + 1)²·6.4²/P² ≈ 2¹⁴·³⁶` and the rounding term `4,097/4 ≈ 2¹⁰`: a switch
//! adds an error with variance proxy ≈ 2¹⁴·⁴³ (sub-Gaussian parameter ≈ 148) at `N = 4,096`
//! (its rigorous worst-case rounding is 2,048.5). Packing's `(N² − 1)/3` growth takes the
//! parameter to about 2¹⁸·⁴ (the tree packing beside `pir`'s `ring` bench, which also gives the
//! rigorous bound), against the scores' margin `Δ/2 = 2²⁹` (`pir::scores::failure_log2` checks
//! the whole bound).
//!
//! Security: the keys are RLWE samples modulo `P·Q < 2⁹⁴` (see the module above for the
//! standard's bound at `N = 4,096`: `log₂ Q ≤ 109`).
//!
//! # Automorphisms
//! `τ_k: X ↦ Xᵏ` (k odd) is a ring automorphism, so `τ_k(a, b)` has phase `τ_k(m + e)` under
//! `τ_k(s)`; a key from `τ_k(s)` to `s` brings it back. `τ_k` permutes coefficients up to
//! sign, so it keeps every error coefficient's distribution bound.

use rand::{RngCore, SeedableRng};
use rand_chacha::ChaCha20Rng;
use zeroize::{Zeroize, Zeroizing};

use crate::lwe::sample_error;
use crate::modq::{Modulus, Shoup, ShoupP, ShoupQ, P, Q};
use crate::ntt::Ntt;

/// The ring `Z_Q[X]/(Xᴺ + 1)` of one degree, with its transform tables.
#[derive(Debug)]
pub struct Ring {
    /// Transforms modulo `Q` (ciphertexts).
    pub ntt: Ntt,
    /// Transforms modulo `P` (the key-switching keys' second residue).
    ntt_p: Ntt,
    /// `P⁻¹ mod Q`, for the rounding division of key switching.
    p_inv: Shoup,
}

impl Ring {
    pub fn new(n: usize) -> Ring {
        Ring {
            ntt: Ntt::new(n, Q),
            ntt_p: Ntt::new(n, P),
            p_inv: Q.shoup(Q.inv(P.value % Q.value)),
        }
    }

    pub fn n(&self) -> usize {
        self.ntt.degree()
    }

    /// The transform of a copy of `a`.
    pub fn to_ntt(&self, a: &[u64]) -> Vec<u64> {
        let mut f = a.to_vec();
        self.ntt.forward(&mut f);
        f
    }

    /// The transform modulo `P` of a copy of `a` (already reduced modulo `P`).
    pub fn to_ntt_p(&self, a: &[u64]) -> Vec<u64> {
        let mut f = a.to_vec();
        self.ntt_p.forward(&mut f);
        f
    }

    /// The product `a·b` of two polynomials in coefficient form.
    pub fn mul(&self, a: &[u64], b: &[u64]) -> Vec<u64> {
        let fb = self.to_ntt(b);
        self.mul_ntt(a, &fb)
    }

    /// `a·b` with `b` already transformed; the result in coefficient form.
    pub fn mul_ntt(&self, a: &[u64], fb: &[u64]) -> Vec<u64> {
        let mut fa = self.to_ntt(a);
        for (x, &y) in fa.iter_mut().zip(fb) {
            *x = Q.mul(*x, y);
        }
        self.ntt.inverse(&mut fa);
        fa
    }

    /// `τ_k(a)(X) = a(Xᵏ)` for odd `k`: coefficient `i` moves to `i·k mod 2N`, negated when
    /// that lands in `[N, 2N)` (`Xᴺ = −1`).
    pub fn automorphism(&self, a: &[u64], k: usize) -> Vec<u64> {
        let n = self.n();
        assert!(k % 2 == 1, "automorphisms need odd k");
        let mut out = vec![0u64; n];
        let mask = 2 * n - 1; // 2N is a power of two
        for (i, &c) in a.iter().enumerate() {
            let j = (i * k) & mask;
            if j < n {
                out[j] = c;
            } else {
                out[j - n] = Q.neg(c);
            }
        }
        out
    }

    /// `a·Xʲ` (a signed rotation), `0 ≤ j < 2N`.
    pub fn mul_monomial(&self, a: &[u64], j: usize) -> Vec<u64> {
        let n = self.n();
        let mut out = vec![0u64; n];
        let mask = 2 * n - 1;
        for (i, &c) in a.iter().enumerate() {
            let t = (i + j) & mask;
            if t < n {
                out[t] = c;
            } else {
                out[t - n] = Q.neg(c);
            }
        }
        out
    }
}

/// A secret with ternary coefficients, uniform in `{−1, 0, 1}ᴺ` (the distribution the
/// homomorphic-encryption security standard assumes), held in every form the scheme uses
/// (signed, modulo `Q`, transformed modulo `Q` and `P`). **Every form is zeroised on drop**
/// ([`Drop`] below); no temporary copy outlives its construction.
pub struct SecretKey {
    signed: Vec<i64>,
    coeffs: Vec<u64>,
    ntt: Vec<u64>,
    ntt_p: Vec<u64>,
}

impl Drop for SecretKey {
    fn drop(&mut self) {
        self.signed.zeroize();
        self.coeffs.zeroize();
        self.ntt.zeroize();
        self.ntt_p.zeroize();
    }
}

impl SecretKey {
    pub fn generate(ring: &Ring, rng: &mut impl RngCore) -> SecretKey {
        let mut signed = Vec::with_capacity(ring.n());
        while signed.len() < ring.n() {
            // Rejection keeps each value exactly uniform: 255 = 3·85. Whether a byte is
            // rejected is independent of the values kept; `% 3` by a constant is a
            // multiplication, not a division, and `− 1` maps to {−1, 0, 1} without a branch.
            let byte = (rng.next_u32() & 0xff) as u8;
            if byte < 255 {
                signed.push(i64::from(byte % 3) - 1);
            }
        }
        SecretKey::from_signed(ring, signed)
    }

    fn from_signed(ring: &Ring, signed: Vec<i64>) -> SecretKey {
        let coeffs = reduce_signed(Q, &signed);
        // Transformed in place: no untransformed copy is left behind unzeroised.
        let mut ntt_p = reduce_signed(P, &signed);
        ring.ntt_p.forward(&mut ntt_p);
        SecretKey {
            ntt: ring.to_ntt(&coeffs),
            ntt_p,
            coeffs,
            signed,
        }
    }

    /// The coefficients in `Z_Q`: also the secret of the LWE ciphertexts this key packs.
    pub fn coeffs(&self) -> &[u64] {
        &self.coeffs
    }

    /// `τ_k(s)`.
    pub fn automorphed(&self, ring: &Ring, k: usize) -> SecretKey {
        let n = ring.n();
        let mut out = vec![0i64; n];
        for (i, &c) in self.signed.iter().enumerate() {
            let j = i * k % (2 * n);
            // The branch is on the public position only; the value is moved or negated.
            if j < n {
                out[j] = c;
            } else {
                out[j - n] = -c;
            }
        }
        SecretKey::from_signed(ring, out)
    }
}

/// Signed values (`|v| < m`: secrets, errors, digits) modulo `m`, branch-free
/// ([`Modulus::from_i64`]).
fn reduce_signed(m: Modulus, x: &[i64]) -> Vec<u64> {
    x.iter().map(|&v| m.from_i64(v)).collect()
}

/// An RLWE ciphertext in coefficient form; phase `b − a·s`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ciphertext {
    pub a: Vec<u64>,
    pub b: Vec<u64>,
}

impl Ciphertext {
    pub fn zero(n: usize) -> Ciphertext {
        Ciphertext {
            a: vec![0; n],
            b: vec![0; n],
        }
    }

    pub fn add(&self, other: &Ciphertext) -> Ciphertext {
        Ciphertext {
            a: zip_with(&self.a, &other.a, |x, y| Q.add(x, y)),
            b: zip_with(&self.b, &other.b, |x, y| Q.add(x, y)),
        }
    }

    pub fn sub(&self, other: &Ciphertext) -> Ciphertext {
        Ciphertext {
            a: zip_with(&self.a, &other.a, |x, y| Q.sub(x, y)),
            b: zip_with(&self.b, &other.b, |x, y| Q.sub(x, y)),
        }
    }

    pub fn mul_monomial(&self, ring: &Ring, j: usize) -> Ciphertext {
        Ciphertext {
            a: ring.mul_monomial(&self.a, j),
            b: ring.mul_monomial(&self.b, j),
        }
    }

    /// Every coefficient times a constant.
    pub fn scale(&self, c: u64) -> Ciphertext {
        let s = Q.shoup(c);
        Ciphertext {
            a: self.a.iter().map(|&x| s.times(x)).collect(),
            b: self.b.iter().map(|&x| s.times(x)).collect(),
        }
    }
}

fn zip_with(x: &[u64], y: &[u64], f: impl Fn(u64, u64) -> u64) -> Vec<u64> {
    x.iter().zip(y).map(|(&a, &b)| f(a, b)).collect()
}

/// Fresh error polynomial (signed): independent discrete Gaussians, σ = 6.4. Errors are as
/// secret as the key (with `a` and `b` they give `a·s`): callers hold them in [`Zeroizing`].
pub fn sample_error_poly(n: usize, rng: &mut impl RngCore) -> Vec<i64> {
    (0..n)
        .map(|_| i64::from(sample_error(rng) as i32))
        .collect()
}

/// Encrypts the (already scaled) message polynomial `m` under `sk`.
pub fn encrypt(ring: &Ring, sk: &SecretKey, m: &[u64], rng: &mut impl RngCore) -> Ciphertext {
    let a: Vec<u64> = (0..ring.n()).map(|_| uniform(rng)).collect();
    let b = encrypt_under(ring, sk, &a, m, rng);
    Ciphertext { a, b }
}

/// The `b` part `a·s + e + m` for a given (e.g. public, seeded) `a`, with fresh errors.
pub fn encrypt_under(
    ring: &Ring,
    sk: &SecretKey,
    a: &[u64],
    m: &[u64],
    rng: &mut impl RngCore,
) -> Vec<u64> {
    let e = Zeroizing::new(reduce_signed(
        Q,
        &Zeroizing::new(sample_error_poly(ring.n(), rng)),
    ));
    let as_ = Zeroizing::new(ring.mul_ntt(a, &sk.ntt));
    (0..ring.n())
        .map(|i| Q.add(Q.add(as_[i], e[i]), m[i]))
        .collect()
}

/// The phase `b − a·s = m + e`.
pub fn phase(ring: &Ring, sk: &SecretKey, ct: &Ciphertext) -> Vec<u64> {
    phase_of(ring, sk, &ct.a, &ct.b)
}

/// [`phase`] of a ciphertext held as its two parts.
pub fn phase_of(ring: &Ring, sk: &SecretKey, a: &[u64], b: &[u64]) -> Vec<u64> {
    let as_ = Zeroizing::new(ring.mul_ntt(a, &sk.ntt));
    zip_with(b, &as_, |x, y| Q.sub(x, y))
}

/// A uniform element of `Z_Q` (rejection sampling on 62 bits).
pub fn uniform(rng: &mut impl RngCore) -> u64 {
    uniform_mod(Q, rng)
}

/// A uniform element of `Z_m` (rejection sampling on `m`'s bit length).
fn uniform_mod(m: Modulus, rng: &mut impl RngCore) -> u64 {
    loop {
        let x = rng.next_u64() >> (64 - m.bits());
        if x < m.value {
            return x;
        }
    }
}

/// An LWE ciphertext of dimension `N` modulo `Q` under the RLWE secret's coefficients
/// ([`SecretKey::coeffs`]); phase `b − ⟨a, s⟩`.
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

/// An LWE encryption of `m` under the coefficients of `sk` with a fresh uniform `a` (tests and
/// benchmarks; a protocol's answers come from the server's product instead).
pub fn lwe_encrypt(ring: &Ring, sk: &SecretKey, m: u64, rng: &mut impl RngCore) -> LweCiphertext {
    let a: Vec<u64> = (0..ring.n()).map(|_| uniform(rng)).collect();
    lwe_encrypt_with(a, sk, m, rng)
}

/// An LWE encryption of `m` with the given `a`.
pub fn lwe_encrypt_with(
    a: Vec<u64>,
    sk: &SecretKey,
    m: u64,
    rng: &mut impl RngCore,
) -> LweCiphertext {
    let e = Q.from_i64(i64::from(sample_error(rng) as i32));
    let dot = a
        .iter()
        .zip(sk.coeffs())
        .fold(0u64, |acc, (&x, &s)| Q.add(acc, Q.mul(x, s)));
    LweCiphertext {
        b: Q.add(Q.add(dot, e), m),
        a,
    }
}

/// Signed base-`2^log_base` decomposition into `digits` digits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Gadget {
    pub log_base: u32,
    pub digits: usize,
}

impl Gadget {
    /// Two 31-bit digits: with the special modulus their error term is negligible (module docs).
    pub const DEFAULT: Gadget = Gadget {
        log_base: 31,
        digits: 2,
    };

    /// The smallest number of digits that covers `Z_Q` exactly at this base.
    pub fn exact(log_base: u32) -> Gadget {
        assert!((1..=31).contains(&log_base));
        let digits = (Q.bits() as usize).div_ceil(log_base as usize);
        Gadget { log_base, digits }
    }

    /// Signed digits `|d_t| ≤ B/2 + 1` (all but the top one `≤ B/2`) with `Σ_t Bᵗ·d_t` = the
    /// centered value of each coefficient of `a`. Only public `a`s are decomposed (the
    /// server's plans), so its branches leak nothing.
    pub fn decompose(&self, a: &[u64]) -> Vec<Vec<i64>> {
        let base = 1i64 << self.log_base;
        let half = base / 2;
        let mut out = vec![vec![0i64; a.len()]; self.digits];
        let last = self.digits - 1;
        for (i, &c) in a.iter().enumerate() {
            let mut v = Q.centered(c);
            for digit in &mut out[..last] {
                let mut d = v.rem_euclid(base);
                if d > half {
                    d -= base;
                }
                digit[i] = d;
                v = (v - d) >> self.log_base;
            }
            // The top digit takes what is left: |v| ≤ B/2 + 1 because ℓ·log B ≥ log Q.
            out[last][i] = v;
        }
        out
    }

    /// Variance proxy of the error one key switch adds to a coefficient (module docs):
    /// `ℓ·N·(B/2 + 1)²·σ²/P² + (1 + N)/4` — the first term rigorous, the second the rounding
    /// term's heuristic (independence assumption) proxy.
    pub fn switch_variance(&self, n: usize) -> f64 {
        self.switch_gaussian_variance(n) + (1.0 + n as f64) / 4.0
    }

    /// The rigorous part of [`Gadget::switch_variance`]: the proxy of `E/P`, the key errors'
    /// share, `ℓ·N·(B/2 + 1)²·σ²/P²` (module docs).
    pub fn switch_gaussian_variance(&self, n: usize) -> f64 {
        let half = (1u64 << self.log_base) as f64 / 2.0 + 1.0;
        let p = P.value as f64;
        self.digits as f64 * n as f64 * half * half * crate::lwe::SIGMA.powi(2) / (p * p)
    }

    /// The rounding term's rigorous worst case per coefficient of one switch: `(1 + N)/2`
    /// (`|β|, |α_j| ≤ P/2`, at most `N` non-zero ternary coefficients; module docs).
    pub fn rounding_worst_case(n: usize) -> f64 {
        (1.0 + n as f64) / 2.0
    }
}

/// Bytes that are not a key body ([`KeyBody::read`]): the wrong length, or a value not reduced.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Malformed(pub String);

/// The public half of a key-switching key: each digit's uniform `a_t` modulo `P·Q` (both
/// residues, transformed), expanded by ChaCha20 from a public seed and stream. It is the same
/// for every client (a common reference string, as Kyber seeds its matrix), so a server can
/// precompute with it before any client arrives, and a client sends only the [`KeyBody`].
pub struct KeyMask {
    gadget: Gadget,
    rows: Vec<KeyRow>,
}

/// The secret-dependent half: each digit's `b_t = a_t·s + e_t + P·Bᵗ·s'`, both residues,
/// transformed.
pub struct KeyBody {
    rows: Vec<KeyRow>,
}

/// One digit's key polynomial, transformed, in both residues, each value with its Shoup
/// companion (a key multiplies many digits: every switch of a packing).
struct KeyRow {
    q: Vec<ShoupQ>,
    p: Vec<ShoupP>,
}

impl KeyRow {
    fn new(q: &[u64], p: &[u64]) -> KeyRow {
        KeyRow {
            q: q.iter().map(|&w| ShoupQ::new(w)).collect(),
            p: p.iter().map(|&w| ShoupP::new(w)).collect(),
        }
    }
}

/// A key body in orbit order, each orbit twice over ([`KeyBody::orbit_key`]).
pub struct OrbitKey {
    gamma: usize,
    rows: Vec<KeyRow>,
}

impl OrbitKey {
    /// `x[o·γ + j] ← x[o·γ + j] − Σ_t d_t[o·γ + j]·k_t[o·γ + (j + shift) mod γ]` for every orbit
    /// `o` (`k_t` in orbit order), modulo `Q` and `P`, transformed and undivided: InspiRING's
    /// online step with its accumulator kept in place and the key's run shifted instead of the
    /// accumulator permuted (the derivation is in `pir::inspiring`).
    pub fn subtract_rotated(
        &self,
        digits: DigitsView<'_>,
        shift: usize,
        xq: &mut [u64],
        xp: &mut [u64],
    ) {
        let (g, n) = (self.gamma, xq.len());
        assert!(shift < g && n.is_multiple_of(g) && xp.len() == n);
        assert!(digits.q.len() == self.rows.len() * n && digits.p.len() == digits.q.len());
        #[cfg(target_arch = "x86_64")]
        {
            if let [r0, r1] = &self.rows[..] {
                if g.is_multiple_of(8) && crate::avx512::available() {
                    let (d0, d1) = digits.q.split_at(n);
                    let (e0, e1) = digits.p.split_at(n);
                    for o in 0..n / g {
                        let (at, key) = (o * g..(o + 1) * g, 2 * o * g + shift..);
                        let ops = crate::avx512::TwoDigits {
                            dq: (&d0[at.clone()], &d1[at.clone()]),
                            dp: (&e0[at.clone()], &e1[at.clone()]),
                            kq: (&r0.q[key.clone()][..g], &r1.q[key.clone()][..g]),
                            kp: (&r0.p[key.clone()][..g], &r1.p[key][..g]),
                        };
                        // SAFETY: the CPU supports AVX-512F and DQ (checked just above); the
                        // kernel checks every length itself.
                        unsafe {
                            crate::avx512::subtract_two(ops, (&mut xq[at.clone()], &mut xp[at]))
                        };
                    }
                    return;
                }
            }
        }
        self.subtract_rotated_portable(digits, shift, xq, xp)
    }

    fn subtract_rotated_portable(
        &self,
        digits: DigitsView<'_>,
        shift: usize,
        xq: &mut [u64],
        xp: &mut [u64],
    ) {
        let (g, n) = (self.gamma, xq.len());
        for (t, row) in self.rows.iter().enumerate() {
            let (dq, dp) = (&digits.q[t * n..(t + 1) * n], &digits.p[t * n..(t + 1) * n]);
            for o in 0..n / g {
                let (at, key) = (o * g..(o + 1) * g, 2 * o * g + shift..2 * o * g + shift + g);
                for ((x, &d), k) in xq[at.clone()]
                    .iter_mut()
                    .zip(&dq[at.clone()])
                    .zip(&row.q[key.clone()])
                {
                    *x = Q.sub(*x, k.times(d));
                }
                for ((x, &d), k) in xp[at.clone()].iter_mut().zip(&dp[at]).zip(&row.p[key]) {
                    *x = P.sub(*x, k.times(d));
                }
            }
        }
    }
}

/// The transformed digits of one `a` in both residues: everything a switch needs from `a`,
/// digit after digit (`N` values each). The residues modulo `P` are below 2³² and kept as
/// `u32` (a server holds many of these: the packing plans).
pub struct SwitchDigits {
    q: Vec<u64>,
    p: Vec<u32>,
}

impl SwitchDigits {
    /// Bytes held.
    pub fn bytes(&self) -> usize {
        8 * self.q.len() + 4 * self.p.len()
    }

    /// The digits as a view (what a switch reads).
    pub fn view(&self) -> DigitsView<'_> {
        DigitsView {
            q: &self.q,
            p: &self.p,
        }
    }

    /// Each digit's values reordered, `out[i] = self[map[i]]` (a packing plan stores them in
    /// the order its online pass reads them).
    pub fn permuted(&self, map: &[u32]) -> SwitchDigits {
        let n = map.len();
        SwitchDigits {
            q: self
                .q
                .chunks_exact(n)
                .flat_map(|d| map.iter().map(move |&m| d[m as usize]))
                .collect(),
            p: self
                .p
                .chunks_exact(n)
                .flat_map(|d| map.iter().map(move |&m| d[m as usize]))
                .collect(),
        }
    }

    /// The residues modulo `Q` and modulo `P`, digit after digit.
    pub fn into_parts(self) -> (Vec<u64>, Vec<u32>) {
        (self.q, self.p)
    }
}

/// [`SwitchDigits`] wherever they are held (a packing plan keeps every step's digits in one
/// buffer, in memory or in a file the server mapped): `q` and `p` hold the same number of
/// digits, `N` values each.
#[derive(Clone, Copy)]
pub struct DigitsView<'a> {
    pub q: &'a [u64],
    pub p: &'a [u32],
}

impl KeyMask {
    /// The gadget its digits are taken with.
    pub fn gadget(&self) -> Gadget {
        self.gadget
    }

    pub fn from_seed(ring: &Ring, gadget: Gadget, seed: &[u8; 32], stream: u64) -> KeyMask {
        let mut rng = ChaCha20Rng::from_seed(*seed);
        rng.set_stream(stream);
        let n = ring.n();
        let rows = (0..gadget.digits)
            .map(|_| {
                let a_q: Vec<u64> = (0..n).map(|_| uniform_mod(Q, &mut rng)).collect();
                let a_p: Vec<u64> = (0..n).map(|_| uniform_mod(P, &mut rng)).collect();
                KeyRow::new(&ring.to_ntt(&a_q), &ring.to_ntt_p(&a_p))
            })
            .collect();
        KeyMask { gadget, rows }
    }

    /// The body switching `from` to `to` under this mask (the client's part).
    pub fn body(
        &self,
        ring: &Ring,
        from: &SecretKey,
        to: &SecretKey,
        rng: &mut impl RngCore,
    ) -> KeyBody {
        let n = ring.n();
        let p_mod_q = P.value % Q.value;
        let rows = self
            .rows
            .iter()
            .enumerate()
            .map(|(t, row)| {
                // P·Bᵗ modulo Q (it is 0 modulo P).
                let factor = Q.mul(
                    p_mod_q,
                    Q.pow(2, u64::from(self.gadget.log_base) * t as u64),
                );
                let e = Zeroizing::new(sample_error_poly(n, rng));
                let mut e_q = Zeroizing::new(reduce_signed(Q, &e));
                ring.ntt.forward(&mut e_q);
                let mut e_p = Zeroizing::new(reduce_signed(P, &e));
                ring.ntt_p.forward(&mut e_p);
                let b_q: Vec<u64> = (0..n)
                    .map(|i| {
                        let m = Q.mul(factor, from.ntt[i]);
                        Q.add(Q.add(row.q[i].times(to.ntt[i]), e_q[i]), m)
                    })
                    .collect();
                let b_p: Vec<u64> = (0..n)
                    .map(|i| P.add(row.p[i].times(to.ntt_p[i] as u32), e_p[i]))
                    .collect();
                KeyRow::new(&b_q, &b_p)
            })
            .collect();
        KeyBody { rows }
    }

    /// The half of a switch that needs only `a`: its transformed digits and the new `a`
    /// (`−⌊Σ_t d_t·a_t / P⌉`).
    pub fn switch_a(&self, ring: &Ring, a: &[u64]) -> (SwitchDigits, Vec<u64>) {
        let digits = self.gadget.decompose(a);
        let digits = SwitchDigits {
            q: digits
                .iter()
                .flat_map(|d| ring.to_ntt(&reduce_signed(Q, d)))
                .collect(),
            p: digits
                .iter()
                .flat_map(|d| {
                    let t = ring.to_ntt_p(&reduce_signed(P, d));
                    // Reduced modulo P < 2³²: exact in a u32.
                    t.into_iter().map(|x| x as u32)
                })
                .collect(),
        };
        let a_new = ring.divide_by_p(digits.view(), &self.rows);
        (digits, a_new.iter().map(|&x| Q.neg(x)).collect())
    }
}

impl KeyBody {
    /// Bytes of a body on the wire: per digit, `N` values modulo `Q` (8 bytes each) and `N`
    /// modulo `P` (4 bytes: `P < 2³²`), little-endian, transformed.
    pub fn wire_len(n: usize, gadget: Gadget) -> usize {
        gadget.digits * n * (8 + 4)
    }

    pub fn write(&self, out: &mut Vec<u8>) {
        for row in &self.rows {
            row.q
                .iter()
                .for_each(|w| out.extend_from_slice(&w.value().to_le_bytes()));
            row.p
                .iter()
                .for_each(|w| out.extend_from_slice(&(w.value() as u32).to_le_bytes()));
        }
    }

    /// A body from [`KeyBody::write`]'s bytes: exactly [`KeyBody::wire_len`] of them, every
    /// value reduced — anything else is refused, so a malformed upload never reaches the
    /// arithmetic.
    pub fn read(n: usize, gadget: Gadget, bytes: &[u8]) -> Result<KeyBody, Malformed> {
        let expected = KeyBody::wire_len(n, gadget);
        if bytes.len() != expected {
            return Err(Malformed(format!(
                "a key body has {} bytes, expected {expected}",
                bytes.len()
            )));
        }
        let reduced = |m: Modulus, v: u64| {
            (v < m.value)
                .then_some(v)
                .ok_or_else(|| Malformed("a key body value is not reduced".into()))
        };
        let rows = bytes
            .chunks_exact(n * 12)
            .map(|row| {
                let (q, p) = row.split_at(n * 8);
                let q = q
                    .chunks_exact(8)
                    .map(|c| reduced(Q, u64::from_le_bytes(c.try_into().expect("8 bytes"))))
                    .collect::<Result<Vec<u64>, _>>()?;
                let p = p
                    .chunks_exact(4)
                    .map(|c| {
                        reduced(
                            P,
                            u64::from(u32::from_le_bytes(c.try_into().expect("4 bytes"))),
                        )
                    })
                    .collect::<Result<Vec<u64>, _>>()?;
                Ok(KeyRow::new(&q, &p))
            })
            .collect::<Result<Vec<KeyRow>, Malformed>>()?;
        Ok(KeyBody { rows })
    }

    /// The other half: `b − ⌊Σ_t d_t·b_t / P⌉`.
    /// `x ← x − Σ_t d_t·k_t` for this body's rows, modulo `Q` and `P`, transformed and not
    /// divided by `P` (what a packing with its divisions deferred accumulates).
    pub fn subtract_product(
        &self,
        ring: &Ring,
        digits: DigitsView<'_>,
        xq: &mut [u64],
        xp: &mut [u64],
    ) {
        ring.subtract_key_product(digits, &self.rows, xq, xp)
    }

    /// The body laid out for InspiRING's online pass (`pir::inspiring`): `orbits` lists the
    /// slots orbit by orbit (`γ` each, in the order the slot permutation walks them), and each
    /// orbit's values are written twice over, so the values from any position on, wrapping
    /// round the orbit, are one contiguous run ([`OrbitKey::subtract_rotated`]).
    pub fn orbit_key(&self, orbits: &[u32], gamma: usize) -> OrbitKey {
        let doubled =
            |o: &[u32]| -> Vec<usize> { o.iter().chain(o).map(|&s| s as usize).collect() };
        let order: Vec<usize> = orbits.chunks_exact(gamma).flat_map(doubled).collect();
        OrbitKey {
            gamma,
            rows: self
                .rows
                .iter()
                .map(|r| KeyRow {
                    q: order.iter().map(|&s| r.q[s]).collect(),
                    p: order.iter().map(|&s| r.p[s]).collect(),
                })
                .collect(),
        }
    }

    pub fn switch_b(&self, ring: &Ring, digits: DigitsView<'_>, b: &[u64]) -> Vec<u64> {
        let q = ring.divide_by_p(digits, &self.rows);
        zip_with(b, &q, |x, y| Q.sub(x, y))
    }
}

impl Ring {
    /// `⌊Σ_t d_t·k_t / P⌉ mod Q` from the residues of `Σ_t d_t·k_t` modulo `P·Q`:
    /// `(x_Q − centered(x_P))·P⁻¹`, exact because `x − centered(x_P)` is a multiple of `P`.
    fn divide_by_p(&self, digits: DigitsView<'_>, key: &[KeyRow]) -> Vec<u64> {
        let (xq, xp) = self.key_product(digits, key);
        self.divide_transformed(xq, xp)
    }

    /// `Σ_t d_t·k_t` modulo `Q` and modulo `P`, transformed: the products a switch needs,
    /// before its division by `P`.
    fn key_product(&self, digits: DigitsView<'_>, key: &[KeyRow]) -> (Vec<u64>, Vec<u64>) {
        let n = self.n();
        let (mut xq, mut xp) = (vec![0u64; n], vec![0u64; n]);
        self.subtract_key_product(digits, key, &mut xq, &mut xp);
        (
            xq.into_iter().map(|x| Q.neg(x)).collect(),
            xp.into_iter().map(|x| P.neg(x)).collect(),
        )
    }

    /// `x ← x − Σ_t d_t·k_t` in both residues, transformed (`xq`, `xp` reduced).
    fn subtract_key_product(
        &self,
        digits: DigitsView<'_>,
        key: &[KeyRow],
        xq: &mut [u64],
        xp: &mut [u64],
    ) {
        #[cfg(target_arch = "x86_64")]
        {
            if crate::fast_x86() {
                // SAFETY: the CPU supports AVX2 and BMI2 (checked just above).
                return unsafe { self.subtract_key_product_avx2(digits, key, xq, xp) };
            }
        }
        self.subtract_key_product_portable(digits, key, xq, xp)
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,bmi2")]
    unsafe fn subtract_key_product_avx2(
        &self,
        digits: DigitsView<'_>,
        key: &[KeyRow],
        xq: &mut [u64],
        xp: &mut [u64],
    ) {
        self.subtract_key_product_portable(digits, key, xq, xp)
    }

    #[inline(always)]
    fn subtract_key_product_portable(
        &self,
        digits: DigitsView<'_>,
        key: &[KeyRow],
        xq: &mut [u64],
        xp: &mut [u64],
    ) {
        let n = self.n();
        debug_assert_eq!(digits.q.len(), key.len() * n);
        debug_assert_eq!(digits.p.len(), key.len() * n);
        for ((dq, dp), row) in digits
            .q
            .chunks_exact(n)
            .zip(digits.p.chunks_exact(n))
            .zip(key)
        {
            for ((x, &d), k) in xq.iter_mut().zip(dq).zip(&row.q) {
                *x = Q.sub(*x, k.times(d));
            }
            for ((x, &d), k) in xp.iter_mut().zip(dp).zip(&row.p) {
                *x = P.sub(*x, k.times(d));
            }
        }
    }

    /// `⌊x / P⌉ mod Q` for `x` modulo `P·Q` given by its transformed residues `xq`, `xp`
    /// (reduced): the division that ends a switch (or, deferred, a whole packing).
    pub fn divide_transformed(&self, mut xq: Vec<u64>, mut xp: Vec<u64>) -> Vec<u64> {
        self.ntt.inverse(&mut xq);
        self.ntt_p.inverse(&mut xp);
        xq.iter()
            .zip(&xp)
            .map(|(&x, &y)| self.p_inv.times(Q.sub(x, Q.from_i64(P.centered(y)))))
            .collect()
    }
}

/// Switches ciphertexts from one secret to another (module docs): a public mask and the
/// client's body.
pub struct KeySwitchKey {
    pub mask: KeyMask,
    pub body: KeyBody,
}

impl KeySwitchKey {
    /// A key whose mask comes from `seed`/`stream` and whose body is generated here.
    pub fn generate(
        ring: &Ring,
        gadget: Gadget,
        (seed, stream): (&[u8; 32], u64),
        from: &SecretKey,
        to: &SecretKey,
        rng: &mut impl RngCore,
    ) -> KeySwitchKey {
        let mask = KeyMask::from_seed(ring, gadget, seed, stream);
        let body = mask.body(ring, from, to, rng);
        KeySwitchKey { mask, body }
    }

    /// `(a, b)` under `from` to the same phase under `to`, plus the switching error.
    pub fn switch(&self, ring: &Ring, ct: &Ciphertext) -> Ciphertext {
        let (digits, a) = self.mask.switch_a(ring, &ct.a);
        Ciphertext {
            b: self.body.switch_b(ring, digits.view(), &ct.b),
            a,
        }
    }
}

/// The key that undoes `τ_k` on the secret: applies `τ_k` to a ciphertext under `s` and
/// returns one under `s` again.
pub struct AutomorphismKey {
    pub k: usize,
    pub ksk: KeySwitchKey,
}

impl AutomorphismKey {
    pub fn generate(
        ring: &Ring,
        gadget: Gadget,
        public: (&[u8; 32], u64),
        sk: &SecretKey,
        k: usize,
        rng: &mut impl RngCore,
    ) -> AutomorphismKey {
        let from = sk.automorphed(ring, k);
        AutomorphismKey {
            k,
            ksk: KeySwitchKey::generate(ring, gadget, public, &from, sk, rng),
        }
    }

    /// `τ_k(ct)`, under the original secret.
    pub fn apply(&self, ring: &Ring, ct: &Ciphertext) -> Ciphertext {
        let moved = Ciphertext {
            a: ring.automorphism(&ct.a, self.k),
            b: ring.automorphism(&ct.b, self.k),
        };
        self.ksk.switch(ring, &moved)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha20Rng;

    #[test]
    fn a_single_lwe_ciphertext_converts_exactly() {
        let ring = Ring::new(64);
        let mut rng = ChaCha20Rng::seed_from_u64(8);
        let sk = SecretKey::generate(&ring, &mut rng);
        let lwe = lwe_encrypt(&ring, &sk, 12345 << 30, &mut rng);
        let ph = phase(&ring, &sk, &lwe_to_rlwe(&ring, &lwe));
        assert!(Q.centered(Q.sub(ph[0], 12345 << 30)).abs() <= 60);
    }

    fn max_error(got: &[u64], want: &[u64]) -> i64 {
        got.iter()
            .zip(want)
            .map(|(&g, &w)| Q.centered(Q.sub(g, w)).abs())
            .max()
            .unwrap()
    }

    fn random_message(n: usize, rng: &mut impl Rng) -> Vec<u64> {
        // Messages scaled by 2⁴⁰: far above any error here.
        (0..n)
            .map(|_| Q.mul(rng.random_range(0..1000), 1 << 40))
            .collect()
    }

    #[test]
    fn encryption_round_trips_with_small_error() {
        let ring = Ring::new(256);
        let mut rng = ChaCha20Rng::seed_from_u64(2);
        let sk = SecretKey::generate(&ring, &mut rng);
        let m = random_message(256, &mut rng);
        let ct = encrypt(&ring, &sk, &m, &mut rng);
        assert!(max_error(&phase(&ring, &sk, &ct), &m) <= 60);
        let other = SecretKey::generate(&ring, &mut rng);
        assert!(
            max_error(&phase(&ring, &other, &ct), &m) > 1 << 50,
            "a wrong key decrypts noise"
        );
    }

    #[test]
    fn secrets_are_ternary_and_balanced() {
        let ring = Ring::new(4096);
        let sk = SecretKey::generate(&ring, &mut ChaCha20Rng::seed_from_u64(3));
        let mut counts = [0usize; 3];
        for &c in sk.coeffs() {
            counts[(Q.centered(c) + 1) as usize] += 1;
        }
        // Each value ≈ 1,365 ± 30 (σ of a binomial); 5σ bounds.
        assert!(
            counts.iter().all(|&c| (1215..=1515).contains(&c)),
            "{counts:?}"
        );
    }

    #[test]
    fn decomposition_recomposes_with_small_digits() {
        let mut rng = ChaCha20Rng::seed_from_u64(4);
        let q = Q.value;
        for g in [
            Gadget::exact(4),
            Gadget::exact(7),
            Gadget::exact(21),
            Gadget::DEFAULT,
        ] {
            let mut a: Vec<u64> = (0..200).map(|_| uniform(&mut rng)).collect();
            a.extend([0, 1, q - 1, q / 2, q / 2 + 1]);
            let digits = g.decompose(&a);
            for i in 0..a.len() {
                let mut acc = 0i128;
                for (t, d) in digits.iter().enumerate() {
                    assert!(d[i].abs() <= (1 << (g.log_base - 1)) + 1);
                    acc += (d[i] as i128) << (g.log_base as usize * t);
                }
                assert_eq!(acc, Q.centered(a[i]) as i128);
            }
        }
    }

    #[test]
    fn key_switching_keeps_the_message_within_its_error_bound() {
        let ring = Ring::new(1024);
        let mut rng = ChaCha20Rng::seed_from_u64(5);
        let (s1, s2) = (
            SecretKey::generate(&ring, &mut rng),
            SecretKey::generate(&ring, &mut rng),
        );
        for g in [Gadget::DEFAULT, Gadget::exact(8), Gadget::exact(4)] {
            let ksk = KeySwitchKey::generate(&ring, g, (&[7; 32], 0), &s1, &s2, &mut rng);
            let m = random_message(1024, &mut rng);
            let ct = encrypt(&ring, &s1, &m, &mut rng);
            let switched = ksk.switch(&ring, &ct);
            // The input's error (≤ 60) plus the 2⁻⁴⁰ tail of the switch's sub-Gaussian bound.
            let bound = (2.0 * 41.0 * std::f64::consts::LN_2 * g.switch_variance(1024)).sqrt();
            let after = phase(&ring, &s2, &switched);
            let err = max_error(&after, &m);
            assert!(
                (err as f64) < bound + 60.0,
                "{g:?}: error {err} bound {bound}"
            );
            assert_ne!(
                after,
                phase(&ring, &s1, &ct),
                "the switch changes the error"
            );
            assert!(
                max_error(&phase(&ring, &s1, &switched), &m) > 1 << 50,
                "the old key no longer decrypts"
            );
        }
    }

    #[test]
    fn automorphisms_act_on_messages() {
        let ring = Ring::new(512);
        let mut rng = ChaCha20Rng::seed_from_u64(6);
        let sk = SecretKey::generate(&ring, &mut rng);
        let m = random_message(512, &mut rng);
        for k in [3usize, 5, 1023, 257] {
            let key = AutomorphismKey::generate(
                &ring,
                Gadget::exact(10),
                (&[1; 32], k as u64),
                &sk,
                k,
                &mut rng,
            );
            let ct = key.apply(&ring, &encrypt(&ring, &sk, &m, &mut rng));
            let want = ring.automorphism(&m, k);
            assert!(
                max_error(&phase(&ring, &sk, &ct), &want) < 1 << 30,
                "k = {k}"
            );
        }
        // τ_k is multiplicative: τ(a·b) = τ(a)·τ(b).
        let (a, b) = (random_message(512, &mut rng), random_message(512, &mut rng));
        assert_eq!(
            ring.automorphism(&ring.mul(&a, &b), 5),
            ring.mul(&ring.automorphism(&a, 5), &ring.automorphism(&b, 5))
        );
    }

    /// The AVX-512 step computes the portable loop's values exactly, at extreme operands too
    /// (residues `0` and `m − 1`, whose products exercise every carry of the 64-bit high half),
    /// at every shift class (runs that wrap round an orbit or not).
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn the_vector_step_equals_the_portable_loop() {
        use crate::N;
        if !crate::avx512::available() {
            eprintln!("no AVX-512 on this CPU: the portable loop is the only one that runs");
            return;
        }
        let mut rng = ChaCha20Rng::seed_from_u64(11);
        let edge = |m: u64, rng: &mut ChaCha20Rng| match rng.random_range(0..4) {
            0 => 0,
            1 => m - 1,
            2 => m - 1 - rng.random_range(0..1000),
            _ => rng.random_range(0..m),
        };
        let vals = |m: u64, len: usize, rng: &mut ChaCha20Rng| -> Vec<u64> {
            (0..len).map(|_| edge(m, rng)).collect()
        };
        let dq = vals(Q.value, 2 * N, &mut rng);
        let dp: Vec<u32> = vals(P.value, 2 * N, &mut rng)
            .into_iter()
            .map(|x| x as u32)
            .collect();
        let digits = DigitsView { q: &dq, p: &dp };
        for gamma in [N / 2, 64, 8] {
            let key = OrbitKey {
                gamma,
                rows: (0..2)
                    .map(|_| {
                        KeyRow::new(
                            &vals(Q.value, 2 * N, &mut rng),
                            &vals(P.value, 2 * N, &mut rng),
                        )
                    })
                    .collect(),
            };
            for shift in [0, 1, gamma / 2, gamma - 1] {
                let (mut vq, mut vp) = (vals(Q.value, N, &mut rng), vals(P.value, N, &mut rng));
                let (mut sq, mut sp) = (vq.clone(), vp.clone());
                key.subtract_rotated(digits, shift, &mut vq, &mut vp);
                key.subtract_rotated_portable(digits, shift, &mut sq, &mut sp);
                assert_eq!(vq, sq, "γ = {gamma}, shift {shift}");
                assert_eq!(vp, sp, "γ = {gamma}, shift {shift}");
            }
        }
    }
}
