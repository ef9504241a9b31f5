//! Packing `γ ≤ N/2` LWE ciphertexts into one RLWE ciphertext with **one** key-switching key:
//! the InspiRING idea (Mahdavi et al., "InsPIRe: Communication-efficient PIR with server-side
//! preprocessing", 2025), derived and written here from the algebra below. It replaces the
//! tree packing (CDKS; `benches/ring/pack.rs`, the baseline), which needs `log N` = 12 keys:
//! the client uploads one key body (96 KiB) instead of twelve (1,152 KiB), and the server's
//! online half per input is two products a digit and residue and one permutation, with no
//! rotations.
//!
//! # The algebra
//! Let `g = 2N/γ + 1`. For `γ ≤ N/2` it generates the subgroup `H = {k ≡ 1 mod 2N/γ}` of
//! `Z*_{2N}`, cyclic of order `γ` (`2N/γ ≥ 4`, and `1 + 2ᵃ` has order `2^(b−a)` modulo `2ᵇ`
//! for `a ≥ 2`). The partial trace `T(p) = Σ_{σ∈H} σ(p)` keeps exactly the coefficients at
//! multiples of `γ`, times `γ`: `Σ_{m<γ} X^(j·(1 + m·2N/γ)) = Xʲ·Σ_m ζᵐ` with `ζ = X^(2Nj/γ)`
//! of order dividing `γ`, a full period of roots of unity (sum 0) unless `ζ = 1`, i.e.
//! `γ | j`.
//!
//! An LWE ciphertext `(a_i, b_i)` with phase `b_i − ⟨a_i, s⟩ = μ_i` has `⟨a_i, s⟩` as the
//! constant coefficient of `ã_i·s` ([`lattice::rlwe::lwe_to_rlwe`]). So for `i < γ`
//!
//! `Σ_i Xⁱ·(b_i − T(ã_i·s)/γ) = Σ_i μ_i·Xⁱ − (terms at Xⁱ⁺ᵗᵞ, t ≥ 1)`:
//!
//! the messages sit in coefficients `0 … γ − 1` exactly, and coefficients `γ … N − 1` hold
//! what `T` kept of the products (secret-dependent values the client decrypts and ignores).
//! Since `σ(ã_i·s) = σ(ã_i)·σ(s)`, the left side is `B₀ − Σ_{j<γ} A_j·τ_{gʲ}(s)` with
//! `B₀ = Σ_i b_i·Xⁱ` and `A_j = γ⁻¹·Σ_i Xⁱ·τ_{gʲ}(ã_i)`: a ciphertext under the `γ` secrets
//! `τ_{gʲ}(s)` (the *transform*, from the `a` parts alone).
//!
//! **Collapse, Horner's way, with the one key `τ_g(s) → s`.** With `A'_k = τ_g^{−k}(A_k)`:
//! `V_{γ−1} = (A'_{γ−1}, 0)` and `V_k = (A'_k, 0) + switch(τ_g(V_{k+1}))` are ciphertexts
//! under `s` with phase `−Σ_{j≥k} A'_j·τ_g^(j−k)(s)` (induction: `τ_g` maps a ciphertext under
//! `s` to one under `τ_g(s)` with the phase's image; the key brings it back), so `V_0` has
//! phase `−Σ_j A_j·τ_{gʲ}(s)`, and `V_0 + (0, B₀)` is the packed ciphertext. `γ − 1` switches,
//! each with the same key.
//!
//! **Offline and online.** The `a` parts (`A'_k`, the switches' digits, the packed `a`) are
//! fixed when the inputs' `a` parts are (a database's answers to a query of a public matrix),
//! so the server computes them once ([`InspiringPlan::new`]); a query's packing is the `b`
//! chain alone: `β_{γ−1} = 0`, `β_k = τ_g(β_{k+1}) − ⌊Σ_t d_{k,t}·k_t / P⌉`, then `β_0 + B₀`.
//! As in the tree packing it runs on `P·β` modulo `P·Q` in the transform domain, where `τ_g` is
//! a permutation of slots, and divides by `P` once at the end.
//!
//! **The transform in `O(N·(N log N + γ))`.** In the transform domain (slot `t` evaluates at
//! `ω_t`, and `τ_σ` reads slot `π_σ(t)`): `A'_k[t] = γ⁻¹·Σ_i ω_{π_{g⁻ᵏ}(t)}ⁱ·ã_i[t]` — for
//! each slot `t`, the polynomial `P_t(Y) = Σ_i ã_i[t]·Yⁱ` evaluated at `γ` of the `N` points
//! one forward transform of `P_t` gives ([`lattice::ntt::Ntt::automorphism_slot`]).
//!
//! # Error
//! At a message coefficient the output phase is `μ_i` plus the inputs' errors plus
//! `Σ_k τ_g^k(κ_k)`, `κ_k` the `k`-th switch's error with its `b`-rounding moved to one final
//! rounding (≤ ½) as in the tree packing; automorphisms permute coefficients up to sign, so
//! each switch's error enters once — no doubling, against the tree's `(N² − 1)/3` growth.
//! - **Rigorous.** Every switch uses the same key, so the key errors' parts `E_k/P` are not
//!   independent: each coefficient of `Σ_k τ_g^k(E_k)/P` is `⟨w, e⟩/P` for the key's errors `e`
//!   and a public `w = Σ_k w_k`, `‖w‖ ≤ Σ_k ‖w_k‖`: sub-Gaussian with proxy
//!   `(γ − 1)²·v_E` ([`added_gaussian_variance`]). The rounding parts (`α·s/P` a switch, at most
//!   `N/2`, and the final ½) are at most `(γ − 1)·N/2 + ½` ([`rounding_worst_case`]).
//! - **Heuristic (independence assumption).** Modelling the switches' errors as independent
//!   (their digits are pseudo-random public values): proxy `(γ − 1)·v + ¼`
//!   ([`added_variance`]), `v` = [`Gadget::switch_variance`]: at `γ = 2,048` a sub-Gaussian
//!   parameter of about 2¹²·⁷ (the tree's is 2¹⁸·⁴); the rigorous proxy 2¹⁸·² and worst-case
//!   rounding 2²².
//!
//! # Security
//! The key is an automorphism key (`τ_g(s) → s`) like each of the tree's, under the same
//! RLWE and circular-security assumptions; its mask comes from a public seed and its body is
//! the client's, fresh with each query's secret.

