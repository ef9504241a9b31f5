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
//! from exactly one child, twice: `τ` fixes the even child's message positions and negates
//! the odd child's, so the other child's value there cancels — an identity on the whole phase,
//! errors included. So a message coefficient's output error is **exactly** the input's error
//! plus `Σ_h 2^(log N − h)·k_h`, `k_h` one coefficient of the error of the one switch of
//! height `h` on that coefficient's path (the multipliers add up to `N − 1`). Hence:
//!
//! - **Rigorous.** The switches on one path use different keys (one per level), whose errors
//!   are independent, so their `E/P` parts ([`lattice::rlwe`]) add to a sub-Gaussian with proxy
//!   `(N² − 1)/3 · v_E`, `v_E` = [`Gadget::switch_gaussian_variance`]; their rounding parts
//!   are at most `(N − 1)·(1 + N)/2 = (N² − 1)/2` in the worst case ([`rounding_worst_case`]:
//!   about 2²³ at `N = 4,096`).
//! - **Heuristic (independence assumption).** [`added_variance`] = `(N² − 1)/3 · v`, `v` =
//!   [`Gadget::switch_variance`], also treats the rounding parts as independent
//!   sub-Gaussians (proxy `(1 + N)/4` each, about 5 % of `v` at `N = 4,096`): a
//!   sub-Gaussian parameter of about 2¹⁸·⁴ in all, where the rigorous bound has 2¹⁸·⁴ and a
//!   worst-case rounding share of 2²³. At the coefficients the trace clears, each
//!   level mixes two coefficients of each child (no cancellation), and the same proxy holds
//!   only under the same assumption (a worst case there grows fourfold a level).
//!
//! # Online half: one division by `P`
//! When the inputs' `a` parts are fixed, a [`PackingPlan`] holds everything the `a` half needs,
//! and a query's packing ([`PackingPlan::pack_b`]) is the `b` half alone. It runs the merges on
//! `P·b` modulo `P·Q` instead of on `b`: a switch's `b` half is `b − ⌊X/P⌉` with
//! `X = Σ_t d_t·k_t` (the plan's digits `d_t`, the client's body rows `k_t`), and in the
//! scaled form it is `P·b − X` — no rounding. Every other step (the rotation `Xʳ`, the
//! automorphisms, the sums) is linear, so the scaled value runs through the whole tree exact
//! modulo `P·Q`, and one rounding division by `P` ends it. In the transform domain `τ_k` is a
//! permutation of slots ([`lattice::ntt::Ntt::automorphism_slots`]) and `Xʳ` a pointwise
//! product, so a switch costs two products a digit and residue, a rotation and a permutation;
//! the only transforms are the two inverse ones at the end (the per-switch form needs two a
//! switch). Measured at N = 4,096 (`--bench ring`): 595 → 175 ms for 4,096 inputs.
//!
//! **The error bounds above hold unchanged.** The `a` half is divided at every switch exactly
//! as in the per-switch form (the plan). Write that form's `b` after a switch as
//! `b − (X − c)/P`, `c` the remainder its rounding drops (`|c| ≤ P/2` a coefficient, the `β`
//! of [`lattice::rlwe`]'s analysis). The scaled form is `P` times the per-switch form's value
//! plus every dropped `c`, carried by the same linear steps; after the final division the two
//! differ by those carried `c/P` terms, rounded once more. So the deferred form's error is the
//! per-switch form's with each switch's `β/P` (at most ½) replaced by one final rounding (at
//! most ½) — the analysis above, which counts `β/P` in every switch's rounding share
//! (`(1 + N)/2` in the worst case, `(1 + N)/4` as a proxy), bounds it as it stands. Tested:
//! the two forms differ by at most `N/2` at every message coefficient.

use lattice::modq::{Modulus, Shoup, ShoupP, ShoupQ, P, Q};
use lattice::ntt::Slots;
use lattice::rlwe::{
    lwe_to_rlwe, Ciphertext, DigitsView, Gadget, KeyBody, KeyMask, LweCiphertext, Ring, SecretKey,
    SwitchDigits,
};
use rand::RngCore;

/// The automorphism `τ_k` packing uses at level `j = 1 … log N`: `k = 2ʲ + 1`.
fn level_k(j: u32) -> usize {
    (1 << j) + 1
}

