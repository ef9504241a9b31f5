//! Arithmetic modulo the ring's two primes: the ciphertext modulus `Q = 2⁶² − 2¹⁶ + 1` and the
//! key-switching *special* modulus `P = 2³² − 2²⁰ + 1` (`0xfff0_0001`, the largest prime below
//! 2³² that is `≡ 1 (mod 2¹⁶)`). A 32-bit `P` keeps every value modulo `P` in a `u32`: the
//! server's packing plans hold a quarter less, and the key bodies a client uploads a seventh
//! less, than with the 46-bit prime used before; the switching error it adds stays far below
//! the scores' margin ([`super::rlwe`]).
//!
//! Both are `≡ 1 (mod 2¹⁶)`, so each has primitive 2N-th roots of unity for every power-of-two
//! `N ≤ 2¹⁵` (the negacyclic NTT needs one). `P·Q < 2⁹⁴`. Values are kept reduced in
//! `[0, q)`; `q < 2⁶²` leaves two spare bits, so sums of up to four reduced values never
//! overflow a `u64` (the lazy NTT relies on it).

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

    #[inline]
    pub fn add(self, a: u64, b: u64) -> u64 {
        let s = a + b;
        if s >= self.value {
            s - self.value
        } else {
            s
        }
    }

    #[inline]
    pub fn sub(self, a: u64, b: u64) -> u64 {
        if a >= b {
            a - b
        } else {
            a + self.value - b
        }
    }

    #[inline]
    pub fn neg(self, a: u64) -> u64 {
        if a == 0 {
            0
        } else {
            self.value - a
        }
    }

    /// `x mod q` for `x < 2^(2·bits)` (Barrett): the estimate
    /// `q̂ = ⌊⌊x/2^(bits−1)⌋·μ / 2^(bits+1)⌋` is below `⌊x/q⌋` by at most 2 (Barrett 1986;
    /// Menezes et al., Handbook of Applied Cryptography, Fact 14.43), so `x − q̂·q < 3q` and two
    /// conditional subtractions finish.
    #[inline]
    pub fn reduce(self, x: u128) -> u64 {
        debug_assert!(x >> (2 * self.bits) == 0);
        let qhat = ((x >> (self.bits - 1)) * self.mu as u128) >> (self.bits + 1);
        let mut r = (x - qhat * self.value as u128) as u64;
        if r >= self.value {
            r -= self.value;
        }
        if r >= self.value {
            r -= self.value;
        }
        r
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

    /// A signed integer as an element of `Z_q`.
    #[inline]
    pub fn from_i64(self, x: i64) -> u64 {
        let mag = x.unsigned_abs();
        // The common case (digits, errors, residues of the other prime) needs no division.
        let r = if mag < self.value {
            mag
        } else {
            mag % self.value
        };
        if x >= 0 {
            r
        } else {
            self.neg(r)
        }
    }

    /// The centered representative of `a` in `(−q/2, q/2]`.
    #[inline]
    pub fn centered(self, a: u64) -> i64 {
        if a > self.value / 2 {
            a as i64 - self.value as i64
        } else {
            a as i64
        }
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

    /// `a·w mod q` for any `a < 2⁶⁴`.
    #[inline]
    pub fn times(self, a: u64) -> u64 {
        let r = self.times_lazy(a);
        if r >= self.q {
            r - self.q
        } else {
            r
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

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
            if a != 0 {
                prop_assert_eq!(m.mul(a, m.inv(a)), 1);
            }
        }

        #[test]
        fn signed_values_round_trip(x in -(1i64 << 45)..(1i64 << 45)) {
            prop_assert_eq!(Q.centered(Q.from_i64(x)), x);
            // P holds the gadget's digits, |d| ≤ 2³⁰ + 1 (below P/2 ≈ 2³¹ − 2¹⁹).
            let d = (x >> 15) + x.signum();
            prop_assert_eq!(P.centered(P.from_i64(d)), d);
        }
    }
}
