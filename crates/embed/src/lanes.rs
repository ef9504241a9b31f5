//! Explicit SIMD for the kernel loops of Algorithm 1's client, with results bit-identical
//! across targets.
//!
//! Why explicit: LLVM vectorises the plain loops, but in WebAssembly it splits the fused `W·X`
//! loop into shuffles and scalar code, and it lowers `f64::max` (in the exponential) to a call
//! of `fmax` per lane, which halves the speed of the kernel weights. [`F2`] (two f64) and [`F4`]
//! (four f32) are one SIMD128 register in the browser (`.cargo/config.toml` enables it) and
//! arrays of scalars elsewhere; [`Lanes`] lets one generic function run on a scalar or a vector.
//! Only lane-wise IEEE operations are used (no fused multiply-add, no reassociation; horizontal
//! sums in a fixed order), so a value computed in any lane of any build rounds exactly as the
//! scalar code does: native and wasm releases stay identical.

/// Lane-wise arithmetic on `LANES` values of type `Elem` (f64 or f32).
pub trait Lanes: Copy {
    type Elem: Copy + std::ops::Add<Output = Self::Elem>;
    const LANES: usize;
    fn splat(v: Self::Elem) -> Self;
    /// The first `LANES` values of `s`.
    fn load(s: &[Self::Elem]) -> Self;
    /// Into the first `LANES` values of `s`.
    fn store(self, s: &mut [Self::Elem]);
    /// The sum of the lanes, first to last.
    fn hsum(self) -> Self::Elem;
    fn add(self, o: Self) -> Self;
    fn sub(self, o: Self) -> Self;
    fn mul(self, o: Self) -> Self;
    /// `if self < o { t } else { f }` per lane (false for NaN).
    fn lt_select(self, o: Self, t: Self, f: Self) -> Self;
    /// `if self < o { o } else { self }` per lane (`self` for NaN): one instruction in
    /// WebAssembly (`f64x2.pmax`), unlike `f64::max`.
    fn pmax(self, o: Self) -> Self;
    /// `if o < self { o } else { self }` per lane (`self` for NaN; `f64x2.pmin`).
    fn pmin(self, o: Self) -> Self;
    /// `2^k` from `t = shifter + k` (the rounding trick of the exponentials): adds the
    /// exponent bias to the bits of `t` and shifts them into the exponent field, wrapping.
    fn exponent_bits(self) -> Self;
}

macro_rules! scalar_lanes {
    ($t:ty, $bias:expr, $shift:expr) => {
        impl Lanes for $t {
            type Elem = $t;
            const LANES: usize = 1;
            #[inline(always)]
            fn splat(v: $t) -> $t {
                v
            }
            #[inline(always)]
            fn load(s: &[$t]) -> $t {
                s[0]
            }
            #[inline(always)]
            fn store(self, s: &mut [$t]) {
                s[0] = self;
            }
            #[inline(always)]
            fn hsum(self) -> $t {
                self
            }
            #[inline(always)]
            fn add(self, o: $t) -> $t {
                self + o
            }
            #[inline(always)]
            fn sub(self, o: $t) -> $t {
                self - o
            }
            #[inline(always)]
            fn mul(self, o: $t) -> $t {
                self * o
            }
            #[inline(always)]
            fn lt_select(self, o: $t, t: $t, f: $t) -> $t {
                if self < o {
                    t
                } else {
                    f
                }
            }
            #[inline(always)]
            fn pmax(self, o: $t) -> $t {
                if self < o {
                    o
                } else {
                    self
                }
            }
            #[inline(always)]
            fn pmin(self, o: $t) -> $t {
                if o < self {
                    o
                } else {
                    self
                }
            }
            #[inline(always)]
            fn exponent_bits(self) -> $t {
                <$t>::from_bits(self.to_bits().wrapping_add($bias) << $shift)
            }
        }
    };
}
scalar_lanes!(f64, 1023, 52);
scalar_lanes!(f32, 127, 23);

/// Two f64 lanes (see the module docs).
#[derive(Clone, Copy)]
pub struct F2(simd::V2);

/// Four f32 lanes (see the module docs).
#[derive(Clone, Copy)]
pub struct F4(simd::V4);

#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
mod simd {
    use super::{Lanes, F2, F4};
    use core::arch::wasm32::*;

    pub type V2 = v128;
    pub type V4 = v128;

