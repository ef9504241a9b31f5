//! An AVX-512 VNNI build of SimplePIR's answer ([`crate::layout::Database::answer_rows`]): 64
//! byte products a `vpdpbusd` (four limbs a query value, so 16 of its values an instruction)
//! instead of 8 widened 32-bit ones — the thumbnails' answer, the largest part of a
//! million-image search's server work after the packing: 168 → 115 ms for 8 queries over the
//! 294 MB database (`--bench simplepir`, one core). Two rows share each limb load; that, not
//! the products, bounds it (89 ms with the rows in cache).
//!
//! The trick: a query value `q < 2³²` is four signed bytes `l_k ∈ [−128, 127]` with
//! `q ≡ Σ_k 256ᵏ·l_k (mod 2³²)` (balanced digits; the carry out of the top one is a multiple of
//! 2³² and drops). Then `Σ_j d_j·q_j ≡ Σ_k 256ᵏ·Σ_j d_j·l_{k,j}`, and `vpdpbusd` adds four
//! `u8 × i8` products into each 32-bit lane, wrapping — exactly arithmetic modulo 2³², which is
//! what the answer is. Every sum is therefore the portable loop's, bit for bit (tested).

use std::arch::x86_64::*;
use std::ops::Range;

/// Whether this CPU runs [`raw_sums`].
pub(crate) fn available() -> bool {
    std::is_x86_feature_detected!("avx512f")
        && std::is_x86_feature_detected!("avx512bw")
        && std::is_x86_feature_detected!("avx512vnni")
}

/// Columns a tile holds: the four limbs of 8 queries' tile are 256 KiB, which stay in the
/// core's cache while every row of the range passes over them.
const TILE: usize = 8192;

/// Queries a group accumulates at once: 2 rows × 2 queries × 4 limbs = 16 accumulators, with
/// the rows' bytes and a limb load within the 32 vector registers.
const GROUP: usize = 2;

/// `out[q·len + (i − start)] = Σ_j data[i·cols + j]·queries[q·cols + j] mod 2³²` for rows
/// `range` (the raw sums; the caller subtracts the entries' offset). `queries` holds whole
/// query vectors of `cols` values each.
///
/// # Safety
/// The CPU must support AVX-512F, BW and VNNI ([`available`]).
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
pub(crate) unsafe fn raw_sums(
    data: &[u8],
    cols: usize,
    queries: &[u32],
    range: Range<usize>,
) -> Vec<u32> {
    assert!(cols > 0 && queries.len().is_multiple_of(cols));
    assert!(range.end.saturating_mul(cols) <= data.len());
    let c = queries.len() / cols;
    let len = range.len();
    let mut out = vec![0u32; c * len];
    // Queries padded to whole groups with zero limbs (their sums are dropped).
    let groups = c.div_ceil(GROUP);
    for t0 in (0..cols).step_by(TILE) {
        let t1 = (t0 + TILE).min(cols);
        let whole = (t1 - t0) / 64 * 64;
        // limbs[(q·4 + k)·whole + j]: limb k of query q's column t0 + j.
        let mut limbs = vec![0i8; groups * GROUP * 4 * whole];
        for q in 0..c {
            for j in 0..whole {
                let mut v = i64::from(queries[q * cols + t0 + j]);
                for k in 0..4 {
                    let l = ((v + 128) & 0xff) - 128;
                    limbs[(q * 4 + k) * whole + j] = l as i8;
                    v = (v - l) >> 8;
                }
            }
        }
        // Two rows at a time: each limb load then feeds two rows' products.
        let rows: Vec<usize> = range.clone().collect();
        for (pair, idx) in rows.chunks(2).zip((0..).step_by(2)) {
            let tile = |i: usize| &data[i * cols + t0..i * cols + t1];
            let (r0, r1) = (tile(pair[0]), tile(*pair.last().expect("a chunk")));
            for g in 0..groups {
                let sums = group_sums(r0, r1, &limbs[g * GROUP * 4 * whole..], whole);
                for (row, at) in pair.iter().zip(idx..) {
                    let which = usize::from(at > idx);
                    for (qi, &s) in sums[which].iter().enumerate() {
                        let q = g * GROUP + qi;
                        if q >= c {
                            break;
                        }
                        // The tile's last columns past whole 64-byte chunks, scalar.
                        let query = &queries[q * cols + t0..q * cols + t1];
                        let tail = tile(*row)[whole..]
                            .iter()
                            .zip(&query[whole..])
                            .fold(s, |s, (&d, &v)| {
                                s.wrapping_add(u32::from(d).wrapping_mul(v))
                            });
                        let o = &mut out[q * len + at];
                        *o = o.wrapping_add(tail);
                    }
                }
            }
        }
    }
    out
}

/// Two rows' tiles against one group's limbs (`limbs[(qi·4 + k)·whole + j]`): each row's and
/// query's `Σ_j row_j·q_j mod 2³²` over the `whole` columns (a multiple of 64).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn group_sums(r0: &[u8], r1: &[u8], limbs: &[i8], whole: usize) -> [[u32; GROUP]; 2] {
    assert!(whole.is_multiple_of(64) && r0.len() >= whole && r1.len() >= whole);
    assert!(limbs.len() >= GROUP * 4 * whole);
    let mut acc = [[[_mm512_setzero_si512(); 4]; GROUP]; 2];
    for ch in (0..whole).step_by(64) {
        // SAFETY: `ch + 64 ≤ whole ≤` each row's length, and every limb run is `whole` long
        // within `limbs` (asserted above); unaligned loads.
        let d0 = _mm512_loadu_si512(r0.as_ptr().add(ch).cast());
        let d1 = _mm512_loadu_si512(r1.as_ptr().add(ch).cast());
        let [a0, a1] = &mut acc;
        for (qi, (q0, q1)) in a0.iter_mut().zip(a1.iter_mut()).enumerate() {
            for (k, (x0, x1)) in q0.iter_mut().zip(q1.iter_mut()).enumerate() {
                let l = _mm512_loadu_si512(limbs.as_ptr().add((qi * 4 + k) * whole + ch).cast());
                *x0 = _mm512_dpbusd_epi32(*x0, d0, l);
                *x1 = _mm512_dpbusd_epi32(*x1, d1, l);
            }
        }
    }
    std::array::from_fn(|r| {
        std::array::from_fn(|qi| {
            let [a0, a1, a2, a3] = acc[r][qi];
            let t = _mm512_add_epi32(
                _mm512_add_epi32(a0, _mm512_slli_epi32::<8>(a1)),
                _mm512_add_epi32(_mm512_slli_epi32::<16>(a2), _mm512_slli_epi32::<24>(a3)),
            );
            _mm512_reduce_add_epi32(t) as u32
        })
    })
}