use rand::RngCore;

use lattice::modq::{P, Q};
use lattice::rlwe::{
    Ciphertext, DigitsView, Gadget, KeyBody, KeyMask, OrbitKey, Ring, SecretKey, SwitchDigits,
};

use crate::error::PirError;
use crate::held::{Held, SharedBytes};

/// The generator of the packing's automorphisms for `gamma` inputs: `2N/γ + 1`.
pub fn generator(n: usize, gamma: usize) -> usize {
    2 * n / gamma + 1
}

/// Whether `gamma` inputs can be packed: a power of two from 1 to `N/2`.
pub fn valid_width(n: usize, gamma: usize) -> bool {
    gamma.is_power_of_two() && gamma <= n / 2
}

/// The key's public mask (from a public seed) and the width it packs.
pub struct InspiringMasks {
    gamma: usize,
    mask: KeyMask,
}

/// A client's key body for `τ_g(s) → s` under [`InspiringMasks`]: all it uploads for packing.
pub struct InspiringBodies(KeyBody);

impl InspiringMasks {
    /// The mask for packing `gamma` inputs ([`valid_width`]); the seed's stream is `g`, so
    /// different widths never share a mask.
    pub fn from_seed(ring: &Ring, gadget: Gadget, seed: &[u8; 32], gamma: usize) -> InspiringMasks {
        assert!(valid_width(ring.n(), gamma), "cannot pack {gamma} inputs");
        InspiringMasks {
            gamma,
            mask: KeyMask::from_seed(ring, gadget, seed, generator(ring.n(), gamma) as u64),
        }
    }

    pub fn width(&self) -> usize {
        self.gamma
    }

    /// The client's body for secret `sk`.
    pub fn bodies(&self, ring: &Ring, sk: &SecretKey, rng: &mut impl RngCore) -> InspiringBodies {
        let g = generator(ring.n(), self.gamma);
        InspiringBodies(self.mask.body(ring, &sk.automorphed(ring, g), sk, rng))
    }
}

