//! An AVX-512 VNNI build of SimplePIR's answer ([`crate::layout::Database::answer_rows`]): 64
//! byte products a `vpdpbusd` (four limbs a query value, so 16 of its values an instruction)
//! instead of 8 widened 32-bit ones — the thumbnails' answer, the largest part of a
//! million-image search's server work after the packing: 8 queries over the 294 MB database
//! (9,408 rows × 31,250 columns) in 58 ms on one core (`--bench simplepir`; 99 ms with two
//! rows and two queries a group over 8,192-column tiles, 168 ms without VNNI). What bounds it
//! is moving limbs, not the products: six rows share each limb load (one query a group), and a
//! tile of 32,768 columns — one query's limbs (128 KiB) and six rows (192 KiB) stay in a 1 MiB
//! L2 — leaves one tile at this shape, so each row's sums are reduced once. Measured on this
//! machine's AMD EPYC (Zen 4): 2 rows × 2 queries 99 ms, 3 × 2 82, 6 × 1 69 at 8,192-column
//! tiles; 6 × 1 at 16,384 63 ms, at 32,768 57–61; 5 and 7 rows within noise of 6.
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

/// Columns a tile holds: one query's four limbs of a tile (128 KiB) and `ROWS` rows of it
/// (192 KiB) stay in a 1 MiB L2 while the rows pass over them.
const TILE: usize = 32768;

