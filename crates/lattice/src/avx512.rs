//! AVX-512 builds of the packing's online step, eight coefficients at a time: the work a
//! server does per packed input of every query (`pir::inspiring`), 90 % of a hintless
//! answer's time at 1,000,000 items.
//!
//! Why by hand: the residues modulo `Q` need the high half of a 64 × 64-bit product (Shoup's
//! quotient estimate), which no vector instruction gives and the compiler therefore never
//! vectorises; here it is built from three 32 × 32 → 64-bit products (`vpmuludq`), one short at
//! most, which one more conditional subtraction absorbs, so every lane computes the same value
//! as [`ShoupQ::times`] — bit for bit, not merely modulo `Q` (tested against the portable
//! loop). The residues modulo `P` (below 2³²) use [`ShoupP`]'s
//! three 32-bit products. Chosen at run time where the CPU has AVX-512F and DQ; the portable
//! loop runs elsewhere (and in the browser).

use std::arch::x86_64::*;

use crate::modq::{ShoupP, ShoupQ, P, Q};

/// Whether this CPU runs these kernels (checked once per call site; the standard library caches
/// the detection).
pub(crate) fn available() -> bool {
    std::is_x86_feature_detected!("avx512f") && std::is_x86_feature_detected!("avx512dq")
}

/// One two-digit switch's operands over a run, residue by residue: the plan's transformed
/// digits and the key body's two rows.
pub(crate) struct TwoDigits<'a> {
    pub dq: (&'a [u64], &'a [u64]),
    pub dp: (&'a [u32], &'a [u32]),
    pub kq: (&'a [ShoupQ], &'a [ShoupQ]),
    pub kp: (&'a [ShoupP], &'a [ShoupP]),
}

/// `x[i] ← x[i] − d₀[i]·k₀[i] − d₁[i]·k₁[i]`, modulo `Q` and modulo `P`: the same values as
/// the portable loop in `rlwe::OrbitKey::subtract_rotated` (whose runs these are).
///
/// Panics unless every slice has `x`'s length, a multiple of 8.
///
/// # Safety
/// The CPU must support AVX-512F and AVX-512DQ ([`available`]).
#[target_feature(enable = "avx512f,avx512dq")]
pub(crate) unsafe fn subtract_two(ops: TwoDigits<'_>, (xq, xp): (&mut [u64], &mut [u64])) {
    let n = xq.len();
    assert!(n.is_multiple_of(8));
    for len in [
        xp.len(),
        ops.dq.0.len(),
        ops.dq.1.len(),
        ops.dp.0.len(),
        ops.dp.1.len(),
        ops.kq.0.len(),
        ops.kq.1.len(),
        ops.kp.0.len(),
        ops.kp.1.len(),
    ] {
        assert_eq!(len, n);
    }
    let q = _mm512_set1_epi64(Q.value as i64);
    let p = _mm512_set1_epi64(P.value as i64);
    let even = _mm512_setr_epi64(0, 2, 4, 6, 8, 10, 12, 14);
    let odd = _mm512_setr_epi64(1, 3, 5, 7, 9, 11, 13, 15);
    for i in (0..n).step_by(8) {
        // SAFETY (all pointer reads and writes below): `i + 8 ≤ n` and every slice has `n`
        // elements (asserted above); `ShoupQ` is `repr(C)` (two `u64`), `ShoupP` `repr(C)` (two
        // `u32`, the multiplier in the low half of the 64-bit lane on little-endian x86).
        // Unaligned loads and stores.
        // Modulo Q.
        let x = _mm512_loadu_si512(xq.as_ptr().add(i).cast());
        let r0 = times_q(
            _mm512_loadu_si512(ops.dq.0.as_ptr().add(i).cast()),
            ops.kq.0.as_ptr().add(i),
            even,
            odd,
            q,
        );
        let r1 = times_q(
            _mm512_loadu_si512(ops.dq.1.as_ptr().add(i).cast()),
            ops.kq.1.as_ptr().add(i),
            even,
            odd,
            q,
        );
        _mm512_storeu_si512(
            xq.as_mut_ptr().add(i).cast(),
            sub_mod(sub_mod(x, r0, q), r1, q),
        );
        // Modulo P.
        let x = _mm512_loadu_si512(xp.as_ptr().add(i).cast());
        let r0 = times_p(
            _mm256_loadu_si256(ops.dp.0.as_ptr().add(i).cast()),
            _mm512_loadu_si512(ops.kp.0.as_ptr().add(i).cast()),
            p,
        );
        let r1 = times_p(
            _mm256_loadu_si256(ops.dp.1.as_ptr().add(i).cast()),
            _mm512_loadu_si512(ops.kp.1.as_ptr().add(i).cast()),
            p,
        );
        _mm512_storeu_si512(
            xp.as_mut_ptr().add(i).cast(),
            sub_mod(sub_mod(x, r0, p), r1, p),
        );
    }
}