impl InspiringBodies {
    /// Bytes on the wire: one [`KeyBody`].
    pub fn wire_len(n: usize, gadget: Gadget) -> usize {
        KeyBody::wire_len(n, gadget)
    }

    pub fn write(&self, out: &mut Vec<u8>) {
        self.0.write(out)
    }

    /// A body from [`InspiringBodies::write`]'s bytes (exact length, reduced values).
    pub fn read(n: usize, gadget: Gadget, bytes: &[u8]) -> Result<InspiringBodies, PirError> {
        if bytes.len() != InspiringBodies::wire_len(n, gadget) {
            return Err(PirError::Malformed(format!(
                "packing key has {} bytes, expected {}",
                bytes.len(),
                InspiringBodies::wire_len(n, gadget)
            )));
        }
        KeyBody::read(n, gadget, bytes)
            .map(InspiringBodies)
            .map_err(|e| PirError::Malformed(e.0))
    }
}

/// Everything packing computes from the inputs' `a` parts and the public mask: the `γ − 1`
/// switches' transformed digits (in the order the online pass consumes them) and the packed
/// `a`. Built once per version; a query's packing is then [`InspiringPlan::pack_b`].
pub struct InspiringPlan {
    gamma: usize,
    /// The slots orbit by orbit under `τ_g` (`γ` each): the order the online pass keeps its
    /// accumulator and reads the digits in.
    orbits: Vec<u32>,
    digits: StepDigits,
    a: Vec<u64>,
}

impl InspiringPlan {
    /// The plan for inputs whose RLWE `a` parts are `a_parts` ([`lattice::rlwe::lwe_to_rlwe`];
    /// at most the masks' width, the rest taken as zero inputs).
    pub fn new(ring: &Ring, masks: &InspiringMasks, a_parts: &[Vec<u64>]) -> InspiringPlan {
        Self::new_part(
            ring,
            masks,
            a_parts.to_vec(),
            0..masks.gamma.saturating_sub(1),
        )
    }

    /// [`InspiringPlan::new`] keeping only the digits of switch steps `keep` (of the `γ − 1`,
    /// clamped to them): a row shard's share of the plan (`crate::shard`). The whole chain is
    /// computed (each step's digits depend on the steps before), so the packed `a` is the
    /// whole plan's; [`InspiringPlan::accumulate_many`] then sums the kept steps only. The
    /// `a` parts are taken and transformed in place (at 4,096 coefficients, 2,048 of them are
    /// 64 MiB: never held twice).
    pub fn new_part(
        ring: &Ring,
        masks: &InspiringMasks,
        mut a_parts: Vec<Vec<u64>>,
        keep: std::ops::Range<usize>,
    ) -> InspiringPlan {
        let (n, gamma) = (ring.n(), masks.gamma);
        assert!(a_parts.len() <= gamma);
        let last = gamma - 1;
        let keep = keep.start.min(last)..keep.end.clamp(keep.start.min(last), last);
        let g = generator(n, gamma);
        // g⁻¹ modulo 2N: the group is finite, so some power of g is its inverse.
        let g_inv = (1..=gamma)
            .map(|e| pow_mod(g, e, 2 * n))
            .find(|&x| x * g % (2 * n) == 1)
            .expect("g is a unit");
        // The transform: A'_k[t] = γ⁻¹·P_t(ω_{π_{g⁻ᵏ}(t)}), P_t(Y) = Σ_i ã_i[t]·Yⁱ. Column `t`
        // of A' depends only on column `t` of the transformed inputs: each is written over
        // the one it is made from (γ rows, the missing inputs zeros).
        for a in &mut a_parts {
            ring.ntt.forward(a);
        }
        let mut a_prime = a_parts;
        a_prime.resize_with(gamma, || vec![0u64; n]);
        let gamma_inv = Q.inv(gamma as u64);
        let mut column = vec![0u64; n];
        for t in 0..n {
            column.fill(0);
            for (c, a) in column.iter_mut().zip(&a_prime) {
                *c = a[t];
            }
            ring.ntt.forward(&mut column);
            let mut e = 1;
            for row in a_prime.iter_mut() {
                row[t] = Q.mul(column[ring.ntt.automorphism_slot(t, e)], gamma_inv);
                e = e * g_inv % (2 * n);
            }
        }
        let coefficients = |mut x: Vec<u64>| {
            ring.ntt.inverse(&mut x);
            x
        };
        // The collapse's `a` half: V_{γ−1} = A'_{γ−1}; V_k = A'_k + switch(τ_g(V_{k+1})).
        let gadget_digits = masks.mask.gadget().digits;
        let orbits = orbits(&ring.ntt.automorphism_slots(g), gamma);
        let steps = gamma - 1;
        let mut digits = StepDigits::with_capacity(keep.clone(), steps, gadget_digits, n);
        let mut rows = a_prime.into_iter().rev();
        let mut a = coefficients(rows.next().expect("γ ≥ 1"));
        for (s, row) in rows.enumerate() {
            let (d, switched) = masks.mask.switch_a(ring, &ring.automorphism(&a, g));
            if keep.contains(&s) {
                // Stored as the online pass reads step `s`: orbit by orbit, rotated by its
                // shift.
                let shift = steps - s - 1;
                let map: Vec<u32> = orbits
                    .chunks_exact(gamma)
                    .flat_map(|o| (0..gamma).map(move |j| o[(j + shift) % gamma]))
                    .collect();
                digits.push(d.permuted(&map));
            }
            a = coefficients(row)
                .iter()
                .zip(&switched)
                .map(|(&x, &y)| Q.add(x, y))
                .collect();
        }
        InspiringPlan {
            gamma,
            orbits,
            digits,
            a,
        }
    }

