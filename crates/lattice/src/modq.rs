//! Arithmetic modulo the ring's two primes: the ciphertext modulus `Q = 2⁶² − 2¹⁶ + 1` and the
//! key-switching *special* modulus `P = 2³² − 2²⁰ + 1` (`0xfff0_0001`, the largest prime below
//! 2³² that is `≡ 1 (mod 2¹⁶)`). A 32-bit `P` keeps every value modulo `P` in a `u32`: the
//! server's packing plans hold a quarter less, and the key bodies a client uploads a seventh
//! less, than with the 46-bit prime used before; the switching error it adds stays far below
//! the scores' margin ([`crate::rlwe`]).
//!
//! Both are `≡ 1 (mod 2¹⁶)`, so each has primitive 2N-th roots of unity for every power-of-two
//! `N ≤ 2¹⁵` (the negacyclic NTT needs one). `P·Q < 2⁹⁴`. Values are kept reduced in
//! `[0, q)`; `q < 2⁶²` leaves two spare bits, so sums of up to four reduced values never
//! overflow a `u64` (the lazy NTT relies on it).
//!
//! # Constant time
//! The client runs this arithmetic on its secrets (ternary keys, errors, the query vector, the
//! decrypted phases), so no operation here branches on a value: every conditional
//! subtraction is [`csub`] (the sign bit of a wrapped difference selects), [`Modulus::centered`]
//! and [`Modulus::from_i64`] are mask arithmetic, and nothing indexes a table by a value. The
//! results are bit-identical to the branching forms (the transcript digests pin them). Only
//! [`Modulus::pow`], [`Modulus::inv`] and [`Modulus::root_of_unity`] branch, on public
//! exponents and constants.

/// `x − m` if `x ≥ m`, else `x`, without a branch: the wrapped difference's sign bit selects.
/// Needs `m < 2⁶³` and `x < m + 2⁶³` (so `x − m`, when it does not wrap, is below 2⁶³).
#[inline(always)]
pub fn csub(x: u64, m: u64) -> u64 {
    let t = x.wrapping_sub(m);
    t.wrapping_add(m & sign_mask(t))
}

/// All ones if the top bit of `x` is set, else 0.
#[inline(always)]
fn sign_mask(x: u64) -> u64 {
    ((x as i64) >> 63) as u64
}

/// A prime modulus below 2⁶² with its Barrett constant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Modulus {
    pub value: u64,
    bits: u32,
    /// `⌊2^(2·bits) / value⌋` (below 2^(bits+1)).
    mu: u64,
}

/// The ciphertext modulus.
pub const Q: Modulus = Modulus::new(0x3fff_ffff_ffff_0001);
/// The special modulus of key-switching keys (they live modulo `P·Q`); below 2³², so its
/// residues are stored as `u32`.
pub const P: Modulus = Modulus::new(0xfff0_0001);

impl Modulus {
    pub const fn new(value: u64) -> Modulus {
        assert!(value > 2 && value < 1 << 62);
        let bits = 64 - value.leading_zeros();
        Modulus {
            value,
            bits,
            mu: ((1u128 << (2 * bits)) / value as u128) as u64,
        }
    }

    /// Bits of the modulus.
    pub fn bits(self) -> u32 {
        self.bits
    }

    /// `a + b` (both reduced); branch-free (module docs).
    #[inline]
    pub fn add(self, a: u64, b: u64) -> u64 {
        csub(a + b, self.value)
    }

    /// `a − b` (both reduced); branch-free: `q` is added back when the difference wraps.
    #[inline]
    pub fn sub(self, a: u64, b: u64) -> u64 {
        let t = a.wrapping_sub(b);
        t.wrapping_add(self.value & sign_mask(t))
    }

    /// `−a` (reduced; `−0 = 0`); branch-free.
    #[inline]
    pub fn neg(self, a: u64) -> u64 {
        csub(self.value - a, self.value)
    }

