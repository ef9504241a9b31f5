//! The negacyclic number-theoretic transform of `Z_q[X]/(Xᴺ + 1)` (q = Q or P): polynomial products in
//! `O(N log N)`.
//!
//! Forward: Cooley–Tukey butterflies with the powers of a primitive 2N-th root `ψ` in
//! bit-reversed order (Longa & Naehrig 2016, Algorithm 1), so no separate twist or
//! permutation is needed; the output is in bit-reversed order, which is fine for pointwise
//! products. Inverse: Gentleman–Sande with `ψ⁻¹`, then the factor `N⁻¹`.
//!
//! The client transforms its secret key and errors, so the butterflies' conditional
//! subtractions are branch-free ([`csub`]); the loops' shape depends only on `N`.

use crate::modq::{csub, Modulus, Shoup};

/// Twiddle tables for one ring degree.
#[derive(Debug)]
pub struct Ntt {
    n: usize,
    m: Modulus,
    psi_rev: Vec<Shoup>,
    inv_psi_rev: Vec<Shoup>,
    n_inv: Shoup,
}

fn bit_reverse(x: usize, bits: u32) -> usize {
    x.reverse_bits() >> (usize::BITS - bits)
}

impl Ntt {
    /// Tables for degree `n` (a power of two, `2 ≤ n ≤ 2¹⁵`) modulo `m`.
    pub fn new(n: usize, m: Modulus) -> Ntt {
        assert!(n.is_power_of_two() && (2..=1 << 15).contains(&n));
        let bits = n.trailing_zeros();
        let psi = m.root_of_unity(2 * n as u64);
        let table = |root: u64| {
            (0..n)
                .map(|k| m.shoup(m.pow(root, bit_reverse(k, bits) as u64)))
                .collect::<Vec<_>>()
        };
        Ntt {
            n,
            m,
            psi_rev: table(psi),
            inv_psi_rev: table(m.inv(psi)),
            n_inv: m.shoup(m.inv(n as u64)),
        }
    }

    /// `τ_k` (`X ↦ Xᵏ`, `k` odd) on transformed values: `forward(τ_k(a))[i] =
    /// forward(a)[slots[i]]`. Slot `i` holds `a(ψ^(2·rev(i) + 1))` (the butterflies' order), and
    /// `τ_k(a)(ω) = a(ωᵏ)`, so slot `i` takes the slot of `ψ^((2·rev(i) + 1)·k mod 2N)`: a
    /// permutation, because `k` is a unit modulo `2N`. Public (it depends only on `N` and `k`).
    pub fn automorphism_slots(&self, k: usize) -> Slots {
        Slots(
            (0..self.n)
                .map(|i| self.automorphism_slot(i, k) as u32)
                .collect(),
        )
    }

    /// Entry `i` of [`Ntt::automorphism_slots`]`(k)`.
    #[inline]
    pub fn automorphism_slot(&self, i: usize, k: usize) -> usize {
        assert!(k % 2 == 1, "automorphisms need odd k");
        let bits = self.n.trailing_zeros();
        let e = ((2 * bit_reverse(i, bits) + 1) * k) & (2 * self.n - 1);
        bit_reverse((e - 1) / 2, bits)
    }

    pub fn modulus(&self) -> Modulus {
        self.m
    }

    pub fn degree(&self) -> usize {
        self.n
    }

    /// Coefficients (reduced) to evaluations (reduced), in place.
    ///
    /// Harvey's lazy butterflies: values stay in `[0, 4q)` between stages (`4q < 2⁶⁴`), the
    /// twiddle product in `[0, 2q)` ([`Shoup::times_lazy`]), and one pass reduces at the end.
    pub fn forward(&self, a: &mut [u64]) {
        assert_eq!(a.len(), self.n);
        #[cfg(target_arch = "x86_64")]
        {
            if crate::fast_x86() {
                // SAFETY: the CPU supports AVX2 and BMI2 (checked just above).
                return unsafe { self.forward_avx2(a) };
            }
        }
        self.forward_portable(a)
    }

    /// The same code compiled for AVX2 and BMI2 (`mulx`): 1.6× faster on our machines.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,bmi2")]
    unsafe fn forward_avx2(&self, a: &mut [u64]) {
        self.forward_portable(a)
    }

    #[inline(always)]
    fn forward_portable(&self, a: &mut [u64]) {
        let two_q = 2 * self.m.value;
        let mut t = self.n;
        let mut m = 1;
        while m < self.n {
            t /= 2;
            stage(a, t, &self.psi_rev[m..2 * m], |x, y, s| {
                let u = csub(*x, two_q);
                let v = s.times_lazy(*y);
                *x = u + v;
                *y = u + two_q - v;
            });
            m *= 2;
        }
        let q = self.m.value;
        for x in a.iter_mut() {
            // From [0, 4q) to [0, q).
            *x = csub(csub(*x, 2 * q), q);
        }
    }