    /// The packed `b` part of inputs with these `b` values (the same order and count as the
    /// plan's `a` parts) under the client's body: message `i` in coefficient `i`.
    pub fn pack_b(&self, ring: &Ring, bodies: &InspiringBodies, b_values: &[u64]) -> Vec<u64> {
        self.pack_b_many(ring, &[(bodies, b_values)])
            .pop()
            .expect("one job, one output")
    }

    /// [`InspiringPlan::pack_b`] for several queries at once, each `(bodies, b_values)`: the
    /// same outputs, every switch's digits read once for all of them (a step's 96 KiB stay in
    /// cache while each query's accumulator takes its turn).
    ///
    /// The online pass: `β_0 = 0`, `β_{s+1} = τ_g(β_s) − D_s·K` for the `S = γ − 1` steps, in
    /// the transform domain, where `τ_g` permutes slots (`τ_g(x)[i] = x[π(i)]`) and `D_s·K` is
    /// step `s`'s products of plan digits and key body. In orbit coordinates (slot `π^m(r_o)`
    /// at position `m` of orbit `o`; every orbit has `γ` slots because `g` has order `γ`), `τ_g`
    /// shifts each orbit by one: `β_{s+1}[m] = β_s[m + 1] − (D_s·K)[m]`. Writing
    /// `c_s[j] = β_s[j + S − s]` gives `c_{s+1}[j] = c_s[j] − (D_s·K)[j + S − s − 1]` with
    /// `c_0 = 0` and `c_S = β_S`: the accumulator stays in place, the plan stores step `s`'s
    /// digits already rotated by `S − s − 1` (built so), and the key is read from that
    /// position on — a contiguous run of the key written twice over ([`KeyBody::orbit_key`]).
    /// No gather, no second buffer; the same values as permuting the accumulator every step.
    pub fn pack_b_many(&self, ring: &Ring, jobs: &[(&InspiringBodies, &[u64])]) -> Vec<Vec<u64>> {
        for (_, b_values) in jobs {
            assert!(!b_values.is_empty() && b_values.len() <= self.gamma);
        }
        let jobs: Vec<(&InspiringBodies, usize, &[u64])> =
            jobs.iter().map(|&(k, b)| (k, 0, b)).collect();
        self.accumulate_many(ring, &jobs)
            .into_iter()
            .map(|acc| acc.finish(ring))
            .collect()
    }