    /// `x mod q` for `x < 2^(2·bits)` (Barrett): the estimate
    /// `q̂ = ⌊⌊x/2^(bits−1)⌋·μ / 2^(bits+1)⌋` is below `⌊x/q⌋` by at most 2 (Barrett 1986;
    /// Menezes et al., Handbook of Applied Cryptography, Fact 14.43), so `x − q̂·q < 3q` and two
    /// conditional subtractions (branch-free) finish.
    #[inline]
    pub fn reduce(self, x: u128) -> u64 {
        debug_assert!(x >> (2 * self.bits) == 0);
        let qhat = ((x >> (self.bits - 1)) * self.mu as u128) >> (self.bits + 1);
        let r = (x - qhat * self.value as u128) as u64;
        csub(csub(r, self.value), self.value)
    }

    #[inline]
    pub fn mul(self, a: u64, b: u64) -> u64 {
        self.reduce(a as u128 * b as u128)
    }

    pub fn pow(self, mut base: u64, mut exp: u64) -> u64 {
        let mut acc = 1u64;
        while exp > 0 {
            if exp & 1 == 1 {
                acc = self.mul(acc, base);
            }
            base = self.mul(base, base);
            exp >>= 1;
        }
        acc
    }

    /// The inverse of a non-zero `a` (Fermat).
    pub fn inv(self, a: u64) -> u64 {
        debug_assert!(!a.is_multiple_of(self.value));
        self.pow(a, self.value - 2)
    }

    /// A signed integer `x` with `|x| < q` as an element of `Z_q`, branch-free (`x + q` when
    /// `x` is negative: its sign, as a mask, selects `q`). Secrets pass through here — ternary
    /// key coefficients and Gaussian errors (`rlwe`, packing), the client's query vector
    /// (`pir::scores::query`) — all far below `q`; so do public values: gadget digits
    /// (`|d| ≤ 2³⁰ + 1 < P`), the other prime's centered residues (`< P/2 < Q`), the server's
    /// plane sums and database entries (`< 2⁵⁹`). A larger magnitude is a caller's bug (checked in debug
    /// builds); [`Modulus::from_i64_wide`] takes any `i64`, for public values only.
    #[inline]
    pub fn from_i64(self, x: i64) -> u64 {
        debug_assert!(
            x.unsigned_abs() < self.value,
            "from_i64 needs |x| < q; use from_i64_wide"
        );
        (x as u64).wrapping_add(self.value & sign_mask(x as u64))
    }

    /// Any `i64` as an element of `Z_q`. It divides when `|x| ≥ q`, so its time depends on
    /// `x`: for public values only (no caller in the scheme needs it today).
    pub fn from_i64_wide(self, x: i64) -> u64 {
        let r = x.unsigned_abs() % self.value;
        if x >= 0 {
            r
        } else {
            self.neg(r)
        }
    }

    /// The centered representative of `a` (reduced) in `(−q/2, q/2]`, branch-free: `q` is
    /// subtracted under the mask of `q/2 − a`'s sign (decrypted phases pass through here).
    #[inline]
    pub fn centered(self, a: u64) -> i64 {
        let above = sign_mask((self.value / 2).wrapping_sub(a));
        a as i64 - (self.value & above) as i64
    }

    /// A primitive `order`-th root of unity (`order` a power of two dividing `2¹⁶`).
    pub fn root_of_unity(self, order: u64) -> u64 {
        assert!(order.is_power_of_two() && (self.value - 1).is_multiple_of(order));
        // A quadratic non-residue g gives g^((q−1)/order) of exact order `order`: its
        // order/2-th power is g^((q−1)/2) = −1.
        let g = (2..)
            .find(|&g| self.pow(g, (self.value - 1) / 2) == self.value - 1)
            .expect("a non-residue exists");
        self.pow(g, (self.value - 1) / order)
    }

    /// `w` prepared for many products ([`Shoup`]).
    pub fn shoup(self, w: u64) -> Shoup {
        debug_assert!(w < self.value);
        Shoup {
            w,
            w_shoup: (((w as u128) << 64) / self.value as u128) as u64,
            q: self.value,
        }
    }
}

/// A constant multiplier with its Shoup companion `⌊w·2⁶⁴/q⌋`: `a·w mod q` in two
/// multiplications (the NTT's twiddles, used many times each).
#[derive(Clone, Copy, Debug)]
pub struct Shoup {
    w: u64,
    w_shoup: u64,
    q: u64,
}

impl Shoup {
    /// The multiplier itself.
    pub fn value(self) -> u64 {
        self.w
    }