/// The high 64 bits of the 128-bit products, less at most one: with `a = a₁·2³² + a₀`,
/// `b = b₁·2³² + b₀`, `a·b = a₁b₁·2⁶⁴ + (a₁b₀ + a₀b₁)·2³² + a₀b₀`; `a₀b₀ < 2⁶⁴` is left out,
/// which can only lose the one carry it might add. Not exact on purpose: the exact sequence is
/// a 64-bit `mulhu`, which the compiler recognises and then splits into eight scalar `mul`s (it
/// has no vector instruction for it) — 2.5× slower than these four vector products.
#[inline(always)]
unsafe fn mulhi_u64_low(a: __m512i, b: __m512i) -> __m512i {
    let low = _mm512_set1_epi64(0xffff_ffff);
    let (a1, b1) = (_mm512_srli_epi64::<32>(a), _mm512_srli_epi64::<32>(b));
    let lh = _mm512_mul_epu32(a, b1);
    let hl = _mm512_mul_epu32(a1, b);
    let hh = _mm512_mul_epu32(a1, b1);
    let mid = _mm512_add_epi64(_mm512_and_si512(lh, low), _mm512_and_si512(hl, low));
    _mm512_add_epi64(
        _mm512_add_epi64(hh, _mm512_srli_epi64::<32>(lh)),
        _mm512_add_epi64(_mm512_srli_epi64::<32>(hl), _mm512_srli_epi64::<32>(mid)),
    )
}

/// Eight [`ShoupQ::times`]: `a·w − q̂·Q` (wrapping) with `q̂` Shoup's estimate `⌊a·w'/2⁶⁴⌋`
/// less at most one ([`mulhi_u64_low`]), so in `[0, 3Q)` (`3Q < 2⁶⁴`), then reduced: the same
/// value as the scalar product. `k` points at eight `(w, w')` pairs.
#[inline(always)]
unsafe fn times_q(
    a: __m512i,
    k: *const ShoupQ,
    even: __m512i,
    odd: __m512i,
    q: __m512i,
) -> __m512i {
    let lo = _mm512_loadu_si512(k.cast());
    let hi = _mm512_loadu_si512(k.add(4).cast());
    let w = _mm512_permutex2var_epi64(lo, even, hi);
    let w_shoup = _mm512_permutex2var_epi64(lo, odd, hi);
    let qhat = mulhi_u64_low(a, w_shoup);
    let r = _mm512_sub_epi64(_mm512_mullo_epi64(a, w), _mm512_mullo_epi64(qhat, q));
    csub(csub(r, _mm512_add_epi64(q, q)), q)
}

/// Eight [`ShoupP::times`]: `a` eight `u32`, `k` eight `(w, w')` pairs of `u32` as 64-bit
/// lanes (`w` low).
#[inline(always)]
unsafe fn times_p(a: __m256i, k: __m512i, p: __m512i) -> __m512i {
    let a = _mm512_cvtepu32_epi64(a);
    let qhat = _mm512_srli_epi64::<32>(_mm512_mul_epu32(a, _mm512_srli_epi64::<32>(k)));
    let r = _mm512_sub_epi64(_mm512_mul_epu32(a, k), _mm512_mul_epu32(qhat, p));
    csub(r, p)
}

/// `x − m` where `x ≥ m`, else `x`, for `x < 2m` and `m ≤ 2⁶³`: the wrapped difference is
/// then above `x`, so the unsigned minimum picks the right one.
#[inline(always)]
unsafe fn csub(x: __m512i, m: __m512i) -> __m512i {
    _mm512_min_epu64(x, _mm512_sub_epi64(x, m))
}

/// `x − y mod m` for reduced `x`, `y` (`m < 2⁶³`): the wrapped difference, or it plus `m`,
/// whichever is smaller (exactly one is below `m`).
#[inline(always)]
unsafe fn sub_mod(x: __m512i, y: __m512i, m: __m512i) -> __m512i {
    let d = _mm512_sub_epi64(x, y);
    _mm512_min_epu64(d, _mm512_add_epi64(d, m))
}