    /// The packing before its one division by `P`: `P·β` over the steps this plan holds
    /// ([`InspiringPlan::new_part`]) plus `P·B₀` of the given inputs, modulo `P·Q`, as
    /// residues in the transform domain — linear in both, so the accumulations of plans that
    /// split the steps, over inputs that split the rows, sum to the whole plan's
    /// ([`Accumulated::add`]), and [`Accumulated::finish`] of the sum is exactly
    /// [`InspiringPlan::pack_b`] of all the inputs. Each job is `(bodies, first, b_values)`:
    /// inputs `first … first + len − 1` (none is allowed).
    pub fn accumulate_many(
        &self,
        ring: &Ring,
        jobs: &[(&InspiringBodies, usize, &[u64])],
    ) -> Vec<Accumulated> {
        for (_, first, b_values) in jobs {
            assert!(first + b_values.len() <= self.gamma);
        }
        let n = ring.n();
        let keys: Vec<OrbitKey> = jobs
            .iter()
            .map(|(bodies, _, _)| bodies.0.orbit_key(&self.orbits, self.gamma))
            .collect();
        // P·β modulo P·Q, transformed, in orbit order (module docs).
        let mut acc: Vec<[Vec<u64>; 2]> = jobs
            .iter()
            .map(|_| std::array::from_fn(|_| vec![0u64; n]))
            .collect();
        let steps = self.gamma - 1;
        for s in self.digits.held() {
            let step = self.digits.step(s);
            for (key, [cq, cp]) in keys.iter().zip(&mut acc) {
                key.subtract_rotated(step, steps - s - 1, cq, cp);
            }
        }
        jobs.iter()
            .zip(acc)
            .map(|(&(_, first, b_values), [cq, cp])| {
                // Back to slot order.
                let (mut bq, mut bp) = (vec![0u64; n], vec![0u64; n]);
                for ((&slot, &x), &y) in self.orbits.iter().zip(&cq).zip(&cp) {
                    bq[slot as usize] = x;
                    bp[slot as usize] = y;
                }
                // + P·B₀, B₀ = Σ_i b_i·Xⁱ (0 modulo P).
                if !b_values.is_empty() {
                    let mut b0 = vec![0u64; n];
                    let p_mod_q = P.value % Q.value;
                    for (c, &b) in b0[first..].iter_mut().zip(b_values.iter()) {
                        *c = Q.mul(b, p_mod_q);
                    }
                    ring.ntt.forward(&mut b0);
                    for (x, y) in bq.iter_mut().zip(&b0) {
                        *x = Q.add(*x, *y);
                    }
                }
                Accumulated { q: bq, p: bp }
            })
            .collect()
    }

    /// The packed ciphertext (the plan's `a`, the query's `b`).
    pub fn pack(&self, ring: &Ring, bodies: &InspiringBodies, b_values: &[u64]) -> Ciphertext {
        Ciphertext {
            a: self.a.clone(),
            b: self.pack_b(ring, bodies, b_values),
        }
    }

    /// Inputs the plan packs (`γ`): messages land in coefficients `0 … γ − 1`.
    pub fn width(&self) -> usize {
        self.gamma
    }

    /// The switch steps whose digits the plan holds: all `γ − 1`, or a shard's run.
    pub fn held_steps(&self) -> std::ops::Range<usize> {
        self.digits.held()
    }

    /// The packed output's `a` part: it depends only on the plan, so it is public.
    pub fn a(&self) -> &[u64] {
        &self.a
    }

    /// Bytes the plan holds (its switches' transformed digits dominate).
    pub fn bytes(&self) -> usize {
        8 * self.a.len() + self.digits.byte_len()
    }

    /// Bytes [`InspiringPlan::write_digits`] writes.
    pub fn digits_len(&self) -> usize {
        self.digits.padded_len()
    }

    /// The switches' digits, little-endian (what [`InspiringPlan::share_digits`] reads back).
    pub fn write_digits(&self, out: &mut (impl std::io::Write + ?Sized)) -> std::io::Result<()> {
        self.digits.write(out)
    }

    /// [`InspiringPlan::write_digits`], then drops the digits from memory, keeping only their
    /// SHA-256: the plan cannot pack until [`InspiringPlan::share_digits`] reads them back from
    /// where they were written (a server writes each plan as it is built, so that the plans
    /// are never all in memory at once).
    pub fn write_out_digits(
        &mut self,
        out: &mut (impl std::io::Write + ?Sized),
    ) -> std::io::Result<()> {
        self.digits.write_out(out)
    }