    /// `a·w mod q` for any `a < 2⁶⁴` (branch-free: key bodies multiply secrets by it).
    #[inline]
    pub fn times(self, a: u64) -> u64 {
        csub(self.times_lazy(a), self.q)
    }

    /// `a·w mod q` up to one extra `q` (in `[0, 2q)`): the estimate `⌊a·w_shoup/2⁶⁴⌋` is at
    /// most one below `⌊a·w/q⌋` (Shoup; Harvey 2014, Lemma 1).
    #[inline]
    pub fn times_lazy(self, a: u64) -> u64 {
        let qhat = ((a as u128 * self.w_shoup as u128) >> 64) as u64;
        a.wrapping_mul(self.w)
            .wrapping_sub(qhat.wrapping_mul(self.q))
    }
}

/// A constant multiplier modulo `Q` with its Shoup companion, without [`Shoup`]'s copy of the
/// modulus: 16 bytes where many are held and streamed (key bodies, packing tables).
/// `repr(C)`: the AVX-512 kernels (`crate::avx512`) read eight of them as sixteen `u64`.
#[derive(Clone, Copy, Debug)]
#[repr(C)]
pub struct ShoupQ {
    w: u64,
    w_shoup: u64,
}

impl ShoupQ {
    pub fn new(w: u64) -> ShoupQ {
        let s = Q.shoup(w);
        ShoupQ {
            w: s.w,
            w_shoup: s.w_shoup,
        }
    }

    /// The multiplier itself.
    pub fn value(self) -> u64 {
        self.w
    }

    /// `a·w mod Q` for any `a < 2⁶⁴` (as [`Shoup::times`]).
    #[inline]
    pub fn times(self, a: u64) -> u64 {
        let qhat = ((a as u128 * self.w_shoup as u128) >> 64) as u64;
        csub(
            a.wrapping_mul(self.w)
                .wrapping_sub(qhat.wrapping_mul(Q.value)),
            Q.value,
        )
    }
}

/// A constant multiplier modulo `P` (below 2³²) with its 32-bit Shoup companion
/// `⌊w·2³²/P⌋`: `a·w mod P` for `a < 2³²` from three 32 × 32 → 64-bit products, which AVX2
/// does four at a time (the 64-bit [`Shoup`] needs a 64 × 64 → 128-bit one). Half the bytes of
/// a [`Shoup`], too: key bodies and packing tables hold one per residue modulo `P`.
/// `repr(C)`: the AVX-512 kernels read each as one 64-bit lane, the multiplier low.
#[derive(Clone, Copy, Debug)]
#[repr(C)]
pub struct ShoupP {
    w: u32,
    w_shoup: u32,
}

impl ShoupP {
    pub fn new(w: u64) -> ShoupP {
        assert!(w < P.value);
        ShoupP {
            w: w as u32,
            w_shoup: ((w << 32) / P.value) as u32,
        }
    }

    /// The multiplier itself.
    pub fn value(self) -> u64 {
        u64::from(self.w)
    }