/// The public masks of the packing keys (one per level), from a public seed: a server derives
/// them itself and precomputes with them ([`PackingPlan`]).
pub struct PackingMasks(Vec<KeyMask>);

/// A client's packing keys: the bodies for `τ_{2ʲ+1}(s) → s` under [`PackingMasks`]. This is
/// all of the keys a client uploads.
pub struct PackingBodies(Vec<KeyBody>);

impl PackingMasks {
    pub fn from_seed(ring: &Ring, gadget: Gadget, seed: &[u8; 32]) -> PackingMasks {
        let log_n = ring.n().trailing_zeros();
        PackingMasks(
            (1..=log_n)
                .map(|j| KeyMask::from_seed(ring, gadget, seed, u64::from(j)))
                .collect(),
        )
    }

    /// The client's bodies for secret `sk`.
    pub fn bodies(&self, ring: &Ring, sk: &SecretKey, rng: &mut impl RngCore) -> PackingBodies {
        PackingBodies(
            self.0
                .iter()
                .zip(1u32..)
                .map(|(mask, j)| mask.body(ring, &sk.automorphed(ring, level_k(j)), sk, rng))
                .collect(),
        )
    }
}

/// Everything packing computes from the inputs' `a` parts and the public masks: each key
/// switch's transformed digits, in the order the online pass consumes them, and the output's
/// `a`. When the `a` parts are fixed — a database's answers to a query of a public matrix —
/// the server builds this once, and each query's packing is only the `b` half
/// ([`PackingPlan::pack`]): no transforms of digits, a quarter of the products.
pub struct PackingPlan {
    width: usize,
    /// Every key switch's transformed digits, in the order the online pass consumes them.
    digits: Vec<SwitchDigits>,
    a: Vec<u64>,
    /// The online pass's transform-domain tables for the plan's ring, built on first use.
    tables: std::sync::OnceLock<Tables>,
}

impl PackingPlan {
    /// The plan for inputs whose `a` parts are `a_parts` (each an RLWE `a` polynomial, e.g.
    /// from [`lwe_to_rlwe`]; at most `N`).
    pub fn new(ring: &Ring, masks: &PackingMasks, a_parts: &[Vec<u64>]) -> PackingPlan {
        let n = ring.n();
        assert!(!a_parts.is_empty() && a_parts.len() <= n);
        let width = a_parts.len().next_power_of_two();
        let n_inv = n_inverse(ring);
        let leaf = |i: usize| match a_parts.get(i) {
            Some(p) => p.iter().map(|&x| n_inv.times(x)).collect(),
            None => vec![0; n],
        };
        // The merges (`width − 1`) and the trace's levels: the buffers' exact sizes.
        let steps = width - 1 + trace_levels(ring, width).count();
        let mut digits = Vec::with_capacity(steps);
        let mut a = merge(ring, width, &leaf, &mut |l, diff| {
            let (d, a) =
                masks.0[l as usize - 1].switch_a(ring, &ring.automorphism(diff, level_k(l)));
            digits.push(d);
            a
        });
        for j in trace_levels(ring, width) {
            let (d, switched) =
                masks.0[j as usize - 1].switch_a(ring, &ring.automorphism(&a, level_k(j)));
            digits.push(d);
            a = add(&a, &switched);
        }
        debug_assert_eq!(digits.len(), steps);
        PackingPlan {
            width,
            digits,
            a,
            tables: std::sync::OnceLock::new(),
        }
    }

    /// Inputs the plan was built for.
    pub fn width(&self) -> usize {
        self.width
    }

    /// The packed ciphertext of LWE ciphertexts with these `b` values (the same order and
    /// count as the plan's `a` parts) under the client's `bodies`.
    pub fn pack(&self, ring: &Ring, bodies: &PackingBodies, b_values: &[u64]) -> Ciphertext {
        Ciphertext {
            a: self.a.clone(),
            b: self.pack_b(ring, bodies, b_values),
        }
    }