    /// Reads the digits from `bytes[offset..]`, where [`InspiringPlan::write_digits`] (or
    /// [`InspiringPlan::write_out_digits`]) wrote them, instead of holding them: refused unless
    /// they are equal to the digits held (or have the SHA-256 kept of them); the offset after
    /// them.
    pub fn share_digits(&mut self, bytes: &SharedBytes, offset: usize) -> crate::Result<usize> {
        self.digits.share(bytes, offset)
    }

    /// Whether the digits are in the plan's own memory (not shared).
    pub fn digits_owned(&self) -> bool {
        self.digits.is_owned()
    }
}

/// A packing not yet divided by `P` ([`InspiringPlan::accumulate_many`]): residues modulo `Q`
/// and modulo `P`, transformed, in slot order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Accumulated {
    pub q: Vec<u64>,
    pub p: Vec<u64>,
}

impl Accumulated {
    /// Zero (the sum of no parts), for `n` slots.
    pub fn zero(n: usize) -> Accumulated {
        Accumulated {
            q: vec![0; n],
            p: vec![0; n],
        }
    }

    /// Adds `other` residue by residue (both of the same ring; values reduced).
    pub fn add(&mut self, other: &Accumulated) {
        assert!(self.q.len() == other.q.len() && self.p.len() == other.p.len());
        for (x, &y) in self.q.iter_mut().zip(&other.q) {
            *x = Q.add(*x, y);
        }
        for (x, &y) in self.p.iter_mut().zip(&other.p) {
            *x = P.add(*x, y);
        }
    }

    /// The packed `b`: the one rounded division by `P`.
    pub fn finish(self, ring: &Ring) -> Vec<u64> {
        ring.divide_transformed(self.q, self.p)
    }
}

/// The slots orbit by orbit under the permutation `slots` (`π`): `r, π(r), π²(r), …` for each
/// orbit's least slot `r`. Every orbit has `gamma` slots (`g` has order `γ` and acts freely);
/// checked.
fn orbits(slots: &[u32], gamma: usize) -> Vec<u32> {
    let n = slots.len();
    let mut seen = vec![false; n];
    let mut out = Vec::with_capacity(n);
    for r in 0..n {
        if seen[r] {
            continue;
        }
        let mut x = r;
        for _ in 0..gamma {
            assert!(!seen[x], "an orbit shorter than γ");
            seen[x] = true;
            out.push(x as u32);
            x = slots[x] as usize;
        }
        assert_eq!(x, r, "an orbit longer than γ");
    }
    out
}

fn pow_mod(base: usize, exp: usize, m: usize) -> usize {
    (0..exp).fold(1, |acc, _| acc * base % m)
}

/// Heuristic variance proxy (independence assumption) of the error packing `gamma` inputs
/// adds to a message coefficient (module docs).
pub fn added_variance(n: usize, gamma: usize, gadget: Gadget) -> f64 {
    (gamma as f64 - 1.0) * gadget.switch_variance(n) + 0.25
}

/// Rigorous variance proxy of the key errors' share of packing's error (module docs).
pub fn added_gaussian_variance(n: usize, gamma: usize, gadget: Gadget) -> f64 {
    let steps = gamma as f64 - 1.0;
    steps * steps * gadget.switch_gaussian_variance(n)
}

/// Worst case of the rounding share of packing's error (module docs): `(γ − 1)·N/2 + ½`.
pub fn rounding_worst_case(n: usize, gamma: usize) -> f64 {
    (gamma as f64 - 1.0) * n as f64 / 2.0 + 0.5
}

/// The key switches' transformed digits of a plan, one step after another, modulo `Q` and
/// modulo `P`, held or read from shared bytes (a plan's bulk: the online pass streams them):
/// every step, or a row shard's run of them ([`InspiringPlan::new_part`]).
struct StepDigits {
    /// The first step held (0 unless a shard's).
    first: usize,
    /// Steps held.
    steps: usize,
    q: Held<u64>,
    p: Held<u32>,
}