    impl Lanes for F2 {
        type Elem = f64;
        const LANES: usize = 2;
        #[inline(always)]
        fn splat(v: f64) -> F2 {
            F2(f64x2_splat(v))
        }
        #[inline(always)]
        fn load(s: &[f64]) -> F2 {
            F2(f64x2(s[0], s[1]))
        }
        #[inline(always)]
        fn store(self, s: &mut [f64]) {
            s[..2].copy_from_slice(&[
                f64x2_extract_lane::<0>(self.0),
                f64x2_extract_lane::<1>(self.0),
            ]);
        }
        #[inline(always)]
        fn hsum(self) -> f64 {
            f64x2_extract_lane::<0>(self.0) + f64x2_extract_lane::<1>(self.0)
        }
        #[inline(always)]
        fn add(self, o: F2) -> F2 {
            F2(f64x2_add(self.0, o.0))
        }
        #[inline(always)]
        fn sub(self, o: F2) -> F2 {
            F2(f64x2_sub(self.0, o.0))
        }
        #[inline(always)]
        fn mul(self, o: F2) -> F2 {
            F2(f64x2_mul(self.0, o.0))
        }
        #[inline(always)]
        fn lt_select(self, o: F2, t: F2, f: F2) -> F2 {
            F2(v128_bitselect(t.0, f.0, f64x2_lt(self.0, o.0)))
        }
        #[inline(always)]
        fn pmax(self, o: F2) -> F2 {
            F2(f64x2_pmax(self.0, o.0))
        }
        #[inline(always)]
        fn pmin(self, o: F2) -> F2 {
            F2(f64x2_pmin(self.0, o.0))
        }
        #[inline(always)]
        fn exponent_bits(self) -> F2 {
            F2(i64x2_shl(i64x2_add(self.0, i64x2_splat(1023)), 52))
        }
    }

    impl Lanes for F4 {
        type Elem = f32;
        const LANES: usize = 4;
        #[inline(always)]
        fn splat(v: f32) -> F4 {
            F4(f32x4_splat(v))
        }
        #[inline(always)]
        fn load(s: &[f32]) -> F4 {
            F4(f32x4(s[0], s[1], s[2], s[3]))
        }
        #[inline(always)]
        fn store(self, s: &mut [f32]) {
            s[..4].copy_from_slice(&[
                f32x4_extract_lane::<0>(self.0),
                f32x4_extract_lane::<1>(self.0),
                f32x4_extract_lane::<2>(self.0),
                f32x4_extract_lane::<3>(self.0),
            ]);
        }
        #[inline(always)]
        fn hsum(self) -> f32 {
            f32x4_extract_lane::<0>(self.0)
                + f32x4_extract_lane::<1>(self.0)
                + f32x4_extract_lane::<2>(self.0)
                + f32x4_extract_lane::<3>(self.0)
        }
        #[inline(always)]
        fn add(self, o: F4) -> F4 {
            F4(f32x4_add(self.0, o.0))
        }
        #[inline(always)]
        fn sub(self, o: F4) -> F4 {
            F4(f32x4_sub(self.0, o.0))
        }
        #[inline(always)]
        fn mul(self, o: F4) -> F4 {
            F4(f32x4_mul(self.0, o.0))
        }
        #[inline(always)]
        fn lt_select(self, o: F4, t: F4, f: F4) -> F4 {
            F4(v128_bitselect(t.0, f.0, f32x4_lt(self.0, o.0)))
        }
        #[inline(always)]
        fn pmax(self, o: F4) -> F4 {
            F4(f32x4_pmax(self.0, o.0))
        }
        #[inline(always)]
        fn pmin(self, o: F4) -> F4 {
            F4(f32x4_pmin(self.0, o.0))
        }
        #[inline(always)]
        fn exponent_bits(self) -> F4 {
            F4(i32x4_shl(i32x4_add(self.0, i32x4_splat(127)), 23))
        }
    }
}

#[cfg(not(all(target_arch = "wasm32", target_feature = "simd128")))]
mod simd {
    use super::{Lanes, F2, F4};

    pub type V2 = [f64; 2];
    pub type V4 = [f32; 4];