    /// Only the packed `b` part: what a server sends (the `a` part is the plan's, public).
    ///
    /// Runs the merges of [`merge`] on `P·b` modulo `P·Q` in the transform domain and divides
    /// by `P` once at the end (module docs, "Online half"): per switch two products a digit
    /// and residue, a rotation and a permutation of slots — no transforms until the last.
    pub fn pack_b(&self, ring: &Ring, bodies: &PackingBodies, b_values: &[u64]) -> Vec<u64> {
        assert!(!b_values.is_empty() && b_values.len().next_power_of_two() == self.width);
        let tables = self.tables.get_or_init(|| Tables::new(ring));
        // A leaf is `P·N⁻¹·b` as a constant polynomial: the same value in every slot modulo
        // `Q`, and 0 modulo `P`.
        let scale = Q.shoup(Q.mul(P.value % Q.value, Q.inv(ring.n() as u64)));
        let leaf = |i: usize| b_values.get(i).map_or(0, |&b| scale.times(b));
        let mut steps = self.digits.iter().map(SwitchDigits::view);
        let mut next = || steps.next().expect("the plan has every step");
        let merge = Merge {
            ring,
            tables,
            bodies,
            width: self.width,
        };
        let mut x = merge.run(&leaf, 0, 1, &mut next);
        for j in trace_levels(ring, self.width) {
            x = tables.trace(j, &x);
            bodies.0[j as usize - 1].subtract_product(ring, next(), &mut x.q, &mut x.p);
        }
        ring.divide_transformed(x.q, x.p)
    }

    /// [`PackingPlan::pack_b`] with every switch divided by `P` on its own, in coefficient
    /// form (CDKS as written): the reference the deferred division is tested against.
    #[cfg(test)]
    fn pack_b_per_switch(&self, ring: &Ring, bodies: &PackingBodies, b_values: &[u64]) -> Vec<u64> {
        let n_inv = n_inverse(ring);
        let leaf = |i: usize| {
            let mut p = vec![0u64; ring.n()];
            if let Some(&b) = b_values.get(i) {
                p[0] = n_inv.times(b);
            }
            p
        };
        let mut steps = self.digits.iter().map(SwitchDigits::view);
        let mut b = merge(ring, self.width, &leaf, &mut |l, diff| {
            let digits = steps.next().expect("the plan has every step");
            bodies.0[l as usize - 1].switch_b(ring, digits, &ring.automorphism(diff, level_k(l)))
        });
        for j in trace_levels(ring, self.width) {
            let digits = steps.next().expect("the plan has every step");
            let switched =
                bodies.0[j as usize - 1].switch_b(ring, digits, &ring.automorphism(&b, level_k(j)));
            b = add(&b, &switched);
        }
        b
    }
}

/// `P·b` modulo `P·Q`, transformed, as its two residues (each reduced): the online half's
/// running value while the division by `P` is deferred.
struct Scaled {
    q: Vec<u64>,
    p: Vec<u64>,
}

/// The transform-domain tables of the online half, per level `j = 1 … log N` (index `j − 1`):
/// `X^(N/2ʲ)` transformed modulo `Q` and modulo `P` (a merge's rotation of its odd child) and
/// `τ_{2ʲ+1}` as a permutation of slots ([`lattice::ntt::Ntt::automorphism_slots`]; the same
/// for both residues, whose transforms share their order). Public; one per ring.
#[derive(Debug)]
struct Tables {
    rotation_q: Vec<Vec<ShoupQ>>,
    rotation_p: Vec<Vec<ShoupP>>,
    slots: Vec<Slots>,
}

impl Tables {
    fn new(ring: &Ring) -> Tables {
        let n = ring.n();
        let levels = 1..=n.trailing_zeros();
        let monomial = |j: u32| {
            let mut x = vec![0u64; n];
            x[n >> j] = 1;
            x
        };
        Tables {
            rotation_q: levels
                .clone()
                .map(|j| {
                    ring.to_ntt(&monomial(j))
                        .into_iter()
                        .map(ShoupQ::new)
                        .collect()
                })
                .collect(),
            rotation_p: levels
                .clone()
                .map(|j| {
                    let t = ring.to_ntt_p(&monomial(j));
                    t.into_iter().map(ShoupP::new).collect()
                })
                .collect(),
            slots: levels
                .map(|j| ring.ntt.automorphism_slots(level_k(j)))
                .collect(),
        }
    }