impl StepDigits {
    /// Room for steps `keep` of `total` switches of `digits` digits of `n` values.
    fn with_capacity(
        keep: std::ops::Range<usize>,
        total: usize,
        digits: usize,
        n: usize,
    ) -> StepDigits {
        debug_assert!(keep.end <= total);
        StepDigits {
            first: keep.start,
            steps: 0,
            q: Held::Owned(Vec::with_capacity(keep.len() * digits * n)),
            p: Held::Owned(Vec::with_capacity(keep.len() * digits * n)),
        }
    }

    /// The steps held.
    fn held(&self) -> std::ops::Range<usize> {
        self.first..self.first + self.steps
    }

    fn push(&mut self, digits: SwitchDigits) {
        let (dq, dp) = digits.into_parts();
        match (&mut self.q, &mut self.p) {
            (Held::Owned(q), Held::Owned(p)) => {
                q.extend_from_slice(&dq);
                p.extend_from_slice(&dp);
            }
            _ => unreachable!("digits are pushed before they are shared"),
        }
        self.steps += 1;
    }

    /// Step `i`'s digits (one of [`StepDigits::held`]).
    fn step(&self, i: usize) -> DigitsView<'_> {
        let i = i - self.first;
        let (q, p) = (self.q.get(), self.p.get());
        let (sq, sp) = (q.len() / self.steps, p.len() / self.steps);
        DigitsView {
            q: &q[i * sq..(i + 1) * sq],
            p: &p[i * sp..(i + 1) * sp],
        }
    }

    /// Bytes [`StepDigits::write`] writes.
    fn padded_len(&self) -> usize {
        self.q.padded_len() + self.p.padded_len()
    }

    /// The digits, little-endian (what [`StepDigits::share`] reads back).
    fn write(&self, out: &mut (impl std::io::Write + ?Sized)) -> std::io::Result<()> {
        self.q.write(out)?;
        self.p.write(out)
    }

    /// [`StepDigits::write`], then drops the digits, keeping their SHA-256 ([`Held::write_out`]).
    fn write_out(&mut self, out: &mut (impl std::io::Write + ?Sized)) -> std::io::Result<()> {
        self.q.write_out(out)?;
        self.p.write_out(out)
    }

    /// Reads the digits from `bytes[offset..]`, where [`StepDigits::write`] or
    /// [`StepDigits::write_out`] wrote them, instead of holding them (refused unless they are
    /// equal to the digits held or have the SHA-256 kept of them); the offset after them.
    fn share(&mut self, bytes: &SharedBytes, offset: usize) -> crate::Result<usize> {
        let end = self.q.share(bytes, offset)?;
        self.p.share(bytes, end)
    }

    fn is_owned(&self) -> bool {
        self.q.is_owned() || self.p.is_owned()
    }

    fn byte_len(&self) -> usize {
        self.q.byte_len() + self.p.byte_len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lattice::rlwe::{
        lwe_encrypt, lwe_encrypt_with, lwe_to_rlwe, phase, uniform, LweCiphertext,
    };
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

    /// Packs `count` encryptions of random multiples of 2⁴⁰ into width `gamma`; checks every
    /// message coefficient against the heuristic 2⁻⁴⁰ tail and returns the worst error's
    /// share of it.
    fn check(n: usize, gamma: usize, count: usize, seed: u64) -> f64 {
        let ring = Ring::new(n);
        let mut rng = ChaCha20Rng::seed_from_u64(seed);
        let sk = SecretKey::generate(&ring, &mut rng);
        let masks = InspiringMasks::from_seed(&ring, Gadget::DEFAULT, &[seed as u8; 32], gamma);
        let bodies = masks.bodies(&ring, &sk, &mut rng);
        let (msgs, cts) = random_messages(&ring, &sk, count, &mut rng);
        let a_parts: Vec<Vec<u64>> = cts.iter().map(|c| lwe_to_rlwe(&ring, c).a).collect();
        let b_values: Vec<u64> = cts.iter().map(|c| c.b).collect();
        let plan = InspiringPlan::new(&ring, &masks, &a_parts);
        let got = phase(&ring, &sk, &plan.pack(&ring, &bodies, &b_values));
        let bound =
            (2.0 * 41.0 * std::f64::consts::LN_2 * added_variance(n, gamma, Gadget::DEFAULT))
                .sqrt()
                + 60.0;
        let mut worst = 0i64;
        for (i, &g) in got[..gamma].iter().enumerate() {
            // Padding inputs (i ≥ count) are zero messages.
            let want = msgs.get(i).copied().unwrap_or(0);
            worst = worst.max(error_at(g, want));
        }
        assert!(
            (worst as f64) < bound,
            "n {n} γ {gamma} count {count}: error {worst} bound {bound}"
        );
        worst as f64 / bound
    }

    #[test]
    fn the_partial_trace_keeps_multiples_of_gamma() {
        // T(Xʲ) = γ·Xʲ when γ | j, else 0 — the fact the packing rests on.
        let (n, gamma) = (64usize, 16usize);
        let ring = Ring::new(n);
        let g = generator(n, gamma);
        for j in 0..n {
            let mut x = vec![0u64; n];
            x[j] = 1;
            let mut sum = vec![0u64; n];
            let mut k = 1;
            for _ in 0..gamma {
                let t = ring.automorphism(&x, k);
                sum = sum.iter().zip(&t).map(|(&a, &b)| Q.add(a, b)).collect();
                k = k * g % (2 * n);
            }
            assert_eq!(k, 1, "g has order γ");
            let mut want = vec![0u64; n];
            if j % gamma == 0 {
                want[j] = gamma as u64;
            }
            assert_eq!(sum, want, "j = {j}");
        }
    }

    #[test]
    fn packing_places_every_message_in_order() {
        for (n, gamma, count, seed) in [
            (64usize, 32usize, 32usize, 1u64),
            (64, 32, 5, 2),
            (64, 2, 2, 3),
            (64, 1, 1, 4),
            (256, 128, 100, 5),
            (1024, 512, 512, 6),
        ] {
            check(n, gamma, count, seed);
        }
    }

    #[test]
    fn one_plan_serves_fresh_secrets_and_other_keys_do_not_open_it() {
        let (n, gamma, count) = (256usize, 128usize, 100usize);
        let ring = Ring::new(n);
        let mut rng = ChaCha20Rng::seed_from_u64(10);
        let a_fixed: Vec<Vec<u64>> = (0..count)
            .map(|_| (0..n).map(|_| uniform(&mut rng)).collect())
            .collect();
        let masks = InspiringMasks::from_seed(&ring, Gadget::DEFAULT, &[5; 32], gamma);
        let rlwe_a: Vec<Vec<u64>> = a_fixed
            .iter()
            .map(|a| lwe_to_rlwe(&ring, &LweCiphertext { a: a.clone(), b: 0 }).a)
            .collect();
        let plan = InspiringPlan::new(&ring, &masks, &rlwe_a);
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
                assert!(error_at(got[i], m) < 1 << 30, "message {i}");
            }
            let other = masks.bodies(&ring, &SecretKey::generate(&ring, &mut rng), &mut rng);
            let wrong = phase(&ring, &sk, &plan.pack(&ring, &other, &b_parts));
            assert!((0..count).any(|i| error_at(wrong[i], msgs[i]) > 1 << 50));
        }
    }

    #[test]
    fn bodies_cross_the_wire_and_bad_lengths_are_refused() {
        let ring = Ring::new(64);
        let mut rng = ChaCha20Rng::seed_from_u64(3);
        let sk = SecretKey::generate(&ring, &mut rng);
        let masks = InspiringMasks::from_seed(&ring, Gadget::DEFAULT, &[1; 32], 16);
        let mut bytes = Vec::new();
        masks.bodies(&ring, &sk, &mut rng).write(&mut bytes);
        assert_eq!(bytes.len(), InspiringBodies::wire_len(64, Gadget::DEFAULT));
        assert!(InspiringBodies::read(64, Gadget::DEFAULT, &bytes).is_ok());
        assert!(InspiringBodies::read(64, Gadget::DEFAULT, &bytes[1..]).is_err());
    }

    #[test]
    fn packing_error_stays_within_the_bound_at_the_deployed_width() {
        let ratio = check(lattice::N, lattice::N / 2, lattice::N / 2, 9);
        eprintln!("worst packing error / its 2^-40 bound at N = 4096, γ = 2048: {ratio:.3}");
        assert!(ratio > 0.05, "the error is real, not zero ({ratio})");
    }
}