/// Queries a group accumulates at once, and rows: `ROWS` × `GROUP` × 4 limbs accumulators,
/// with the rows' bytes and a limb load within the 32 vector registers.
const GROUP: usize = 1;
const ROWS: usize = 6;

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
        // ROWS rows at a time: each limb load then feeds ROWS rows' products (a short last
        // chunk repeats its last row; only its own rows' sums are kept).
        let rows: Vec<usize> = range.clone().collect();
        for (chunk, idx) in rows.chunks(ROWS).zip((0..).step_by(ROWS)) {
            let tile = |i: usize| &data[i * cols + t0..i * cols + t1];
            let tiles: [&[u8]; ROWS] = std::array::from_fn(|r| tile(chunk[r.min(chunk.len() - 1)]));
            for g in 0..groups {
                let sums = group_sums(tiles, &limbs[g * GROUP * 4 * whole..], whole);
                for (r, (row, at)) in chunk.iter().zip(idx..).enumerate() {
                    for (qi, &s) in sums[r].iter().enumerate() {
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

/// `ROWS` rows' tiles against one group's limbs (`limbs[(qi·4 + k)·whole + j]`): each row's
/// and query's `Σ_j row_j·q_j mod 2³²` over the `whole` columns (a multiple of 64).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
// Indices into the accumulator arrays, not iterators: one register each, fully unrolled.
#[allow(clippy::needless_range_loop)]
unsafe fn group_sums(rows: [&[u8]; ROWS], limbs: &[i8], whole: usize) -> [[u32; GROUP]; ROWS] {
    assert!(whole.is_multiple_of(64) && rows.iter().all(|r| r.len() >= whole));
    assert!(limbs.len() >= GROUP * 4 * whole);
    let mut acc = [[[_mm512_setzero_si512(); 4]; GROUP]; ROWS];
    for ch in (0..whole).step_by(64) {
        // SAFETY: `ch + 64 ≤ whole ≤` each row's length, and every limb run is `whole` long
        // within `limbs` (asserted above); unaligned loads.
        // A plain loop, not a closure: a closure would not carry this function's target
        // features, and the loads would not be inlined.
        let mut d = [_mm512_setzero_si512(); ROWS];
        for (v, row) in d.iter_mut().zip(rows) {
            *v = _mm512_loadu_si512(row.as_ptr().add(ch).cast());
        }
        for qi in 0..GROUP {
            for k in 0..4 {
                let l = _mm512_loadu_si512(limbs.as_ptr().add((qi * 4 + k) * whole + ch).cast());
                for r in 0..ROWS {
                    acc[r][qi][k] = _mm512_dpbusd_epi32(acc[r][qi][k], d[r], l);
                }
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

/// Columns of one step of [`score_limb_sums`]: a 512-bit register of 16-bit values.
pub(crate) const SCORE_STEP: usize = 32;

/// Steps of [`score_limb_sums`] summed in 32-bit lanes before they are added into 64 bits: a
/// lane gains two products a step, each at most `255·2¹⁵` in magnitude (a plane's byte times
/// a balanced 16-bit limb), so 128 steps stay below `128·2·255·2¹⁵ < 2³¹`.
const SCORE_FLUSH: usize = 128;

/// The scoring pass's limb sums for `R` rows of the feature planes at once (the hintless
/// scores, `scores`): for each row `r` and limb `k`, `S_lo[k] = Σ_j lo_r[j]·l_{k,j}` and
/// `S_hi[k] = Σ_j hi_r[j]·l_{k,j}` over the first `32·⌊len/32⌋` columns, exactly. `wide`
/// holds the query's balanced 16-bit limbs in steps of 32 columns: limb 0's 32 values, then
/// limb 1's, 2's and 3's. `vpdpwssd` adds two 16-bit products into each 32-bit lane (32
/// products an instruction, against AVX2's 16), and each limb load feeds every row's two
/// planes: the limbs, not the planes, are what the pass moves most, so sharing them between
/// rows is what pays.
///
/// # Safety
/// The CPU must support AVX-512F, BW and VNNI ([`available`]).
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
pub(crate) unsafe fn score_limb_sums<const R: usize>(
    lo: [&[u8]; R],
    hi: [&[i8]; R],
    wide: &[i16],
) -> [([i64; 4], [i64; 4]); R] {
    let steps = wide.len() / (4 * SCORE_STEP);
    assert!(lo.iter().all(|r| r.len() >= steps * SCORE_STEP));
    assert!(hi.iter().all(|r| r.len() >= steps * SCORE_STEP));
    let mut out = [([0i64; 4], [0i64; 4]); R];
    // 64-bit partial sums (eight lanes) a row, plane and limb.
    let mut wide_l = [[_mm512_setzero_si512(); 4]; R];
    let mut wide_h = [[_mm512_setzero_si512(); 4]; R];
    let mut s = 0;
    while s < steps {
        let end = (s + SCORE_FLUSH).min(steps);
        let mut acc_l = [[_mm512_setzero_si512(); 4]; R];
        let mut acc_h = [[_mm512_setzero_si512(); 4]; R];
        for step in s..end {
            let at = step * SCORE_STEP;
            // Plain loops, not closures: a closure would not carry this function's target
            // features. SAFETY: `at + 32 ≤ steps·32 ≤` each row's length, and the step's 128
            // limbs are within `wide` (asserted above); unaligned loads.
            let mut dl = [_mm512_setzero_si512(); R];
            let mut dh = [_mm512_setzero_si512(); R];
            for r in 0..R {
                dl[r] = _mm512_cvtepu8_epi16(_mm256_loadu_si256(lo[r].as_ptr().add(at).cast()));
                dh[r] = _mm512_cvtepi8_epi16(_mm256_loadu_si256(hi[r].as_ptr().add(at).cast()));
            }
            let base = wide.as_ptr().add(step * 4 * SCORE_STEP);
            for k in 0..4 {
                let q = _mm512_loadu_si512(base.add(k * SCORE_STEP).cast());
                for r in 0..R {
                    acc_l[r][k] = _mm512_dpwssd_epi32(acc_l[r][k], dl[r], q);
                    acc_h[r][k] = _mm512_dpwssd_epi32(acc_h[r][k], dh[r], q);
                }
            }
        }
        // Into 64 bits before a lane could overflow.
        for r in 0..R {
            for k in 0..4 {
                for (w, a) in [
                    (&mut wide_l[r][k], acc_l[r][k]),
                    (&mut wide_h[r][k], acc_h[r][k]),
                ] {
                    let low = _mm512_cvtepi32_epi64(_mm512_castsi512_si256(a));
                    let high = _mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64::<1>(a));
                    *w = _mm512_add_epi64(*w, _mm512_add_epi64(low, high));
                }
            }
        }
        s = end;
    }
    for r in 0..R {
        for k in 0..4 {
            out[r].0[k] = _mm512_reduce_add_epi64(wide_l[r][k]);
            out[r].1[k] = _mm512_reduce_add_epi64(wide_h[r][k]);
        }
    }
    out
}