    /// A merge at level `l` before its switch: `E + Xʳ·O + τ(E − Xʳ·O)`, `r = N/2ˡ`, in both
    /// residues (the caller subtracts the switch's undivided `Σ_t d_t·k_t`).
    fn merge(&self, l: u32, mut even: Scaled, mut odd: Scaled) -> Scaled {
        let i = l as usize - 1;
        let slots = &self.slots[i];
        kernel(|| {
            merge_residue(Q, &mut even.q, &mut odd.q, &self.rotation_q[i], slots);
            merge_residue(P, &mut even.p, &mut odd.p, &self.rotation_p[i], slots);
        });
        even
    }

    /// A merge of two leaves (level 1), constants `e` and `o` modulo `Q` and 0 modulo `P`: the
    /// `Q` residue of `e + Xʳ·o + τ(e − Xʳ·o)`, and 0 modulo `P`.
    fn merge_leaves(&self, e: u64, o: u64) -> Scaled {
        let n = self.slots[0].len();
        let mut q = vec![0u64; n];
        kernel(|| {
            let rotated: Vec<u64> = self.rotation_q[0].iter().map(|r| r.times(o)).collect();
            for ((x, &ro), &s) in q.iter_mut().zip(&rotated).zip(&self.slots[0]) {
                let diff = Q.sub(e, rotated[s as usize]);
                *x = Q.add(Q.add(e, ro), diff);
            }
        });
        Scaled { q, p: vec![0; n] }
    }

    /// A trace step at level `j` before its switch: `x + τ(x)`.
    fn trace(&self, j: u32, x: &Scaled) -> Scaled {
        let slots = &self.slots[j as usize - 1];
        let n = slots.len();
        let mut out = Scaled {
            q: vec![0; n],
            p: vec![0; n],
        };
        kernel(|| {
            trace_residue(Q, &x.q, &mut out.q, slots);
            trace_residue(P, &x.p, &mut out.p, slots);
        });
        out
    }
}

/// The recursion of [`merge`] on the scaled `b` half (same post-order, so the plan's steps
/// are consumed in the order [`PackingPlan::new`] stored them).
struct Merge<'a> {
    ring: &'a Ring,
    tables: &'a Tables,
    bodies: &'a PackingBodies,
    width: usize,
}

impl Merge<'_> {
    fn run<'d>(
        &self,
        leaf: &impl Fn(usize) -> u64,
        offset: usize,
        stride: usize,
        next: &mut impl FnMut() -> DigitsView<'d>,
    ) -> Scaled {
        let n = self.ring.n();
        let count = self.width / stride;
        if count == 1 {
            return Scaled {
                q: vec![leaf(offset); n],
                p: vec![0; n],
            };
        }
        let l = count.trailing_zeros();
        let mut x = if count == 2 {
            // Both children are leaves: constants, so their merge needs no buffers of theirs.
            self.tables
                .merge_leaves(leaf(offset), leaf(offset + stride))
        } else {
            let even = self.run(leaf, offset, 2 * stride, next);
            let odd = self.run(leaf, offset + stride, 2 * stride, next);
            self.tables.merge(l, even, odd)
        };
        self.bodies.0[l as usize - 1].subtract_product(self.ring, next(), &mut x.q, &mut x.p);
        x
    }
}