    macro_rules! array_lanes {
        ($v:ident, $t:ty, $n:expr) => {
            impl Lanes for $v {
                type Elem = $t;
                const LANES: usize = $n;
                #[inline(always)]
                fn splat(v: $t) -> $v {
                    $v([v; $n])
                }
                #[inline(always)]
                fn load(s: &[$t]) -> $v {
                    $v(std::array::from_fn(|i| s[i]))
                }
                #[inline(always)]
                fn store(self, s: &mut [$t]) {
                    s[..$n].copy_from_slice(&self.0);
                }
                #[inline(always)]
                fn hsum(self) -> $t {
                    let mut s = self.0[0];
                    for &v in &self.0[1..] {
                        s += v;
                    }
                    s
                }
                #[inline(always)]
                fn add(self, o: $v) -> $v {
                    $v(std::array::from_fn(|i| self.0[i] + o.0[i]))
                }
                #[inline(always)]
                fn sub(self, o: $v) -> $v {
                    $v(std::array::from_fn(|i| self.0[i] - o.0[i]))
                }
                #[inline(always)]
                fn mul(self, o: $v) -> $v {
                    $v(std::array::from_fn(|i| self.0[i] * o.0[i]))
                }
                #[inline(always)]
                fn lt_select(self, o: $v, t: $v, f: $v) -> $v {
                    $v(std::array::from_fn(|i| {
                        self.0[i].lt_select(o.0[i], t.0[i], f.0[i])
                    }))
                }
                #[inline(always)]
                fn pmax(self, o: $v) -> $v {
                    $v(std::array::from_fn(|i| self.0[i].pmax(o.0[i])))
                }
                #[inline(always)]
                fn pmin(self, o: $v) -> $v {
                    $v(std::array::from_fn(|i| self.0[i].pmin(o.0[i])))
                }
                #[inline(always)]
                fn exponent_bits(self) -> $v {
                    $v(std::array::from_fn(|i| self.0[i].exponent_bits()))
                }
            }
        };
    }
    array_lanes!(F2, f64, 2);
    array_lanes!(F4, f32, 4);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Same bits, or both NaN (NaN payloads are not specified).
    fn same<T: Into<f64>>(a: T, b: T) -> bool {
        let (a, b) = (a.into(), b.into());
        a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
    }

    /// Every lane of every width computes what the scalar code computes, bit for bit.
    #[test]
    fn lanes_match_scalar_bit_for_bit() {
        let xs = [-800.0, -708.0, -3.25, -0.0, 0.0, 1.5, f64::NAN, 2.0e300];
        for &a in &xs {
            for &b in &xs {
                let (va, vb) = (F2::splat(a), F2::splat(b));
                let (t, f) = (F2::splat(7.0), F2::splat(-7.0));
                let lane = |v: F2, i: usize| {
                    let mut out = [0.0; 2];
                    v.store(&mut out);
                    out[i]
                };
                let pairs = [
                    (lane(va.add(vb), 1), a + b),
                    (lane(va.sub(vb), 0), a - b),
                    (lane(va.mul(vb), 1), a * b),
                    (lane(va.lt_select(vb, t, f), 0), a.lt_select(b, 7.0, -7.0)),
                    (lane(va.pmax(vb), 0), a.pmax(b)),
                    (lane(va.pmin(vb), 1), a.pmin(b)),
                    (lane(va.exponent_bits(), 0), a.exponent_bits()),
                ];
                for (got, want) in pairs {
                    assert!(same(got, want), "{a} {b}: {got} vs {want}");
                }
                let (a, b) = (a as f32, b as f32);
                let (va, vb) = (F4::splat(a), F4::splat(b));
                let lane = |v: F4, i: usize| {
                    let mut out = [0.0; 4];
                    v.store(&mut out);
                    out[i]
                };
                let pairs = [
                    (lane(va.add(vb), 3), a + b),
                    (lane(va.sub(vb), 2), a - b),
                    (lane(va.mul(vb), 1), a * b),
                    (
                        lane(va.lt_select(vb, F4::splat(7.0), F4::splat(-7.0)), 0),
                        { a.lt_select(b, 7.0, -7.0) },
                    ),
                    (lane(va.pmax(vb), 0), a.pmax(b)),
                    (lane(va.pmin(vb), 3), a.pmin(b)),
                    (lane(va.exponent_bits(), 2), a.exponent_bits()),
                ];
                for (got, want) in pairs {
                    assert!(same(got, want), "{a} {b}: {got} vs {want}");
                }
            }
        }
        let v = F2::load(&[1.0, 2.0, 3.0]);
        let mut out = [0.0; 3];
        v.store(&mut out);
        assert_eq!(out, [1.0, 2.0, 0.0]);
        assert_eq!(F2::load(&[1.0, 2.0]).hsum(), 3.0);
        assert_eq!(F4::load(&[1.0, 2.0, 3.0, 4.5]).hsum(), 10.5);
    }
}