    /// `a·w mod P` for any `a < 2³²`: `a·w − ⌊a·w_shoup/2³²⌋·P` lies in `[0, 2P)` (Harvey
    /// 2014, Lemma 1, with β = 2³² > P), exact in a `u64`; one conditional subtraction ends it.
    #[inline]
    pub fn times(self, a: u32) -> u64 {
        let qhat = (u64::from(a) * u64::from(self.w_shoup)) >> 32;
        csub(u64::from(a) * u64::from(self.w) - qhat * P.value, P.value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn shoup_q_multiplies_exactly(a in any::<u64>(), w in 0..Q.value) {
            let want = (u128::from(a) * u128::from(w) % u128::from(Q.value)) as u64;
            prop_assert_eq!(ShoupQ::new(w).times(a), want);
        }

        #[test]
        fn shoup_p_multiplies_exactly(a in any::<u32>(), w in 0..P.value) {
            prop_assert_eq!(ShoupP::new(w).times(a), P.reduce(u128::from(a) * u128::from(w)));
        }
    }

    fn is_prime(n: u64) -> bool {
        // Deterministic Miller–Rabin for 64-bit inputs.
        let mulm = |a: u64, b: u64| (a as u128 * b as u128 % n as u128) as u64;
        let powm = |mut b: u64, mut e: u64| {
            let mut r = 1u64;
            while e > 0 {
                if e & 1 == 1 {
                    r = mulm(r, b);
                }
                b = mulm(b, b);
                e >>= 1;
            }
            r
        };
        let (mut d, mut s) = (n - 1, 0);
        while d % 2 == 0 {
            d /= 2;
            s += 1;
        }
        [2u64, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37]
            .iter()
            .all(|&a| {
                let mut x = powm(a, d);
                if x == 1 || x == n - 1 {
                    return true;
                }
                (1..s).any(|_| {
                    x = mulm(x, x);
                    x == n - 1
                })
            })
    }

    #[test]
    fn the_moduli_are_primes_of_the_stated_form() {
        for m in [Q, P] {
            assert!(is_prime(m.value));
            assert_eq!((m.value - 1) % (1 << 16), 0);
        }
        assert_eq!(Q.value, (1u64 << 62) - (1 << 16) + 1);
        assert_eq!((Q.bits(), P.bits()), (62, 32));
        assert!(u32::try_from(P.value).is_ok(), "P's residues fit a u32");
        // The gadget's extreme digits, ±(2³⁰ + 1), are centered residues modulo P.
        for d in [-(1i64 << 30) - 1, (1 << 30) + 1] {
            assert_eq!(P.centered(P.from_i64(d)), d);
        }
        assert!(
            ((Q.value as u128 * P.value as u128) >> 94) == 0,
            "P·Q < 2⁹⁴"
        );
    }

    #[test]
    fn roots_have_exact_order() {
        for m in [Q, P] {
            for order in [2u64, 8, 4096, 8192, 1 << 16] {
                let w = m.root_of_unity(order);
                assert_eq!(m.pow(w, order), 1);
                assert_eq!(m.pow(w, order / 2), m.value - 1);
            }
        }
    }

    proptest! {
        #[test]
        fn arithmetic_matches_wide_integers(a in any::<u64>(), b in any::<u64>(), x in any::<u128>(), big in any::<bool>()) {
            let m = if big { Q } else { P };
            let q = m.value as u128;
            let (a, b) = (a % m.value, b % m.value);
            prop_assert_eq!(m.mul(a, b) as u128, a as u128 * b as u128 % q);
            let x = x >> (128 - 2 * m.bits());
            prop_assert_eq!(m.reduce(x) as u128, x % q);
            prop_assert_eq!(m.shoup(b).times(a), m.mul(a, b));
            prop_assert_eq!(m.shoup(b).times(u64::MAX) as u128, u64::MAX as u128 * b as u128 % q);
            prop_assert_eq!(m.add(a, b) as u128, (a as u128 + b as u128) % q);
            prop_assert_eq!(m.add(m.sub(a, b), b), a);
            prop_assert_eq!(m.add(a, m.neg(a)), 0);
            // The branch-free forms agree with the branching ones they replaced.
            prop_assert_eq!(m.add(a, b), if a + b >= m.value { a + b - m.value } else { a + b });
            prop_assert_eq!(m.sub(a, b), if a >= b { a - b } else { a + m.value - b });
            prop_assert_eq!(m.neg(a), if a == 0 { 0 } else { m.value - a });
            let half = m.value / 2;
            let c = if a > half { a as i64 - m.value as i64 } else { a as i64 };
            prop_assert_eq!(m.centered(a), c);
            prop_assert_eq!(csub(a + m.value, m.value), a);
            prop_assert_eq!(csub(x as u64 % (4 * m.value), 2 * m.value), {
                let y = x as u64 % (4 * m.value);
                if y >= 2 * m.value { y - 2 * m.value } else { y }
            });
            if a != 0 {
                prop_assert_eq!(m.mul(a, m.inv(a)), 1);
            }
        }

        #[test]
        fn signed_values_round_trip(x in -(1i64 << 45)..(1i64 << 45)) {
            prop_assert_eq!(Q.centered(Q.from_i64(x)), x);
            prop_assert_eq!(Q.from_i64(x), Q.from_i64_wide(x));
            // P holds the gadget's digits, |d| ≤ 2³⁰ + 1 (below P/2 ≈ 2³¹ − 2¹⁹).
            let d = (x >> 15) + x.signum();
            prop_assert_eq!(P.centered(P.from_i64(d)), d);
        }
    }
}