    /// Evaluations (reduced) back to coefficients (reduced), in place; lazy like
    /// [`Ntt::forward`], values in `[0, 2q)` between stages.
    pub fn inverse(&self, a: &mut [u64]) {
        assert_eq!(a.len(), self.n);
        #[cfg(target_arch = "x86_64")]
        {
            if crate::fast_x86() {
                // SAFETY: the CPU supports AVX2 and BMI2 (checked just above).
                return unsafe { self.inverse_avx2(a) };
            }
        }
        self.inverse_portable(a)
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,bmi2")]
    unsafe fn inverse_avx2(&self, a: &mut [u64]) {
        self.inverse_portable(a)
    }

    #[inline(always)]
    fn inverse_portable(&self, a: &mut [u64]) {
        let two_q = 2 * self.m.value;
        let mut t = 1;
        let mut m = self.n;
        while m > 1 {
            let h = m / 2;
            stage(a, t, &self.inv_psi_rev[h..m], |x, y, s| {
                let (u, v) = (*x, *y);
                *x = csub(u + v, two_q);
                *y = s.times_lazy(u + two_q - v);
            });
            t *= 2;
            m = h;
        }
        for x in a.iter_mut() {
            *x = self.n_inv.times(*x);
        }
    }
}

/// One stage of butterflies: blocks of `2t` values, each with its twiddle, pairing value `j`
/// with `j + t`; when `t = 1` the pairs are taken whole (no per-pair slicing).
#[inline(always)]
fn stage(
    a: &mut [u64],
    t: usize,
    twiddles: &[Shoup],
    butterfly: impl Fn(&mut u64, &mut u64, Shoup),
) {
    if t == 1 {
        for (pair, &s) in a.chunks_exact_mut(2).zip(twiddles) {
            let (x, y) = pair.split_at_mut(1);
            butterfly(&mut x[0], &mut y[0], s);
        }
    } else {
        for (block, &s) in a.chunks_exact_mut(2 * t).zip(twiddles) {
            let (lo, hi) = block.split_at_mut(t);
            for (x, y) in lo.iter_mut().zip(hi.iter_mut()) {
                butterfly(x, y, s);
            }
        }
    }
}

/// A permutation of slots, `0 … len − 1` each once: made only by
/// [`Ntt::automorphism_slots`], so code that gathers through it (the AVX-512 packing step)
/// needs no bounds check per use.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Slots(Vec<u32>);

impl std::ops::Deref for Slots {
    type Target = [u32];
    fn deref(&self) -> &[u32] {
        &self.0
    }
}

impl<'a> IntoIterator for &'a Slots {
    type Item = &'a u32;
    type IntoIter = std::slice::Iter<'a, u32>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::modq::{P, Q};
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha20Rng;

    /// Schoolbook product in `Z_m[X]/(Xᴺ + 1)`.
    fn negacyclic(m: Modulus, a: &[u64], b: &[u64]) -> Vec<u64> {
        let n = a.len();
        let mut c = vec![0u64; n];
        for (i, &x) in a.iter().enumerate() {
            for (j, &y) in b.iter().enumerate() {
                let p = m.mul(x, y);
                let k = i + j;
                if k < n {
                    c[k] = m.add(c[k], p);
                } else {
                    c[k - n] = m.sub(c[k - n], p);
                }
            }
        }
        c
    }

    #[test]
    fn transforms_invert_and_multiply_negacyclically() {
        let mut rng = ChaCha20Rng::seed_from_u64(1);
        for (n, m) in [(2usize, Q), (8, P), (64, Q), (256, P), (256, Q)] {
            let ntt = Ntt::new(n, m);
            let a: Vec<u64> = (0..n).map(|_| rng.random_range(0..m.value)).collect();
            let b: Vec<u64> = (0..n).map(|_| rng.random_range(0..m.value)).collect();
            let (mut fa, mut fb) = (a.clone(), b.clone());
            ntt.forward(&mut fa);
            ntt.forward(&mut fb);
            let mut back = fa.clone();
            ntt.inverse(&mut back);
            assert_eq!(back, a, "n = {n}");
            let mut c: Vec<u64> = fa.iter().zip(&fb).map(|(&x, &y)| m.mul(x, y)).collect();
            ntt.inverse(&mut c);
            assert_eq!(c, negacyclic(m, &a, &b), "n = {n}");
        }
    }

    #[test]
    fn automorphisms_permute_the_slots() {
        let mut rng = ChaCha20Rng::seed_from_u64(2);
        for (n, m) in [(8usize, Q), (64, P), (4096, Q), (4096, P)] {
            let ntt = Ntt::new(n, m);
            let a: Vec<u64> = (0..n).map(|_| rng.random_range(0..m.value)).collect();
            let mut fa = a.clone();
            ntt.forward(&mut fa);
            for k in [3usize, 5, 2 * n - 1, n + 1, 2 * n / 4 + 1] {
                // τ_k in coefficient form: coefficient i to i·k mod 2N, negated past N.
                let mut t = vec![0u64; n];
                for (i, &c) in a.iter().enumerate() {
                    let j = (i * k) % (2 * n);
                    if j < n {
                        t[j] = c;
                    } else {
                        t[j - n] = m.neg(c);
                    }
                }
                ntt.forward(&mut t);
                let slots = ntt.automorphism_slots(k);
                let permuted: Vec<u64> = slots.iter().map(|&s| fa[s as usize]).collect();
                assert_eq!(permuted, t, "n = {n}, k = {k}");
            }
        }
    }

    #[test]
    fn x_to_the_n_is_minus_one() {
        let n = 16;
        let ntt = Ntt::new(n, Q);
        let mut x = vec![0u64; n];
        x[n - 1] = 1; // X^(N−1)
        let mut y = vec![0u64; n];
        y[1] = 1; // X
        ntt.forward(&mut x);
        ntt.forward(&mut y);
        let mut p: Vec<u64> = x.iter().zip(&y).map(|(&a, &b)| Q.mul(a, b)).collect();
        ntt.inverse(&mut p);
        let mut want = vec![0u64; n];
        want[0] = Q.value - 1;
        assert_eq!(p, want);
    }
}