/// Runs `f`, compiled for AVX2 and BMI2 when the CPU has them (the products' `mulx`).
#[inline(always)]
fn kernel(f: impl FnOnce()) {
    #[cfg(target_arch = "x86_64")]
    {
        if lattice::fast_x86() {
            // SAFETY: the CPU supports AVX2 and BMI2 (checked just above).
            return unsafe { kernel_avx2(f) };
        }
    }
    f()
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,bmi2")]
unsafe fn kernel_avx2(f: impl FnOnce()) {
    f()
}

/// One residue of a merge, in place in `even`: `odd ← Xʳ·odd`, then
/// `even ← even + odd + τ(even − odd)`.
#[inline(always)]
fn merge_residue(
    m: Modulus,
    even: &mut [u64],
    odd: &mut [u64],
    rotation: &[impl Multiplier],
    slots: &[u32],
) {
    let diff: Vec<u64> = even
        .iter()
        .zip(odd.iter_mut())
        .zip(rotation)
        .map(|((&e, o), r)| {
            *o = r.apply(*o);
            m.sub(e, *o)
        })
        .collect();
    for ((e, &o), &s) in even.iter_mut().zip(odd.iter()).zip(slots) {
        *e = m.add(m.add(*e, o), diff[s as usize]);
    }
}

/// A constant multiplier of one residue's kind ([`ShoupQ`] modulo `Q`, [`ShoupP`] modulo `P`).
trait Multiplier: Copy {
    /// `a·w` reduced (`a` reduced).
    fn apply(self, a: u64) -> u64;
}

impl Multiplier for ShoupQ {
    #[inline(always)]
    fn apply(self, a: u64) -> u64 {
        self.times(a)
    }
}

impl Multiplier for ShoupP {
    #[inline(always)]
    fn apply(self, a: u64) -> u64 {
        // Residues modulo P are below 2³².
        self.times(a as u32)
    }
}

/// One residue of a trace step: `out ← x + τ(x)`.
#[inline(always)]
fn trace_residue(m: Modulus, x: &[u64], out: &mut [u64], slots: &[u32]) {
    for ((o, &v), &s) in out.iter_mut().zip(x).zip(slots) {
        *o = m.add(v, x[s as usize]);
    }
}

/// Packs `cts` (at most `N`) into one RLWE ciphertext whose coefficient `i·N/n'` has phase
/// `m_i + e_i + (packing error)`, `n'` = `cts.len()` rounded up to a power of two; every other
/// coefficient has phase 0 plus packing error. The plan and its use in one go (a test and
/// benchmark convenience; servers keep the plan).
pub fn pack(
    ring: &Ring,
    masks: &PackingMasks,
    bodies: &PackingBodies,
    cts: &[LweCiphertext],
) -> Ciphertext {
    let a_parts: Vec<Vec<u64>> = cts.iter().map(|c| lwe_to_rlwe(ring, c).a).collect();
    let b_values: Vec<u64> = cts.iter().map(|c| c.b).collect();
    PackingPlan::new(ring, masks, &a_parts).pack(ring, bodies, &b_values)
}

/// `N⁻¹`: inputs are scaled by it because the merges and the trace multiply by `N` in all.
fn n_inverse(ring: &Ring) -> Shoup {
    Q.shoup(Q.inv(ring.n() as u64))
}

/// The trace's levels after merging `width` inputs: `log width + 1 … log N`.
fn trace_levels(ring: &Ring, width: usize) -> std::ops::RangeInclusive<u32> {
    (width.trailing_zeros() + 1)..=ring.n().trailing_zeros()
}

fn add(x: &[u64], y: &[u64]) -> Vec<u64> {
    x.iter().zip(y).map(|(&a, &b)| Q.add(a, b)).collect()
}

/// The recursive merge of CDKS Algorithm 2 on one half (`a` or `b`) of the ciphertexts:
/// `parts.len() = 2ˡ` inputs to one whose coefficient `i·N/2ˡ` has `2ˡ`·(input `i`). Both
/// halves go through the same linear steps; `switch(l, diff)` supplies the key-switched
/// `τ_{2ˡ+1}(diff)` half, and is called in the same (post-)order for both.
fn merge(
    ring: &Ring,
    width: usize,
    leaf: &impl Fn(usize) -> Vec<u64>,
    switch: &mut impl FnMut(u32, &[u64]) -> Vec<u64>,
) -> Vec<u64> {
    merge_strided(ring, width, leaf, 0, 1, switch)
}

/// [`merge`] of the inputs `offset, offset + stride, …` of `width` (`leaf(i)` makes input `i`
/// when the recursion reaches it, so the inputs are never all held or copied).
fn merge_strided(
    ring: &Ring,
    width: usize,
    leaf: &impl Fn(usize) -> Vec<u64>,
    offset: usize,
    stride: usize,
    switch: &mut impl FnMut(u32, &[u64]) -> Vec<u64>,
) -> Vec<u64> {
    let count = width / stride;
    if count == 1 {
        return leaf(offset);
    }
    let l = count.trailing_zeros();
    let even = merge_strided(ring, width, leaf, offset, 2 * stride, switch);
    let odd = merge_strided(ring, width, leaf, offset + stride, 2 * stride, switch);
    let odd = ring.mul_monomial(&odd, ring.n() >> l);
    let diff: Vec<u64> = even.iter().zip(&odd).map(|(&x, &y)| Q.sub(x, y)).collect();
    let switched = switch(l, &diff);
    even.iter()
        .zip(&odd)
        .zip(&switched)
        .map(|((&e, &o), &w)| Q.add(Q.add(e, o), w))
        .collect()
}

/// Variance proxy of the error packing adds to each coefficient (module docs): heuristic
/// (independence assumption) in its rounding share.
pub fn added_variance(n: usize, gadget: Gadget) -> f64 {
    (n as f64 * n as f64 - 1.0) / 3.0 * gadget.switch_variance(n)
}

/// The rigorous part of packing's error at a message coefficient (module docs): the proxy of
/// the key errors' share, `(N² − 1)/3 · v_E`; the rounding share is bounded separately by
/// [`rounding_worst_case`].
pub fn added_gaussian_variance(n: usize, gadget: Gadget) -> f64 {
    (n as f64 * n as f64 - 1.0) / 3.0 * gadget.switch_gaussian_variance(n)
}

/// The rounding share of packing's error at a message coefficient, worst case:
/// `(N − 1)·(1 + N)/2` (module docs).
pub fn rounding_worst_case(n: usize) -> f64 {
    (n as f64 - 1.0) * Gadget::rounding_worst_case(n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use lattice::rlwe::{lwe_encrypt, phase};
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha20Rng;

    /// `|got − want|`, centered modulo `Q`.
    fn error_at(got: u64, want: u64) -> i64 {
        Q.centered(Q.sub(got, want)).abs()
    }

    /// `count` LWE encryptions under `sk` of random multiples of 2⁴⁰, and the messages.
    fn random_messages(
        ring: &Ring,
        sk: &SecretKey,
        count: usize,
        rng: &mut ChaCha20Rng,
    ) -> (Vec<u64>, Vec<LweCiphertext>) {
        let msgs: Vec<u64> = (0..count)
            .map(|_| Q.mul(rng.random_range(0..4096), 1 << 40))
            .collect();
        let cts = msgs
            .iter()
            .map(|&m| lwe_encrypt(ring, sk, m, rng))
            .collect();
        (msgs, cts)
    }

    /// Packs `count` LWE encryptions of random multiples of 2⁴⁰ and checks every coefficient.
    fn check(n: usize, count: usize, gadget: Gadget, seed: u64) -> f64 {
        let ring = Ring::new(n);
        let mut rng = ChaCha20Rng::seed_from_u64(seed);
        let sk = SecretKey::generate(&ring, &mut rng);
        let masks = PackingMasks::from_seed(&ring, gadget, &[seed as u8; 32]);
        let bodies = masks.bodies(&ring, &sk, &mut rng);
        let (msgs, cts) = random_messages(&ring, &sk, count, &mut rng);
        let got = phase(&ring, &sk, &pack(&ring, &masks, &bodies, &cts));
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
    fn packing_places_every_message_and_clears_the_rest() {
        let g = Gadget::DEFAULT;
        for (n, count) in [(32usize, 32usize), (64, 64), (64, 5), (64, 1), (256, 100)] {
            check(n, count, g, n as u64 + count as u64);
        }
    }

    #[test]
    fn one_plan_serves_fresh_secrets_over_fixed_a_parts() {
        use lattice::rlwe::{lwe_encrypt_with, uniform};
        // A database's answers have fixed `a` parts; each query has its own secret and keys.
        let (n, count) = (256usize, 200usize);
        let ring = Ring::new(n);
        let mut rng = ChaCha20Rng::seed_from_u64(10);
        let a_fixed: Vec<Vec<u64>> = (0..count)
            .map(|_| (0..n).map(|_| uniform(&mut rng)).collect())
            .collect();
        let masks = PackingMasks::from_seed(&ring, Gadget::DEFAULT, &[5; 32]);
        let rlwe_a: Vec<Vec<u64>> = a_fixed
            .iter()
            .map(|a| lwe_to_rlwe(&ring, &LweCiphertext { a: a.clone(), b: 0 }).a)
            .collect();
        let plan = PackingPlan::new(&ring, &masks, &rlwe_a);
        assert_eq!(plan.width(), 256);
        let stride = n / plan.width();
        for _query in 0..2 {
            let sk = SecretKey::generate(&ring, &mut rng);
            let bodies = masks.bodies(&ring, &sk, &mut rng);
            let msgs: Vec<u64> = (0..count)
                .map(|_| Q.mul(rng.random_range(0..4096), 1 << 40))
                .collect();
            let b_parts: Vec<u64> = a_fixed
                .iter()
                .zip(&msgs)
                .map(|(a, &m)| lwe_encrypt_with(a.clone(), &sk, m, &mut rng).b)
                .collect();
            let got = phase(&ring, &sk, &plan.pack(&ring, &bodies, &b_parts));
            for (i, &m) in msgs.iter().enumerate() {
                assert!(error_at(got[i * stride], m) < 1 << 30, "message {i}");
            }
            // Another client's keys do not open this client's answers.
            let other = masks.bodies(&ring, &SecretKey::generate(&ring, &mut rng), &mut rng);
            let wrong = phase(&ring, &sk, &plan.pack(&ring, &other, &b_parts));
            assert!((0..count).any(|i| error_at(wrong[i * stride], msgs[i]) > 1 << 50));
        }
    }

    #[test]
    fn deferring_the_division_changes_message_coefficients_by_at_most_the_dropped_roundings() {
        // The per-switch form rounds each switch's `b`: at a message coefficient those
        // roundings (≤ ½ each) reach the output with multipliers summing to N − 1 (module
        // docs), and the deferred form rounds once (≤ ½): they differ by at most N/2 there.
        for (n, count, seed) in [
            (64usize, 64usize, 1u64),
            (256, 100, 2),
            (1024, 1024, 3),
            (64, 1, 4),
        ] {
            let ring = Ring::new(n);
            let mut rng = ChaCha20Rng::seed_from_u64(seed);
            let sk = SecretKey::generate(&ring, &mut rng);
            let masks = PackingMasks::from_seed(&ring, Gadget::DEFAULT, &[seed as u8; 32]);
            let bodies = masks.bodies(&ring, &sk, &mut rng);
            let cts: Vec<LweCiphertext> = (0..count)
                .map(|i| lwe_encrypt(&ring, &sk, Q.mul(i as u64, 1 << 40), &mut rng))
                .collect();
            let a_parts: Vec<Vec<u64>> = cts.iter().map(|c| lwe_to_rlwe(&ring, c).a).collect();
            let b_values: Vec<u64> = cts.iter().map(|c| c.b).collect();
            let plan = PackingPlan::new(&ring, &masks, &a_parts);
            let deferred = plan.pack_b(&ring, &bodies, &b_values);
            let per_switch = plan.pack_b_per_switch(&ring, &bodies, &b_values);
            let stride = n / plan.width();
            let worst = (0..count)
                .map(|i| error_at(deferred[i * stride], per_switch[i * stride]))
                .max()
                .unwrap();
            assert!(worst as usize <= n / 2, "n {n} count {count}: {worst}");
            // The two are not the same computation in disguise: roundings were dropped.
            assert_ne!(deferred, per_switch, "n {n} count {count}");
        }
    }

    #[test]
    fn packing_error_stays_within_the_bound_at_full_size() {
        // The deployed degree and gadget, every slot used.
        let ratio = check(lattice::N, lattice::N, Gadget::DEFAULT, 9);
        // The bound is a 2⁻⁴⁰ tail; a typical worst coefficient sits well inside it.
        eprintln!("worst packing error / its 2^-40 bound at N = 4096: {ratio:.3}");
        assert!(ratio > 0.05, "the error is real, not zero ({ratio})");
    }

    /// The tree's error figures at the deployed degree, as its docs, InspiRING's docs and
    /// docs/eval/pir.md compare them against InspiRING's.
    #[test]
    fn the_trees_error_figures_are_the_ones_its_docs_state() {
        let near = |got: f64, want: f64, tol: f64| {
            assert!((got - want).abs() <= tol, "{got} is not {want} ± {tol}")
        };
        let (n, g) = (lattice::N, Gadget::DEFAULT);
        near(added_variance(n, g).log2() / 2.0, 18.42, 0.005);
        near(added_gaussian_variance(n, g).log2() / 2.0, 18.39, 0.005);
        near(rounding_worst_case(n).log2(), 23.0, 0.001);
        // At 2⁻⁴⁰ (the tail the packing tests use): parameter 2²¹·³.
        near(
            (2.0 * 41.0 * std::f64::consts::LN_2 * added_variance(n, g))
                .sqrt()
                .log2(),
            21.33,
            0.01,
        );
    }
}
