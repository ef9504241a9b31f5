//! Encrypted scores without a client hint: the client learns the exact squared-distance scores
//! of every item in the one block it chose, the server learns nothing about the block or the
//! photo. The ranking half of #18's million-image design (`docs/eval/pir.md`), served as the
//! hintless ranking (`publish::pir::hintless` lays a capped level's blocks out as this
//! database).
//!
//! # The database
//! `blocks` blocks of at most `rows` items, each item a `dim`-vector `f` of `i16` features with
//! `‖f‖² ≤ NORM_CAP` (unit-norm features quantised at 32,767 are below 1.0002·2³⁰; the cap
//! leaves room and is checked when the database is built). Column `b·(dim + 4) + j` holds
//! dimension `j` of block `b`'s items (row `i` = item `i`), and four more columns per block
//! hold the bytes of `‖f‖²`. The features are stored as two planes, `f = 256·hi + lo` with
//! `lo ∈ [0, 255]`, `hi ∈ [−128, 127]` (the norm bytes in the low plane), so the scoring pass
//! multiplies 8-bit entries; the rows it packs are the planes recombined, `256·hi + lo`. With
//! the query `u` = `2·q` on the photo's block's dimensions and `−256ᵏ` on its norm byte `k`,
//! and 0 elsewhere, row `i`'s value is `T_i = 2⟨q, f_i⟩ − ‖f_i‖²`: `‖q − f_i‖² = ‖q‖² − T_i`,
//! so ranking by `T` is ranking by exact distance to the integer query `q`. By
//! Cauchy–Schwarz, `T ∈ [−3·NORM_CAP, 2·NORM_CAP]` when the query's norm is capped too.
//!
//! # The query and the answer
//! The query vector is RLWE-shaped: chunk `c` of `N` columns is `b_c = a_c·s + e_c + Δ·u_c`
//! with `a_c` expanded from the version's public seed, `s` a fresh ternary secret, `e_c` fresh
//! Gaussian errors, `Δ = 2²⁹`. With it go the client's packing-key bodies for `s`
//! ([`InspiringMasks::bodies`]). The server computes each plane's `D·b` (one pass over the
//! planes) and recombines them per row, `256·S_hi + S_lo` — row `i`'s value is an LWE
//! ciphertext under `s` whose `a` part, as an RLWE polynomial, is `A_i = Σ_c r̃_{i,c}·a_c`
//! (`r̃` the negacyclic reverse of the recombined row's chunk, so the constant coefficient of
//! `r̃·y` is the inner product) — and packs the rows, `γ` = [`ScoreShape::packing_width`] (at
//! most `N/2`) to a ciphertext, row `r` of a chunk in coefficient `r`, with
//! [`InspiringPlan`]s built once per version from the fixed `A_i`. Only the first `γ`
//! coefficients of each packed `b` are sent: the others carry no rows, and each is switched
//! from `Q` to [`ANSWER_BITS`] bits (below). One packed ciphertext
//! per `γ` rows: recombining before packing halves the packing (and the plans, and the
//! answer) against packing each plane, which the cap on norms pays for — with entries up to
//! 2¹⁵ in magnitude the message `Δ·T` must fit `Q/2`, and it does because `T` is bounded by
//! norms, not by entries.
//!
//! # Guarantee (query privacy)
//! The server sees RLWE samples `(a_c, a_c·s + e_c + Δ·u_c)` and one key body, RLWE samples
//! under the same fresh `s` encrypting `P·Bᵗ·τ_g(s)`. Under decision-RLWE for
//! `N = 4,096`, `P·Q < 2⁹⁴`, ternary secrets, σ = 6.4 (128-bit, see [`super`]) and the
//! circular-security assumption every RLWE key-switching key relies on, the whole upload is
//! indistinguishable from uniform whatever `u` is: it reveals neither the block nor the
//! photo's features. Its size depends only on the public shape. The secret is never reused
//! (two queries under one secret and the same public `a_c` would differ by `Δ·(u − u')`).
//!
//! # The answer on the wire
//! Each sent coefficient `b ∈ [0, Q)` travels as `c = ⌊b·2^m/Q⌉ mod 2^m` with `m` =
//! [`ANSWER_BITS`] = 37, packed end to end ([`crate::bits`]); the client reads
//! `b' = ⌊c·Q/2^m⌉`, and `b' − b mod Q` (centered) is at most `Q/2^(m+1) + ½` in magnitude —
//! [`ANSWER_ROUNDING`] = 2²⁴ + 1. The message `Δ·T` sits above bit 29 and the error below
//! 2²⁵ (`error_bound`), so the low 25 of the 62 bits carry only error: sending them would
//! not help the client. A public function of the answer, so it changes nothing the server
//! sees; 37 bits instead of 64 is 42 % less answer (96 → 55.5 KiB at 1,000,000 images).
//!
//! # Correctness
//! Row `i`'s decoded phase is `Δ·T_i + E_lwe + E_pack + E_wire` (`|E_wire| ≤` [`ANSWER_ROUNDING`]), and `|Δ·T_i| ≤ Δ·3·NORM_CAP < Q/2 − Δ/2`
//! (a compile-time check), so rounding the centered phase to a multiple of `Δ` gives `T_i`
//! exactly whenever `|E| < Δ/2`.
//! - `E_lwe = Σ_j D_ij·e_j` over the recombined row — **rigorous**: the query's errors are
//!   fresh and independent, so it is sub-Gaussian with proxy `σ²·Σ_j D_ij²`, and
//!   `Σ_j D_ij² ≤ blocks·(NORM_CAP + 4·255²)` (each block's item contributes its `‖f‖²` and
//!   its norm bytes); packing passes it through unchanged.
//! - `E_pack` ([`super::inspiring`]) — **rigorous** at a row's coefficient: a sub-Gaussian
//!   with proxy [`added_gaussian_variance`] `= (γ − 1)²·v_E` (the key errors', independent of
//!   the query's) plus a rounding share of at most [`rounding_worst_case`] `= (γ − 1)·N/2 + ½`
//!   (≈ 2²² at `γ = 2,048`). So `P(|E| ≥ Δ/2) ≤ 2·exp(−(Δ/2 − w)²/(2·(v_lwe + v_E)))` with `w`
//!   that worst case plus [`ANSWER_ROUNDING`], and a union bound over the rows of a query
//!   gives [`failure_log2_worst_case`].
//! - [`failure_log2`] is the same bound with packing's **heuristic (independence assumption)**
//!   proxy [`added_variance`] — the rounding share modelled as a sub-Gaussian — in place of
//!   the worst case.
//!
//! Both are far beyond any concern: at the served million-image shape (302 blocks of at most
//! 12,288 rows, 64 dimensions: 20,536 query columns in 6 chunks, 6 row chunks of 2,048) the
//! heuristic gives 2^−2,939 and the rigorous one 2^−2,826 (at the 256 × 11,000 bench shape:
//! 2^−3,470 and 2^−3,333; 2^−3,346 and 2^−3,224 at 1M before the answer was rounded). [`ScoreShape::check`] refuses shapes where either bound exceeds
//! 2⁻⁴⁰.
//!
//! The decoding check ([`error_bound`], ≈ 2^25.6 at 1M: 2²⁵, mostly the LWE pass's error, plus
//! the wire's 2²⁴) is a 2⁻⁴⁰ tail of the *heuristic* proxy: an honest answer whose rounding shares came near their worst
//! case (2²²) would be refused — a false refusal, never a wrong score; how rare that is rests
//! on the heuristic. It catches a wrong key or wrong public parts (every phase uniform, each
//! inside the bound with probability 2^−2.4) and most damage to a coefficient, not all: a
//! change within the bound of a multiple of `Δ` decodes to another score.

use std::sync::atomic::AtomicU64;

use rand::{RngCore, SeedableRng};
use rand_chacha::ChaCha20Rng;
use zeroize::Zeroizing;

use lattice::modq::Q;
use lattice::rlwe::{encrypt_under, phase_of, uniform, Gadget, Ring, SecretKey};

use crate::error::{Error, PirError, Result};
use crate::held::{Held, SharedBytes};
use crate::inspiring::{
    added_gaussian_variance, added_variance, rounding_worst_case, Accumulated, InspiringBodies,
    InspiringMasks, InspiringPlan,
};

/// Bits of each answer coefficient on the wire (module docs, "The answer on the wire").
pub const ANSWER_BITS: u32 = 37;
/// The most a coefficient read from the wire is off by: `Q/2^(ANSWER_BITS + 1) + ½ ≤
/// ⌊Q/2^(ANSWER_BITS + 1)⌋ + 1`.
pub const ANSWER_ROUNDING: u64 = (Q.value >> (ANSWER_BITS + 1)) + 1;

/// Norm digits per block: `‖f‖² ≤ NORM_CAP < 2³²` as four unsigned bytes in the low plane.
pub const NORM_DIGITS: usize = 4;
/// log2 of the plaintext scale Δ.
pub const LOG_DELTA: u32 = 29;
/// Feature planes the database is stored in (low byte, high byte): the scoring pass reads
/// 8-bit entries; the rows it packs are the planes recombined (`256·hi + lo`).
pub const PLANES: usize = 2;
/// Largest feature magnitude (the `i16` quantisation's range).
const FEATURE_MAX: i32 = 32_767;
/// Largest squared norm of an item's or a query's features: unit-norm features quantised at
/// 32,767 stay below 32,771² ≈ 1.0002·2³⁰; this leaves room and keeps `Δ·|T| < Q/2` for every
/// score `T = 2⟨q, f⟩ − ‖f‖² ∈ [−3·NORM_CAP, 2·NORM_CAP]` (Cauchy–Schwarz).
pub const NORM_CAP: i64 = 1_250_000_000;
/// Largest `Σ` of a block's norm-digit entries squared in a packed row: four bytes.
const NORM_DIGIT_ENERGY: i64 = NORM_DIGITS as i64 * 255 * 255;

/// The public geometry of a score database.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScoreShape {
    pub blocks: usize,
    pub dim: usize,
    /// Rows: the largest block's item count.
    pub rows: usize,
}

impl ScoreShape {
    /// Refuses a shape the scheme cannot serve exactly: no blocks, rows or dimensions; more
    /// than 2²⁰ query columns or 2²⁰ rows; a failure bound, heuristic or rigorous, above
    /// 2⁻⁴⁰. (Every score fits: `3·NORM_CAP < Q/(2Δ)` whatever the shape, checked at compile
    /// time below.)
    pub fn check(&self, n: usize) -> Result<()> {
        let ok = self.blocks > 0
            && self.dim > 0
            && self.rows > 0
            && self.rows <= 1 << 20
            && self.blocks.saturating_mul(self.cols_per_block()) <= 1 << 20
            && failure_log2(self, n) <= -40.0
            && failure_log2_worst_case(self, n) <= -40.0;
        if ok {
            Ok(())
        } else {
            Err(Error::InvalidParameter {
                name: "score shape",
                reason: format!("{self:?} cannot be served exactly"),
            })
        }
    }

    pub fn cols_per_block(&self) -> usize {
        self.dim + NORM_DIGITS
    }

    /// Columns that hold the blocks' values (the rest of the last chunk is padding).
    pub fn data_cols(&self) -> usize {
        self.blocks * self.cols_per_block()
    }

    /// Query chunks of `n` columns.
    pub fn chunks(&self, n: usize) -> usize {
        self.data_cols().div_ceil(n)
    }

    pub fn cols(&self, n: usize) -> usize {
        self.chunks(n) * n
    }

    /// Packed ciphertexts an answer holds: one per row chunk.
    pub fn ciphertexts(&self, n: usize) -> usize {
        self.row_chunks(n).len()
    }

    /// Inputs a packed ciphertext carries ([`super::inspiring`]'s `γ`): the rows rounded up
    /// to a power of two, at most `N/2`. One width for the whole database, so one key.
    pub fn packing_width(&self, n: usize) -> usize {
        self.rows.next_power_of_two().min(n / 2)
    }

    /// Switch steps of each packing plan: `γ − 1` (what row shards split besides the rows,
    /// `crate::shard`).
    pub fn packing_steps(&self, n: usize) -> usize {
        self.packing_width(n) - 1
    }

    /// The rows each packed ciphertext carries: [`ScoreShape::packing_width`] at a
    /// time, the last chunk the rest (packed as zero rows after it).
    pub fn row_chunks(&self, n: usize) -> Vec<std::ops::Range<usize>> {
        let width = self.packing_width(n);
        (0..self.rows)
            .step_by(width)
            .map(|start| start..(start + width).min(self.rows))
            .collect()
    }
}

/// Masks made for another width would pack into the wrong coefficients: refused.
fn check_width(shape: &ScoreShape, n: usize, masks: &InspiringMasks) -> Result<()> {
    if masks.width() == shape.packing_width(n) {
        Ok(())
    } else {
        Err(Error::InvalidParameter {
            name: "packing masks",
            reason: format!(
                "made for {} inputs, the shape packs {}",
                masks.width(),
                shape.packing_width(n)
            ),
        })
    }
}

/// The packing key's public mask for `shape` from the version's packing seed.
pub fn packing_masks(ring: &Ring, shape: &ScoreShape, seed: &[u8; 32]) -> InspiringMasks {
    InspiringMasks::from_seed(ring, Gadget::DEFAULT, seed, shape.packing_width(ring.n()))
}

/// log2 of the probability that a query decodes any score wrongly, with packing's heuristic
/// (independence assumption) error proxy (module docs).
pub fn failure_log2(shape: &ScoreShape, n: usize) -> f64 {
    let half = ((1u64 << (LOG_DELTA - 1)) - ANSWER_ROUNDING) as f64;
    let nats = half * half / (2.0 * error_variance(shape, n));
    (2.0 * shape.rows as f64).log2() - nats / std::f64::consts::LN_2
}

// The largest score, times Δ, with the largest decoding error (< Δ/2) stays below Q/2.
const _: () = assert!((3 * NORM_CAP as u64 + 1) << LOG_DELTA < Q.value / 2);

/// log2 of a rigorous bound on the probability that a query decodes any score wrongly:
/// packing's rounding share at its worst case, the rest sub-Gaussian with rigorous proxies
/// (module docs). 0 (no bound) when the worst case alone reaches `Δ/2`.
pub fn failure_log2_worst_case(shape: &ScoreShape, n: usize) -> f64 {
    let gamma = shape.packing_width(n);
    let margin =
        ((1u64 << (LOG_DELTA - 1)) - ANSWER_ROUNDING) as f64 - rounding_worst_case(n, gamma);
    if margin <= 0.0 {
        return 0.0;
    }
    let v = lwe_variance(shape, n) + added_gaussian_variance(n, gamma, Gadget::DEFAULT);
    let nats = margin * margin / (2.0 * v);
    ((2.0 * shape.rows as f64).log2() - nats / std::f64::consts::LN_2).min(0.0)
}

/// Variance proxy of a decoded phase's error: the LWE pass's plus packing's heuristic one
/// (module docs).
fn error_variance(shape: &ScoreShape, n: usize) -> f64 {
    lwe_variance(shape, n) + added_variance(n, shape.packing_width(n), Gadget::DEFAULT)
}

/// The LWE pass's error proxy, `σ²·Σ_j D_ij²` over a packed row (rigorous): each block
/// contributes its item's `‖f‖² ≤ NORM_CAP` and its norm digits' entries.
fn lwe_variance(shape: &ScoreShape, _n: usize) -> f64 {
    let sigma = lattice::lwe::SIGMA;
    sigma * sigma * shape.blocks as f64 * (NORM_CAP + NORM_DIGIT_ENERGY) as f64
}

/// What every decoded coefficient's error stays below except with probability 2⁻⁴⁰ per query
/// (the sub-Gaussian tail with a union bound over the `N` coefficients of every ciphertext),
/// under packing's heuristic (independence assumption) proxy, plus the wire's rounding
/// ([`ANSWER_ROUNDING`]): see the module docs for what that means for an honest answer.
/// Below `Δ/2` (2^25.6 against 2²⁸ at the 1M shape), so [`decode`] can refuse an answer whose
/// phases are not all that close to multiples of `Δ`: a wrong key or wrong public parts leave
/// phases uniform, each inside the bound with probability 2^−2.4.
pub fn error_bound(shape: &ScoreShape, n: usize) -> f64 {
    let coefficients = (shape.ciphertexts(n) * shape.packing_width(n)) as f64;
    let nats = (2.0 * coefficients).ln() + 40.0 * std::f64::consts::LN_2;
    (2.0 * error_variance(shape, n) * nats).sqrt() + ANSWER_ROUNDING as f64
}

/// `‖f‖²`, exactly.
fn norm2(f: &[i16]) -> i64 {
    f.iter().map(|&v| i64::from(v) * i64::from(v)).sum()
}

/// The two digits planes of a matrix entry, and the norm digits of an item.
fn planes_of(f: i16) -> (u8, i8) {
    let f = i32::from(f);
    let hi = f.div_euclid(256);
    ((f - 256 * hi) as u8, hi as i8)
}

fn norm_digits(f: &[i16]) -> [u8; NORM_DIGITS] {
    let x = norm2(f);
    debug_assert!((0..=NORM_CAP).contains(&x), "checked against the cap first");
    (x as u32).to_le_bytes()
}

/// The public matrix chunk `a_c` of the query (from the version's seed).
fn query_mask(ring: &Ring, seed: &[u8; 32], chunk: usize) -> Vec<u64> {
    let mut rng = ChaCha20Rng::from_seed(*seed);
    rng.set_stream(chunk as u64);
    (0..ring.n()).map(|_| uniform(&mut rng)).collect()
}

/// The server's side: the two planes, and the packing plans of the version — all of them, or
/// a row shard's part ([`ScorePlanes::part`]): some rows of the planes and a run of every
/// plan's switch steps.
pub struct ScoreDb {
    shape: ScoreShape,
    /// The planes' rows held.
    rows: std::ops::Range<usize>,
    lo: Held<u8>,
    hi: Held<i8>,
    plans: Vec<InspiringPlan>,
}

/// Block `b`'s features of its items `rows` (those of them it has), row-major `i16`: what a
/// score database is laid out from ([`ScoreDb::lay_out`]).
pub type BlockRows<'a> = dyn Fn(usize, std::ops::Range<usize>) -> Result<Vec<i16>> + Sync + 'a;

/// Blocks held whole (each `items × dim` features, row-major) read as [`BlockRows`].
pub fn block_rows(
    blocks: &[Vec<i16>],
    dim: usize,
) -> impl Fn(usize, std::ops::Range<usize>) -> Result<Vec<i16>> + Sync + '_ {
    move |b, rows| {
        let f = blocks.get(b).ok_or_else(|| Error::InvalidParameter {
            name: "score database",
            reason: format!("no block {b} among {}", blocks.len()),
        })?;
        Ok(f[(rows.start * dim).min(f.len())..(rows.end * dim).min(f.len())].to_vec())
    }
}

/// Rows laid out at a time while a plan's rows are read (at 1,000,000 items, 22,000 columns
/// of 2 planes: 11 MB).
const LAYOUT_ROWS: usize = 256;

/// A score database checked ([`ScoreDb::lay_out`]), before its planes are laid out and its
/// packing plans built from them — the expensive part, and most of the bytes (at 1,000,000
/// items six plans of 0.2 GB beside 0.5 GB of planes): held in memory ([`ScorePlanes::build`])
/// or written out as each is built ([`ScorePlanes::build_into`]). Each plan's rows are laid out
/// from the blocks as the plan is built, [`LAYOUT_ROWS`] at a time; only the rows the
/// database keeps (all, or a shard's) stay.
pub struct ScorePlanes<'a> {
    ring: &'a Ring,
    masks: &'a InspiringMasks,
    shape: ScoreShape,
    block: Box<BlockRows<'a>>,
    /// The query masks `a_c`, transformed.
    masks_ntt: Vec<Vec<u64>>,
    /// The rows and switch steps the database keeps: all, or a shard's.
    keep: (std::ops::Range<usize>, std::ops::Range<usize>),
    /// Plans built at once (each on its own core).
    at_once: usize,
    /// Rows laid out at a time ([`LAYOUT_ROWS`]; fewer in tests, to cross their bounds).
    layout_rows: usize,
}

/// A plan and the rows of the planes its chunk gives the database.
type Built = (InspiringPlan, Vec<u8>, Vec<i8>);

impl ScorePlanes<'_> {
    /// Keeps only rows `rows` of the planes and steps `steps` of every plan (a row shard's
    /// part, `crate::shard`: each shard takes its slice of `0..shape.rows` and of
    /// `0..`[`ScoreShape::packing_steps`]). Every plan is still built whole from all the rows
    /// of its chunk (its digits depend on each of them), and the rest dropped as it is built:
    /// the build costs what one process's does, the database `1/S` of it. Refused unless both
    /// are within the shape's.
    pub fn part(
        mut self,
        rows: std::ops::Range<usize>,
        steps: std::ops::Range<usize>,
    ) -> Result<Self> {
        let n = self.ring.n();
        if rows.start > rows.end
            || rows.end > self.shape.rows
            || steps.start > steps.end
            || steps.end > self.shape.packing_steps(n)
        {
            return Err(Error::InvalidParameter {
                name: "score shard",
                reason: format!(
                    "rows {rows:?} and steps {steps:?} are not within {} rows and {} steps",
                    self.shape.rows,
                    self.shape.packing_steps(n)
                ),
            });
        }
        self.keep = (rows, steps);
        Ok(self)
    }

    /// Builds at most `plans` plans at once (at least one; by default one per core): each
    /// holds its chunk's row masks and digits while it is built (at 1,000,000 items about
    /// 0.2 GB), so a process whose memory is tight — a row shard — builds them one at a time,
    /// its rows' masks still computed on every core. The database is the same.
    pub fn plans_at_once(mut self, plans: usize) -> Self {
        self.at_once = plans.max(1);
        self
    }

    /// Lays out `rows` rows at a time instead of [`LAYOUT_ROWS`]: the same database.
    #[cfg(test)]
    pub(crate) fn layout_rows(mut self, rows: usize) -> Self {
        self.layout_rows = rows.max(1);
        self
    }

    /// One plan per row chunk, in order: the order of the database's plans and of the bytes
    /// [`ScoreDb::write_held`] writes.
    fn jobs(&self) -> Vec<std::ops::Range<usize>> {
        self.shape.row_chunks(self.ring.n())
    }

    /// Rows `rows` of the planes (every block's columns), laid out from the blocks and checked
    /// as [`ScoreDb::lay_out`] checked them.
    fn lay_out_rows(&self, rows: std::ops::Range<usize>) -> Result<(Vec<u8>, Vec<i8>)> {
        // The blocks' columns only: the last query chunk's padding columns would be zeros,
        // scanned for nothing.
        let cols = self.shape.data_cols();
        let cpb = self.shape.cols_per_block();
        let mut lo = vec![0u8; rows.len() * cols];
        let mut hi = vec![0i8; rows.len() * cols];
        for b in 0..self.shape.blocks {
            let feats = checked_rows(&self.shape, &*self.block, b, rows.clone())?;
            for (i, f) in feats.chunks_exact(self.shape.dim).enumerate() {
                let row = i * cols + b * cpb;
                for (j, &v) in f.iter().enumerate() {
                    (lo[row + j], hi[row + j]) = planes_of(v);
                }
                let at = row + self.shape.dim;
                lo[at..at + NORM_DIGITS].copy_from_slice(&norm_digits(f));
            }
        }
        Ok((lo, hi))
    }

    /// The plan of a row chunk, over the recombined rows `256·hi + lo` (the LWE ciphertexts
    /// the answer packs), and the chunk's rows the database keeps. The rows are laid out
    /// [`LAYOUT_ROWS`] at a time and their masks computed on every core.
    fn plan(&self, rows: &std::ops::Range<usize>) -> Result<Built> {
        let cols = self.shape.data_cols();
        let kept = self.keep.0.start.max(rows.start)..self.keep.0.end.min(rows.end);
        let (mut kept_lo, mut kept_hi) = (Vec::new(), Vec::new());
        let mut a_parts = Vec::with_capacity(rows.len());
        for start in rows.clone().step_by(self.layout_rows) {
            let these = start..(start + self.layout_rows).min(rows.end);
            let (lo, hi) = self.lay_out_rows(these.clone())?;
            let local: Vec<usize> = (0..these.len()).collect();
            a_parts.extend(crate::par::par_map(
                &local,
                |&i| {
                    let entry = |j: usize| {
                        if j < cols {
                            256 * i64::from(hi[i * cols + j]) + i64::from(lo[i * cols + j])
                        } else {
                            0
                        }
                    };
                    row_mask(self.ring, &self.masks_ntt, entry)
                },
                None,
            ));
            let keep_here = kept.start.max(these.start)..kept.end.min(these.end);
            if !keep_here.is_empty() {
                let at =
                    (keep_here.start - these.start) * cols..(keep_here.end - these.start) * cols;
                kept_lo.extend_from_slice(&lo[at.clone()]);
                kept_hi.extend_from_slice(&hi[at]);
            }
        }
        let plan = InspiringPlan::new_part(self.ring, self.masks, a_parts, self.keep.1.clone());
        Ok((plan, kept_lo, kept_hi))
    }

    /// The database with every plan built and held in memory. Fails only where a block's rows,
    /// read again, fail the checks [`ScoreDb::lay_out`] passed.
    pub fn build(self) -> Result<ScoreDb> {
        let (mut lo, mut hi, mut plans) = (Vec::new(), Vec::new(), Vec::new());
        crate::par::par_for_each_in_order(
            &self.jobs(),
            self.at_once,
            |job| self.plan(job),
            |built: Result<Built>| {
                let (plan, l, h) = built?;
                lo.extend_from_slice(&l);
                hi.extend_from_slice(&h);
                plans.push(plan);
                Ok::<_, Error>(())
            },
        )?;
        Ok(ScoreDb {
            shape: self.shape,
            rows: self.keep.0,
            lo: Held::Owned(lo),
            hi: Held::Owned(hi),
            plans,
        })
    }

    /// Builds the plans and writes each plan's digits to `out` as it is built, then the planes
    /// of the rows kept — the bytes [`ScoreDb::write_held`] would write — dropping each
    /// plan's digits, and then the planes, as soon as they are written (keeping their
    /// SHA-256): at most [`ScorePlanes::plans_at_once`] plans are in memory, besides the rows
    /// kept. A plan keeps its `a` part. The result answers nothing until
    /// [`WrittenScores::share`] reads the digits and planes back from those bytes. Stops at
    /// the first failed write (or a block's rows failing their checks, as an error of kind
    /// `Other`); what was written is then of no use.
    pub fn build_into(
        self,
        out: &mut (impl std::io::Write + Send + ?Sized),
    ) -> std::io::Result<WrittenScores> {
        let (mut lo, mut hi, mut plans) = (Vec::new(), Vec::new(), Vec::new());
        let mut len = 0;
        crate::par::par_for_each_in_order(
            &self.jobs(),
            self.at_once,
            |job| self.plan(job),
            |built: Result<Built>| {
                let (mut plan, l, h) = built.map_err(std::io::Error::other)?;
                plan.write_out_digits(out)?;
                len += plan.digits_len();
                lo.extend_from_slice(&l);
                hi.extend_from_slice(&h);
                plans.push(plan);
                Ok::<_, std::io::Error>(())
            },
        )?;
        let (mut lo, mut hi) = (Held::Owned(lo), Held::Owned(hi));
        len += lo.padded_len() + hi.padded_len();
        lo.write_out(out)?;
        hi.write_out(out)?;
        Ok(WrittenScores {
            db: ScoreDb {
                shape: self.shape,
                rows: self.keep.0,
                lo,
                hi,
                plans,
            },
            len,
        })
    }
}

/// Block `b`'s features of its items `rows`, checked: whole rows of `dim`, at most as many as
/// asked, no value of −32768 and no squared norm above [`NORM_CAP`].
fn checked_rows(
    shape: &ScoreShape,
    block: &BlockRows<'_>,
    b: usize,
    rows: std::ops::Range<usize>,
) -> Result<Vec<i16>> {
    let invalid = |reason: String| Error::InvalidParameter {
        name: "score database",
        reason,
    };
    let feats = block(b, rows.clone())?;
    if feats.len() % shape.dim != 0 || feats.len() / shape.dim > rows.len() {
        return Err(invalid(format!(
            "block {b}'s rows {rows:?} do not fit {shape:?}"
        )));
    }
    for f in feats.chunks_exact(shape.dim) {
        if f.iter().any(|&v| i32::from(v).abs() > FEATURE_MAX) {
            return Err(invalid(format!("block {b} has a feature of −32768")));
        }
        if norm2(f) > NORM_CAP {
            return Err(invalid(format!(
                "block {b} has an item whose squared norm exceeds {NORM_CAP}"
            )));
        }
    }
    Ok(feats)
}

/// A score database whose plans' digits were written out by [`ScorePlanes::build_into`]: it
/// becomes one that answers once [`WrittenScores::share`] has read them back.
pub struct WrittenScores {
    /// Its plans' digits are written out ([`InspiringPlan::write_out_digits`]): never
    /// answered from until shared.
    db: ScoreDb,
    len: usize,
}

impl WrittenScores {
    /// Bytes written.
    pub fn written_len(&self) -> usize {
        self.len
    }

    /// The database reading its plans' digits and planes from `bytes`, exactly the bytes
    /// [`ScorePlanes::build_into`] wrote: refused (typed) unless they are that long and each
    /// plan's digits and each plane have the SHA-256 kept of them when written. Answers are
    /// the same as those of [`ScorePlanes::build`]'s database.
    pub fn share(self, bytes: &SharedBytes) -> Result<ScoreDb> {
        if (**bytes).as_ref().len() != self.len {
            return Err(Error::InvalidParameter {
                name: "shared words",
                reason: format!(
                    "{} bytes for a score database of {}",
                    (**bytes).as_ref().len(),
                    self.len
                ),
            });
        }
        let mut db = self.db;
        db.share(bytes)?;
        Ok(db)
    }
}

impl ScoreDb {
    /// The database of `blocks` (each `items × dim` features, row-major, at most `rows`
    /// items), with the query masks from `query_seed` and packing masks from `packing_seed`.
    /// Building the plans is the expensive part: one key switch's `a` half per row and plane.
    pub fn build(
        ring: &Ring,
        shape: ScoreShape,
        blocks: &[Vec<i16>],
        query_seed: &[u8; 32],
        masks: &InspiringMasks,
    ) -> Result<ScoreDb> {
        if blocks.len() != shape.blocks {
            return Err(Error::InvalidParameter {
                name: "score database",
                reason: format!("{} blocks for a shape of {}", blocks.len(), shape.blocks),
            });
        }
        Self::lay_out(
            ring,
            shape,
            block_rows(blocks, shape.dim),
            query_seed,
            masks,
        )?
        .build()
    }

    /// Checks every block's features (`block(b, rows)`: block `b`'s items `rows`, see
    /// [`BlockRows`]) against the shape — all of this build's errors are here — and returns
    /// the database to build ([`ScorePlanes::build`], [`ScorePlanes::build_into`]), which
    /// reads each block's rows again as it lays out each plan's: only one plan's rows at a
    /// time are read, and only the rows the database keeps are held (at 1,000,000 items the
    /// blocks' features would take 0.5 GB beside the planes; a row shard keeps a quarter of
    /// the planes). `block` must give the same features every time (the planes kept and the
    /// plans are made from the same read, so a block that changes between reads builds a
    /// database of its later values, checked as these were).
    pub fn lay_out<'a>(
        ring: &'a Ring,
        shape: ScoreShape,
        block: impl Fn(usize, std::ops::Range<usize>) -> Result<Vec<i16>> + Sync + 'a,
        query_seed: &[u8; 32],
        masks: &'a InspiringMasks,
    ) -> Result<ScorePlanes<'a>> {
        let n = ring.n();
        shape.check(n)?;
        check_width(&shape, n, masks)?;
        for b in 0..shape.blocks {
            // One row more than the shape has: a block that has it does not fit.
            let all = checked_rows(&shape, &block, b, 0..shape.rows + 1)?;
            if all.len() / shape.dim > shape.rows {
                return Err(Error::InvalidParameter {
                    name: "score database",
                    reason: format!("block {b} has more than {} items", shape.rows),
                });
            }
        }
        let masks_ntt: Vec<Vec<u64>> = (0..shape.chunks(n))
            .map(|c| ring.to_ntt(&query_mask(ring, query_seed, c)))
            .collect();
        Ok(ScorePlanes {
            ring,
            masks,
            shape,
            block: Box::new(block),
            masks_ntt,
            keep: (0..shape.rows, 0..shape.packing_steps(n)),
            at_once: usize::MAX,
            layout_rows: LAYOUT_ROWS,
        })
    }

    /// Bytes [`ScoreDb::write_held`] writes.
    pub fn held_len(&self) -> usize {
        self.lo.padded_len()
            + self.hi.padded_len()
            + self
                .plans
                .iter()
                .map(InspiringPlan::digits_len)
                .sum::<usize>()
    }

    /// The plans' digits and then the planes, little-endian (what [`ScoreDb::share`] reads
    /// back): for a server that writes them to a file and maps it. Plans first: a streamed
    /// build ([`ScorePlanes::build_into`]) knows the planes it keeps only once every plan's
    /// rows are laid out.
    pub fn write_held(&self, out: &mut (impl std::io::Write + ?Sized)) -> std::io::Result<()> {
        self.plans.iter().try_for_each(|p| p.write_digits(out))?;
        self.lo.write(out)?;
        self.hi.write(out)
    }

    /// Reads the plans' digits and the planes from `bytes`, where [`ScoreDb::write_held`]
    /// wrote them, instead of holding them: refused unless they equal what is held (parts
    /// checked equal before a refusal stay shared). Answers are the same either way.
    pub fn share(&mut self, bytes: &SharedBytes) -> Result<()> {
        let mut at = 0;
        for p in &mut self.plans {
            at = p.share_digits(bytes, at)?;
        }
        at = self.lo.share(bytes, at)?;
        self.hi.share(bytes, at)?;
        Ok(())
    }

    /// Whether the planes and plans are in the database's own memory (nothing shared).
    pub fn held_in_memory(&self) -> bool {
        self.lo.is_owned() && self.hi.is_owned() && self.plans.iter().all(|p| p.digits_owned())
    }

    pub fn shape(&self) -> ScoreShape {
        self.shape
    }

    /// The packed outputs' `a` parts: fixed for the version, public (the client needs them to
    /// decrypt; they are the same for every query).
    pub fn public_a(&self) -> Vec<&[u64]> {
        self.plans.iter().map(|p| p.a()).collect()
    }

    /// Bytes the plans hold.
    pub fn plan_bytes(&self) -> usize {
        self.plans.iter().map(|p| p.bytes()).sum()
    }

    /// The answer to a query: per plane and row chunk, the packed ciphertext's `b` part. With
    /// `micros`, the work's summed time is added to it (see `par::par_map`).
    pub fn answer(
        &self,
        ring: &Ring,
        query: &[u64],
        bodies: &InspiringBodies,
        micros: Option<&AtomicU64>,
    ) -> Result<Vec<Vec<u64>>> {
        self.answer_many(ring, &[(query, bodies)], micros)
            .pop()
            .expect("one query, one answer")
    }

    /// [`ScoreDb::answer`] for several queries at once (concurrent searches batched by the
    /// server): one pass over the planes scores them all, and each plan's digits are read once
    /// for all of them ([`InspiringPlan::pack_b_many`]) — the two reads that bound a single
    /// answer's speed. Each query's answer is exactly its own [`ScoreDb::answer`]; a malformed
    /// query gets its error and does not hold up the others.
    pub fn answer_many(
        &self,
        ring: &Ring,
        queries: &[(&[u64], &InspiringBodies)],
        micros: Option<&AtomicU64>,
    ) -> Vec<Result<Vec<Vec<u64>>>> {
        let width = self.shape.packing_width(ring.n());
        self.each_checked(ring, queries, micros, |chunks| {
            chunks
                .into_iter()
                .map(|acc| finished(ring, width, acc))
                .collect()
        })
    }

    /// A row shard's part of the answers to `queries` ([`ScorePart`]; `crate::shard`): its
    /// rows' scoring pass and its steps of every plan, not yet divided by `P`.
    /// [`combine_parts`] of every shard's part is exactly [`ScoreDb::answer_many`] of the whole
    /// database. Errors as [`ScoreDb::answer_many`]'s.
    pub fn part_many(
        &self,
        ring: &Ring,
        queries: &[(&[u64], &InspiringBodies)],
        micros: Option<&AtomicU64>,
    ) -> Vec<Result<ScorePart>> {
        let steps = self.plans.first().map_or(0..0, InspiringPlan::held_steps);
        self.each_checked(ring, queries, micros, |chunks| ScorePart {
            shape: self.shape,
            n: ring.n(),
            rows: self.rows.clone(),
            steps: steps.clone(),
            chunks,
        })
    }

    /// Every query checked, the good ones accumulated in one pass, each accumulation made into
    /// a result by `each`; a malformed query gets its error in its place.
    fn each_checked<T>(
        &self,
        ring: &Ring,
        queries: &[(&[u64], &InspiringBodies)],
        micros: Option<&AtomicU64>,
        each: impl FnMut(Vec<Accumulated>) -> T,
    ) -> Vec<Result<T>> {
        let checked: Vec<Result<()>> = queries
            .iter()
            .map(|(q, _)| self.check_query(ring, q))
            .collect();
        let good: Vec<(&[u64], &InspiringBodies)> = queries
            .iter()
            .zip(&checked)
            .filter(|(_, c)| c.is_ok())
            .map(|(&q, _)| q)
            .collect();
        let mut results = self
            .accumulate_many(ring, &good, micros)
            .into_iter()
            .map(each);
        checked
            .into_iter()
            .map(|c| c.map(|()| results.next().expect("a result per good query")))
            .collect()
    }

    /// The rows of the planes held (all, or a shard's).
    pub fn held_rows(&self) -> std::ops::Range<usize> {
        self.rows.clone()
    }

    /// Checked queries' accumulations, `[query][row chunk]`: the scoring pass over the rows
    /// held, then the steps held of every plan.
    fn accumulate_many(
        &self,
        ring: &Ring,
        good: &[(&[u64], &InspiringBodies)],
        micros: Option<&AtomicU64>,
    ) -> Vec<Vec<Accumulated>> {
        if good.is_empty() {
            return Vec::new();
        }
        let uploads: Vec<&[u64]> = good.iter().map(|(q, _)| *q).collect();
        let sums = self.plane_sums_many(&uploads, micros);
        let sums: Vec<&[u64]> = sums.iter().map(Vec::as_slice).collect();
        let bodies: Vec<&InspiringBodies> = good.iter().map(|(_, b)| *b).collect();
        self.pack_sums_many(ring, &sums, &bodies, micros)
    }

    /// Bytes held: the planes and the plans.
    pub fn bytes(&self) -> usize {
        self.lo.byte_len() + self.hi.byte_len() + self.plan_bytes()
    }

    fn check_query(&self, ring: &Ring, query: &[u64]) -> Result<()> {
        let cols = self.shape.cols(ring.n());
        if query.len() != cols || query.iter().any(|&x| x >= Q.value) {
            return Err(Error::InvalidParameter {
                name: "score query",
                reason: format!("expected {cols} values below Q"),
            });
        }
        Ok(())
    }

    /// The scoring pass: `D·b` row by row, each row's plane sums recombined (`256·hi + lo`):
    /// the `b` value of the row's LWE ciphertext.
    pub fn plane_sums(
        &self,
        ring: &Ring,
        query: &[u64],
        micros: Option<&AtomicU64>,
    ) -> Result<Vec<u64>> {
        self.check_query(ring, query)?;
        Ok(self
            .plane_sums_many(&[query], micros)
            .pop()
            .expect("one query, one result"))
    }

    /// [`ScoreDb::plane_sums`] of checked queries in one pass over the planes: each row is
    /// read once and dotted with every query while it is in cache.
    fn plane_sums_many(&self, queries: &[&[u64]], micros: Option<&AtomicU64>) -> Vec<Vec<u64>> {
        // The padding columns past the blocks' multiply zero entries: not scanned.
        let cols = self.shape.data_cols();
        let limbs: Vec<Limbs> = queries.iter().map(|q| Limbs::new(&q[..cols])).collect();
        let (lo, hi) = (self.lo.get(), self.hi.get());
        const RUN: usize = 256;
        let rows = lo.len() / cols;
        let runs: Vec<usize> = (0..rows).step_by(RUN).collect();
        // Per run, row-major: row i's value for query 0, 1, …
        let parts = crate::par::par_map(
            &runs,
            |&start| {
                let end = (start + RUN).min(rows);
                let mut out = Vec::with_capacity((end - start) * limbs.len());
                let value = |(s_lo, s_hi): (u64, u64)| Q.add(Q.mul(s_hi, 256), s_lo);
                let mut i = start;
                // `ROWS_AT_ONCE` rows share each limb load ([`Limbs::dot_pairs`]); the run's
                // last few rows one by one.
                while i + ROWS_AT_ONCE <= end {
                    let row = |r: usize| (i + r) * cols..(i + r + 1) * cols;
                    let lo_rows: [&[u8]; ROWS_AT_ONCE] = std::array::from_fn(|r| &lo[row(r)]);
                    let hi_rows: [&[i8]; ROWS_AT_ONCE] = std::array::from_fn(|r| &hi[row(r)]);
                    let per_query: Vec<_> = limbs
                        .iter()
                        .map(|l| l.dot_pairs(lo_rows, hi_rows))
                        .collect();
                    for r in 0..ROWS_AT_ONCE {
                        out.extend(per_query.iter().map(|p| value(p[r])));
                    }
                    i += ROWS_AT_ONCE;
                }
                for i in i..end {
                    let r = i * cols..(i + 1) * cols;
                    out.extend(
                        limbs
                            .iter()
                            .map(|l| value(l.dot_pair(&lo[r.clone()], &hi[r.clone()]))),
                    );
                }
                out
            },
            micros,
        );
        let mut sums: Vec<Vec<u64>> = (0..queries.len())
            .map(|_| Vec::with_capacity(rows))
            .collect();
        for part in parts {
            for row in part.chunks_exact(queries.len()) {
                for (s, &v) in sums.iter_mut().zip(row) {
                    s.push(v);
                }
            }
        }
        sums
    }

    /// Packing the rows' values under the client's key bodies (the online half of the plans).
    pub fn pack_sums(
        &self,
        ring: &Ring,
        sums: &[u64],
        bodies: &InspiringBodies,
        micros: Option<&AtomicU64>,
    ) -> Vec<Vec<u64>> {
        let width = self.shape.packing_width(ring.n());
        self.pack_sums_many(ring, &[sums], &[bodies], micros)
            .pop()
            .expect("one query, one answer")
            .into_iter()
            .map(|acc| finished(ring, width, acc))
            .collect()
    }

    /// [`ScoreDb::pack_sums`] for several queries (`sums[q]`, `bodies[q]`, sums of the rows
    /// held) before the division by `P`: one job per plan, each accumulating every query over
    /// the plan's steps held and the chunk's rows held ([`InspiringPlan::accumulate_many`]).
    fn pack_sums_many(
        &self,
        ring: &Ring,
        sums: &[&[u64]],
        bodies: &[&InspiringBodies],
        micros: Option<&AtomicU64>,
    ) -> Vec<Vec<Accumulated>> {
        // The plans are in row-chunk order, as `build` made them.
        let jobs: Vec<(&InspiringPlan, std::ops::Range<usize>)> = self
            .plans
            .iter()
            .zip(self.shape.row_chunks(ring.n()))
            .collect();
        let held = &self.rows;
        let packed = crate::par::par_map(
            &jobs,
            |(plan, chunk)| {
                // The chunk's rows held, as indices into the sums and as inputs of the plan.
                let (start, end) = (chunk.start.max(held.start), chunk.end.min(held.end));
                let inputs: Vec<(&InspiringBodies, usize, &[u64])> = bodies
                    .iter()
                    .zip(sums)
                    .map(|(&b, s)| {
                        if start < end {
                            (
                                b,
                                start - chunk.start,
                                &s[start - held.start..end - held.start],
                            )
                        } else {
                            (b, 0, &[][..])
                        }
                    })
                    .collect();
                plan.accumulate_many(ring, &inputs)
            },
            micros,
        );
        // `packed[job][query]` to `answers[query][job]`.
        let mut answers = vec![Vec::with_capacity(jobs.len()); bodies.len()];
        for per_job in packed {
            for (a, b) in answers.iter_mut().zip(per_job) {
                a.push(b);
            }
        }
        answers
    }
}

/// A scoring query as four signed 16-bit limbs a value, `q = Σ_k 2¹⁶ᵏ·l_k` with
/// `l_k ∈ [−2¹⁵, 2¹⁵)`, laid out for the pass: for each group of 16 columns, limb 0's 16
/// values, then limb 1's, 2's and 3's. A row's `Σ_j d_j·q_j` is then `Σ_k 2¹⁶ᵏ·S_k` with
/// `S_k = Σ_j d_j·l_{k,j}` — 16 × 16-bit products summed in pairs into 32-bit lanes (AVX2's
/// `vpmaddwd`, 16 products an instruction), where 62-bit values would need 64-bit products.
struct Limbs {
    /// `4·⌊cols/16⌋·16` limbs in the group layout above.
    groups: Vec<i16>,
    /// The columns past the last whole group, as plain values (scalar tail).
    tail: Vec<u64>,
    /// With AVX-512 VNNI (else empty): the limbs in steps of 32 columns for
    /// `vnni::score_limb_sums`, and the values of the columns past the last whole step.
    #[cfg(target_arch = "x86_64")]
    wide: Option<(Vec<i16>, Vec<u64>)>,
}

/// Rows the scoring pass dots with each limb load where AVX-512 VNNI runs it. At the 1M shape
/// (`--bench hintless -- 323 12288`, one core) the pass took 65.8 ms with AVX2 a row at a
/// time and 47 ms with VNNI two or three rows at a time (0.54 GB of planes at 11.5 GB/s: the
/// memory's pace, which more rows do not change).
const ROWS_AT_ONCE: usize = 2;

/// Groups of 16 columns summed in 32-bit lanes before they are added into 64 bits: a lane
/// gains at most `2·255·2¹⁵ < 2²⁴` a group, so 64 groups stay below 2³⁰.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
const FLUSH_GROUPS: usize = 64;

impl Limbs {
    fn new(query: &[u64]) -> Limbs {
        Limbs {
            groups: Self::layout(query, 16),
            tail: query[query.len() / 16 * 16..].to_vec(),
            #[cfg(target_arch = "x86_64")]
            wide: crate::vnni::available().then(|| {
                let step = crate::vnni::SCORE_STEP;
                (
                    Self::layout(query, step),
                    query[query.len() / step * step..].to_vec(),
                )
            }),
        }
    }

    /// The whole groups of `width` columns: for each, limb 0's `width` values, then limb
    /// 1's, 2's and 3's.
    fn layout(query: &[u64], width: usize) -> Vec<i16> {
        let whole = query.len() / width * width;
        let mut groups = vec![0i16; 4 * whole];
        for (g, chunk) in query[..whole].chunks_exact(width).enumerate() {
            for (j, &q) in chunk.iter().enumerate() {
                // q < 2⁶²: three balanced limbs leave |v| ≤ 2¹⁴ + 1 for the fourth.
                let mut v = q as i64;
                for k in 0..4 {
                    let l = ((v + (1 << 15)) & 0xffff) - (1 << 15);
                    groups[g * 4 * width + k * width + j] = l as i16;
                    v = (v - l) >> 16;
                }
                debug_assert_eq!(v, 0);
            }
        }
        groups
    }

    /// [`Limbs::dot_pair`] for `R` rows at once: with AVX-512 VNNI, every limb load feeds all
    /// of them (`vnni::score_limb_sums`); otherwise row by row. The same values either way.
    fn dot_pairs<const R: usize>(&self, lo: [&[u8]; R], hi: [&[i8]; R]) -> [(u64, u64); R] {
        #[cfg(target_arch = "x86_64")]
        if let Some((wide, tail)) = &self.wide {
            // SAFETY: `wide` is built only where the CPU supports AVX-512F, BW and VNNI.
            let sums = unsafe { crate::vnni::score_limb_sums(lo, hi, wide) };
            let whole = wide.len() / 4;
            return std::array::from_fn(|r| {
                let (mut s_lo, mut s_hi) = (combine(sums[r].0), combine(sums[r].1));
                for ((&q, &dl), &dh) in tail.iter().zip(&lo[r][whole..]).zip(&hi[r][whole..]) {
                    s_lo += i128::from(dl) * i128::from(q);
                    s_hi += i128::from(dh) * i128::from(q);
                }
                (reduce_q(s_lo), reduce_q(s_hi))
            });
        }
        std::array::from_fn(|r| self.dot_pair(lo[r], hi[r]))
    }

    /// `(Σ_j lo_j·q_j, Σ_j hi_j·q_j) mod Q` for one row of each plane.
    fn dot_pair(&self, lo: &[u8], hi: &[i8]) -> (u64, u64) {
        let whole = self.groups.len() / 4;
        let (mut s_lo, mut s_hi) = self.sums(&lo[..whole], &hi[..whole]);
        // The tail: at most 15 columns, exact in i128.
        for ((&q, &dl), &dh) in self.tail.iter().zip(&lo[whole..]).zip(&hi[whole..]) {
            s_lo += i128::from(dl) * i128::from(q);
            s_hi += i128::from(dh) * i128::from(q);
        }
        (reduce_q(s_lo), reduce_q(s_hi))
    }

    /// The whole groups' sums, exact (`|S_k| < 2³⁸`, so `Σ_k 2¹⁶ᵏ·S_k` fits an i128).
    fn sums(&self, lo: &[u8], hi: &[i8]) -> (i128, i128) {
        #[cfg(target_arch = "x86_64")]
        {
            if std::is_x86_feature_detected!("avx2") {
                // SAFETY: the CPU supports AVX2 (checked just above).
                let (l, h) = unsafe { self.limb_sums_avx2(lo, hi) };
                return (combine(l), combine(h));
            }
        }
        let (l, h) = self.limb_sums_portable(lo, hi);
        (combine(l), combine(h))
    }

    fn limb_sums_portable(&self, lo: &[u8], hi: &[i8]) -> ([i64; 4], [i64; 4]) {
        let (mut l, mut h) = ([0i64; 4], [0i64; 4]);
        for ((limbs, dl), dh) in self
            .groups
            .chunks_exact(64)
            .zip(lo.chunks_exact(16))
            .zip(hi.chunks_exact(16))
        {
            for k in 0..4 {
                for j in 0..16 {
                    let q = i64::from(limbs[k * 16 + j]);
                    l[k] += i64::from(dl[j]) * q;
                    h[k] += i64::from(dh[j]) * q;
                }
            }
        }
        (l, h)
    }

    /// [`Limbs::limb_sums_portable`] with `vpmaddwd`: both planes' rows against each limb
    /// vector as it is loaded, eight 32-bit accumulators flushed every [`FLUSH_GROUPS`].
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    unsafe fn limb_sums_avx2(&self, lo: &[u8], hi: &[i8]) -> ([i64; 4], [i64; 4]) {
        use std::arch::x86_64::*;
        let groups = lo.len() / 16;
        debug_assert!(hi.len() == lo.len() && self.groups.len() == 64 * groups);
        let (mut l, mut h) = ([0i64; 4], [0i64; 4]);
        let flush = |acc: &[__m256i; 4], out: &mut [i64; 4]| {
            for (o, a) in out.iter_mut().zip(acc) {
                let mut lanes = [0i32; 8];
                // SAFETY: `lanes` holds 32 bytes.
                unsafe { _mm256_storeu_si256(lanes.as_mut_ptr().cast(), *a) };
                *o += lanes.iter().map(|&x| i64::from(x)).sum::<i64>();
            }
        };
        let mut g = 0;
        while g < groups {
            let end = (g + FLUSH_GROUPS).min(groups);
            let mut acc_l = [_mm256_setzero_si256(); 4];
            let mut acc_h = [_mm256_setzero_si256(); 4];
            for i in g..end {
                // SAFETY: group i's 16 bytes of each row and 64 limbs are in bounds
                // (`groups` whole groups; checked above in debug builds, by the callers'
                // equal lengths in all).
                unsafe {
                    let dl = _mm256_cvtepu8_epi16(_mm_loadu_si128(lo.as_ptr().add(16 * i).cast()));
                    let dh = _mm256_cvtepi8_epi16(_mm_loadu_si128(hi.as_ptr().add(16 * i).cast()));
                    let base = self.groups.as_ptr().add(64 * i);
                    for k in 0..4 {
                        let q = _mm256_loadu_si256(base.add(16 * k).cast());
                        acc_l[k] = _mm256_add_epi32(acc_l[k], _mm256_madd_epi16(dl, q));
                        acc_h[k] = _mm256_add_epi32(acc_h[k], _mm256_madd_epi16(dh, q));
                    }
                }
            }
            flush(&acc_l, &mut l);
            flush(&acc_h, &mut h);
            g = end;
        }
        (l, h)
    }
}

/// `s mod Q`.
fn reduce_q(s: i128) -> u64 {
    Q.from_i64((s % i128::from(Q.value)) as i64)
}

/// `Σ_k 2¹⁶ᵏ·S_k`.
fn combine(s: [i64; 4]) -> i128 {
    s.iter()
        .enumerate()
        .map(|(k, &v)| i128::from(v) << (16 * k))
        .sum()
}

/// `A_i = Σ_c r̃_{i,c}·a_c` for a row given by `entry(j)`, in coefficient form.
fn row_mask(ring: &Ring, masks_ntt: &[Vec<u64>], entry: impl Fn(usize) -> i64) -> Vec<u64> {
    let n = ring.n();
    let mut acc = vec![0u64; n];
    for (c, mask) in masks_ntt.iter().enumerate() {
        // r̃_0 = r_0, r̃_{N−t} = −r_t: the constant coefficient of r̃·y is ⟨r, y⟩.
        let mut rev = vec![0u64; n];
        rev[0] = Q.from_i64(entry(c * n));
        for t in 1..n {
            rev[n - t] = Q.from_i64(-entry(c * n + t));
        }
        let f = ring.to_ntt(&rev);
        for i in 0..n {
            acc[i] = Q.add(acc[i], Q.mul(f[i], mask[i]));
        }
    }
    ring.ntt.inverse(&mut acc);
    acc
}

/// A query for block `block` with integer features `q` (`|q_j| ≤ 32767`): the upload (the
/// chunks' `b` values and the key bodies) and the secret that decodes the answer. The same as
/// [`prepare`] then [`Prepared::query`].
pub fn query(
    ring: &Ring,
    shape: &ScoreShape,
    query_seed: &[u8; 32],
    masks: &InspiringMasks,
    block: usize,
    q: &[i16],
    rng: &mut impl RngCore,
) -> Result<(Vec<u64>, InspiringBodies, SecretKey)> {
    prepare(ring, shape, query_seed, masks, rng)?.query(block, q)
}

/// The part of a query that does not depend on the photo: a fresh secret, its packing-key
/// bodies and every chunk's `a·s + e`, computed ahead (before the photo is known). **Used
/// once**: [`Prepared::query`] consumes it; the secret and the masks are zeroised on drop.
pub struct Prepared {
    shape: ScoreShape,
    n: usize,
    sk: SecretKey,
    /// `a_c·s + e_c` for every chunk `c`, concatenated (`cols(n)` values).
    masked: Zeroizing<Vec<u64>>,
    bodies: InspiringBodies,
}

/// Prepares one query against `shape`: the secret, errors and key bodies drawn from `rng` (a
/// CSPRNG) exactly as a query draws them. Reads nothing private.
pub fn prepare(
    ring: &Ring,
    shape: &ScoreShape,
    query_seed: &[u8; 32],
    masks: &InspiringMasks,
    rng: &mut impl RngCore,
) -> Result<Prepared> {
    let n = ring.n();
    shape.check(n)?;
    check_width(shape, n, masks)?;
    let sk = SecretKey::generate(ring, rng);
    let zero = vec![0u64; n];
    let masked: Zeroizing<Vec<u64>> = Zeroizing::new(
        (0..shape.chunks(n))
            .flat_map(|c| encrypt_under(ring, &sk, &query_mask(ring, query_seed, c), &zero, rng))
            .collect(),
    );
    let bodies = masks.bodies(ring, &sk, rng);
    Ok(Prepared {
        shape: *shape,
        n,
        sk,
        masked,
        bodies,
    })
}

impl Prepared {
    /// The shape it was prepared for.
    pub fn shape(&self) -> ScoreShape {
        self.shape
    }

    /// The query for block `block` with integer features `q` (`|q_j| ≤ 32767`) from this
    /// preparation: each column's value added to its chunk's mask.
    pub fn query(self, block: usize, q: &[i16]) -> Result<(Vec<u64>, InspiringBodies, SecretKey)> {
        let (shape, n) = (self.shape, self.n);
        if block >= shape.blocks
            || q.len() != shape.dim
            || q.iter().any(|&v| i32::from(v).abs() > FEATURE_MAX)
            || norm2(q) > NORM_CAP
        {
            return Err(Error::InvalidParameter {
                name: "score query",
                reason: format!(
                    "block {block} of {}, {} features of {} with a squared norm of at most \
                     {NORM_CAP}",
                    shape.blocks,
                    q.len(),
                    shape.dim
                ),
            });
        }
        // One block's values (`2q`, then the norm digits' weights), placed in every column
        // under the mask of "this column's block is the one asked for": the block chosen
        // decides no branch and no memory address (every column is written once, in order).
        let cpb = shape.cols_per_block();
        let template: Zeroizing<Vec<i64>> = Zeroizing::new(
            q.iter()
                .map(|&v| 2 * i64::from(v))
                .chain((0..NORM_DIGITS).map(|k| -(1i64 << (8 * k))))
                .collect(),
        );
        let delta = 1u64 << LOG_DELTA;
        let upload: Vec<u64> = (0..shape.cols(n))
            .map(|c| {
                let u = template[c % cpb] & -i64::from(c / cpb == block);
                Q.add(self.masked[c], Q.mul(Q.from_i64(u), delta))
            })
            .collect();
        Ok((upload, self.bodies, self.sk))
    }
}

/// The scores [`decode`] yields for block `block` (`items × dim`, row-major), computed in the
/// clear: the reference the tests and benchmarks check against.
pub fn plaintext_scores(q: &[i16], block: &[i16], dim: usize) -> Vec<i64> {
    block
        .chunks_exact(dim)
        .map(|f| {
            let dot: i64 = f
                .iter()
                .zip(q)
                .map(|(&a, &b)| i64::from(a) * i64::from(b))
                .sum();
            let norm: i64 = f.iter().map(|&a| i64::from(a) * i64::from(a)).sum();
            2 * dot - norm
        })
        .collect()
}

/// Bytes of a query on the wire: the chunks' `b` values (8 bytes each, little-endian), then
/// the key bodies ([`InspiringBodies::write`]). The same for every photo and block.
pub fn upload_len(shape: &ScoreShape, n: usize) -> usize {
    shape.cols(n) * 8 + InspiringBodies::wire_len(n, Gadget::DEFAULT)
}

pub fn encode_upload(query: &[u64], bodies: &InspiringBodies) -> Vec<u8> {
    let mut out = Vec::with_capacity(query.len() * 8);
    query
        .iter()
        .for_each(|v| out.extend_from_slice(&v.to_le_bytes()));
    bodies.write(&mut out);
    out
}

/// The server's reading of an upload: exactly [`upload_len`] bytes, every value reduced.
pub fn decode_upload(
    shape: &ScoreShape,
    n: usize,
    bytes: &[u8],
) -> Result<(Vec<u64>, InspiringBodies)> {
    if bytes.len() != upload_len(shape, n) {
        return Err(PirError::Malformed(format!(
            "a scores query has {} bytes, expected {}",
            bytes.len(),
            upload_len(shape, n)
        ))
        .into());
    }
    let (query, keys) = bytes.split_at(shape.cols(n) * 8);
    let query = read_reduced(query)?;
    Ok((query, InspiringBodies::read(n, Gadget::DEFAULT, keys)?))
}

/// A packed ciphertext's `b` from its accumulation: divided by `P`, and only the `width`
/// coefficients that carry rows (module docs).
fn finished(ring: &Ring, width: usize, acc: Accumulated) -> Vec<u64> {
    let mut b = acc.finish(ring);
    b.truncate(width);
    b
}

/// A row shard's part of one query's answer ([`ScoreDb::part_many`]; `crate::shard`): the rows
/// and switch steps it covers, and per row chunk the packing accumulated over them, not yet
/// divided by `P`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScorePart {
    /// The database's shape and the ring's degree: whatever combines parts needs nothing
    /// else.
    pub shape: ScoreShape,
    pub n: usize,
    pub rows: std::ops::Range<usize>,
    pub steps: std::ops::Range<usize>,
    pub chunks: Vec<Accumulated>,
}

/// What a [`ScorePart`]'s bytes start with.
const PART_MAGIC: [u8; 4] = *b"PMs1";
/// Its header: the magic, then the shape's blocks, dimension and rows, the ring's degree, and
/// the part's rows' and steps' starts and ends as `u32`.
const PART_HEADER: usize = 36;

impl ScorePart {
    /// Little-endian: the header, then each chunk's `N` residues modulo `Q`, then its `N`
    /// modulo `P`.
    pub fn encode(&self) -> Vec<u8> {
        let (n, s) = (self.n, &self.shape);
        let words = [
            s.blocks,
            s.dim,
            s.rows,
            n,
            self.rows.start,
            self.rows.end,
            self.steps.start,
            self.steps.end,
        ];
        let capacity = PART_HEADER + 16 * n * self.chunks.len();
        let mut out = crate::shard::write_header(&PART_MAGIC, &words, capacity);
        for c in &self.chunks {
            for v in c.q.iter().chain(&c.p) {
                out.extend_from_slice(&v.to_le_bytes());
            }
        }
        out
    }

    /// Bytes of a part of `shape`'s answers in a ring of degree `n`.
    pub fn wire_len(shape: &ScoreShape, n: usize) -> usize {
        PART_HEADER + 16 * n * shape.ciphertexts(n)
    }

    /// The part [`ScorePart::encode`] wrote: refused (typed) unless its ring is of degree
    /// `n` (the one [`combine_parts`] is given), its shape is one the scheme serves, it is exactly
    /// as long as that shape's part, its rows and steps lie within the shape's and every
    /// residue is reduced.
    pub fn decode(n: usize, bytes: &[u8]) -> Result<ScorePart> {
        let bad = |reason: String| Error::InvalidParameter {
            name: "score part",
            reason,
        };
        let w = crate::shard::read_header(bytes, &PART_MAGIC, 8)
            .ok_or_else(|| bad("not a score part".into()))?;
        let word = |i: usize| w[i - 1];
        let shape = ScoreShape {
            blocks: word(1),
            dim: word(2),
            rows: word(3),
        };
        if word(4) != n {
            return Err(bad(format!("a ring of degree {}, not {n}", word(4))));
        }
        shape.check(n)?;
        let shape = &shape;
        if bytes.len() != Self::wire_len(shape, n) {
            return Err(bad(format!(
                "{} bytes, expected a part of {}",
                bytes.len(),
                Self::wire_len(shape, n)
            )));
        }
        let (rows, steps) = (word(5)..word(6), word(7)..word(8));
        if rows.start > rows.end
            || rows.end > shape.rows
            || steps.start > steps.end
            || steps.end > shape.packing_steps(n)
        {
            return Err(bad(format!(
                "rows {rows:?} and steps {steps:?} outside the shape"
            )));
        }
        let values: Vec<u64> = bytes[PART_HEADER..]
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
            .collect();
        let mut chunks = Vec::with_capacity(shape.ciphertexts(n));
        for c in values.chunks_exact(2 * n) {
            let (q, p) = c.split_at(n);
            if q.iter().any(|&x| x >= Q.value) || p.iter().any(|&x| x >= lattice::modq::P.value) {
                return Err(bad("a residue is not reduced".into()));
            }
            chunks.push(Accumulated {
                q: q.to_vec(),
                p: p.to_vec(),
            });
        }
        Ok(ScorePart {
            shape: *shape,
            n,
            rows,
            steps,
            chunks,
        })
    }
}

/// The answer from every row shard's part of it (any order): exactly what
/// [`ScoreDb::answer`] of the whole database gives (the parts' accumulations summed, then
/// divided by `P` once; `crate::shard`), and the shape ([`encode_answer`] then puts it on the
/// wire). Refused (typed) unless the parts are of one shape in `ring`, their rows tile
/// `0..shape.rows` and their steps tile `0..`[`ScoreShape::packing_steps`] exactly once, and
/// each has one accumulation of the ring's degree per row chunk.
pub fn combine_parts(ring: &Ring, parts: &[ScorePart]) -> Result<(ScoreShape, Vec<Vec<u64>>)> {
    let n = ring.n();
    let bad = |reason: String| Error::InvalidParameter {
        name: "score part",
        reason,
    };
    let shape = &parts
        .first()
        .ok_or_else(|| bad("no parts to combine".into()))?
        .shape;
    if parts.iter().any(|p| p.shape != *shape || p.n != n) {
        return Err(bad(format!(
            "the parts are not all of {shape:?} in a ring of {n}"
        )));
    }
    let rows: Vec<std::ops::Range<usize>> = parts.iter().map(|p| p.rows.clone()).collect();
    let steps: Vec<std::ops::Range<usize>> = parts.iter().map(|p| p.steps.clone()).collect();
    crate::shard::tiling(&rows, shape.rows, "rows")?;
    crate::shard::tiling(&steps, shape.packing_steps(n), "switch steps")?;
    let chunks = shape.ciphertexts(n);
    let fits = |p: &ScorePart| {
        p.chunks.len() == chunks && p.chunks.iter().all(|c| c.q.len() == n && c.p.len() == n)
    };
    if !parts.iter().all(fits) {
        return Err(bad(format!(
            "a part does not hold {chunks} accumulations of {n}"
        )));
    }
    let width = shape.packing_width(n);
    let answer = (0..chunks)
        .map(|c| {
            let mut sum = Accumulated::zero(n);
            for p in parts {
                sum.add(&p.chunks[c]);
            }
            finished(ring, width, sum)
        })
        .collect();
    Ok((*shape, answer))
}

/// Bytes of an answer: per row chunk, the packed `b` part's first
/// [`ScoreShape::packing_width`] coefficients — the ones that carry rows; the client never
/// reads the others' phases, so they are not sent — each in [`ANSWER_BITS`] bits.
pub fn answer_len(shape: &ScoreShape, n: usize) -> usize {
    crate::bits::packed_len(shape.ciphertexts(n) * shape.packing_width(n), ANSWER_BITS)
}

/// `b mod Q` switched to [`ANSWER_BITS`] bits: `⌊b·2^m/Q⌉ mod 2^m`.
fn to_wire(b: u64) -> u64 {
    let q = u128::from(Q.value);
    (((u128::from(b) << ANSWER_BITS) + q / 2) / q) as u64 & ((1 << ANSWER_BITS) - 1)
}

/// A wire value back modulo `Q`: `⌊c·Q/2^m⌉`, below `Q` for every `c < 2^m`, within
/// [`ANSWER_ROUNDING`] of the `b` it was switched from (module docs).
fn from_wire(c: u64) -> u64 {
    ((u128::from(c) * u128::from(Q.value) + (1 << (ANSWER_BITS - 1))) >> ANSWER_BITS) as u64
}

/// The answer's sent coefficients on the wire ([`answer_len`] bytes for a served answer).
pub fn encode_answer(answer: &[Vec<u64>]) -> Vec<u8> {
    let values: Vec<u64> = answer.iter().flatten().map(|&b| to_wire(b)).collect();
    crate::bits::pack(values.into_iter(), ANSWER_BITS)
}

/// The client's reading of an answer: exactly [`answer_len`] bytes, every value read back
/// modulo `Q` (within [`ANSWER_ROUNDING`] of what the server computed).
pub fn decode_answer(shape: &ScoreShape, n: usize, bytes: &[u8]) -> Result<Vec<Vec<u64>>> {
    let expected = answer_len(shape, n);
    if bytes.len() != expected {
        return Err(PirError::AnswerSize {
            expected,
            got: bytes.len(),
        }
        .into());
    }
    let count = shape.ciphertexts(n) * shape.packing_width(n);
    Ok(crate::bits::unpack(bytes, count, ANSWER_BITS)?
        .into_iter()
        .map(from_wire)
        .collect::<Vec<u64>>()
        .chunks(shape.packing_width(n))
        .map(<[u64]>::to_vec)
        .collect())
}

fn read_reduced(bytes: &[u8]) -> std::result::Result<Vec<u64>, PirError> {
    bytes
        .chunks_exact(8)
        .map(|c| {
            let v = u64::from_le_bytes(c.try_into().expect("8 bytes"));
            (v < Q.value)
                .then_some(v)
                .ok_or_else(|| PirError::Malformed("a value is not reduced modulo Q".into()))
        })
        .collect()
}

/// Every row's `T = 2⟨q, f⟩ − ‖f‖²` from the answer (`b` parts) and the public `a` parts.
/// Refuses (typed error) an answer any of whose coefficients is off a multiple of `Δ` by more
/// than [`error_bound`], or carries a value where the packing leaves none — what a wrong key,
/// a damaged answer or wrong public parts produce. A server that computes a *different*
/// answer on purpose is not detected: encrypted scores carry no checksum (`docs/eval/pir.md`).
///
/// A thin wrapper over [`decode_all`], which does the same work whatever the answer holds.
pub fn decode(
    ring: &Ring,
    shape: &ScoreShape,
    sk: &SecretKey,
    public_a: &[&[u64]],
    answer: &[Vec<u64>],
) -> Result<Vec<i64>> {
    let (scores, ok) = decode_all(ring, shape, sk, public_a, answer)?;
    if !ok {
        return Err(PirError::Malformed(
            "the scores' answer does not decode within its proven error bound (a wrong key, a \
             damaged answer or wrong public parts)"
                .into(),
        )
        .into());
    }
    Ok(scores)
}

/// [`decode`] without the early exit: the scores of every row and whether the answer checks
/// out (`false`: the scores are garbage and must not be used).
///
/// Only the *public* sizes are checked up front (the shape, the number and length of the
/// polynomials, every value reduced — none depends on the secret), and an error there is
/// returned at once. After that every coefficient of every polynomial is decrypted, rounded
/// and checked, and every row's score is formed, with no early return and no branch on a
/// value derived from the secret: a hostile server that damages chosen coefficients learns
/// nothing from how long the client takes, only what the caller then does with `ok`. The
/// checks are folded into a mask with arithmetic shifts and `|`, not `||` or `if`.
pub fn decode_all(
    ring: &Ring,
    shape: &ScoreShape,
    sk: &SecretKey,
    public_a: &[&[u64]],
    answer: &[Vec<u64>],
) -> Result<(Vec<i64>, bool)> {
    let n = ring.n();
    shape.check(n)?;
    let chunks = shape.row_chunks(n);
    let width = shape.packing_width(n);
    let valid = |p: &[u64], len: usize| p.len() == len && p.iter().all(|&x| x < Q.value);
    if public_a.len() != chunks.len()
        || answer.len() != public_a.len()
        || !public_a.iter().all(|a| valid(a, n))
        || !answer.iter().all(|b| valid(b, width))
    {
        return Err(Error::InvalidParameter {
            name: "score answer",
            reason: format!(
                "expected {} polynomials of {n} values below Q and as many first {width} \
                 coefficients of their b parts",
                chunks.len()
            ),
        });
    }
    let bound = error_bound(shape, n).ceil() as i64;
    // All ones once any check fails: the sign bits of the checks below, or-ed in.
    let mut bad = 0i64;
    let mut scores = vec![0i64; shape.rows];
    for (k, rows) in chunks.iter().enumerate() {
        let phases = Zeroizing::new(phase_of(ring, sk, public_a[k], &answer[k]));
        for (pos, &phase) in phases.iter().enumerate().take(width) {
            // Branch-free from here on: the phase is the plaintext plus the secret error.
            let phase = Q.centered(phase);
            let sum = (phase + (1 << (LOG_DELTA - 1))) >> LOG_DELTA;
            let off = phase - (sum << LOG_DELTA);
            let sign = off >> 63;
            // |off| > bound ⇔ bound − |off| < 0: its sign bit.
            bad |= (bound - ((off ^ sign) - sign)) >> 63;
            // Row r of the chunk sits at coefficient r; the padding rows after it are zero
            // inputs. Which positions hold rows is public (the shape), so this branch leaks
            // nothing. Coefficients from the width on hold what packing's trace kept of
            // secret products (`super::inspiring`), not rows: never read.
            let row = rows.start + pos;
            if row < rows.end {
                scores[row] = sum;
            } else {
                // sum ≠ 0 ⇔ sum | −sum has its sign bit set (|sum| < 2⁶²).
                bad |= (sum | sum.wrapping_neg()) >> 63;
            }
        }
    }
    Ok((scores, bad == 0))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn the_limb_pass_sums_exactly() {
        let mut rng = ChaCha20Rng::seed_from_u64(77);
        // Whole groups only, a tail, many flushes; extreme entries and values near Q.
        for cols in [16usize, 37, 64 * 16 * 3 + 5, 4096, 32 * 128 * 2 + 48 + 7] {
            for mode in 0..3 {
                let extreme = mode > 0;
                let query: Vec<u64> = (0..cols)
                    .map(|_| match mode {
                        0 => rng.random_range(0..Q.value),
                        1 => Q.value - 1 - rng.random_range(0..3),
                        // Three limbs of −2¹⁵: the 32-bit lanes' largest gains.
                        _ => 0x7fff_7fff_8000,
                    })
                    .collect();
                let lo: Vec<u8> = (0..cols)
                    .map(|_| if extreme { 255 } else { rng.random() })
                    .collect();
                let hi: Vec<i8> = (0..cols)
                    .map(|_| if extreme { -128 } else { rng.random() })
                    .collect();
                let limbs = Limbs::new(&query);
                let want = |d: &dyn Fn(usize) -> i128| {
                    let s: i128 = (0..cols).map(|j| d(j) * i128::from(query[j])).sum();
                    s.rem_euclid(i128::from(Q.value)) as u64
                };
                let got = limbs.dot_pair(&lo, &hi);
                assert_eq!(got.0, want(&|j| i128::from(lo[j])), "cols {cols}");
                assert_eq!(got.1, want(&|j| i128::from(hi[j])), "cols {cols}");
                // Rows dotted together (the AVX-512 VNNI pass where it runs): the same.
                let (lo2, hi2): (Vec<u8>, Vec<i8>) =
                    (lo.iter().rev().copied().collect(), hi.to_vec());
                let rows =
                    limbs.dot_pairs([&lo[..], &lo2[..], &lo[..]], [&hi[..], &hi2[..], &hi[..]]);
                assert_eq!(rows, [got, limbs.dot_pair(&lo2, &hi2), got], "cols {cols}");
                let whole = cols / 16 * 16;
                let portable = limbs.limb_sums_portable(&lo[..whole], &hi[..whole]);
                let (l, h) = limbs.sums(&lo[..whole], &hi[..whole]);
                assert_eq!((combine(portable.0), combine(portable.1)), (l, h));
            }
        }
    }
    use rand::Rng;

    /// A database of full random blocks (±32,767 entries) on a small ring.
    struct Fixture {
        n: usize,
        ring: Ring,
        blocks: Vec<Vec<i16>>,
        masks: InspiringMasks,
        db: ScoreDb,
        rng: ChaCha20Rng,
    }

    const QSEED: [u8; 32] = [7; 32];

    fn fixture(n: usize, shape: ScoreShape, seed: u64) -> Fixture {
        let ring = Ring::new(n);
        let mut rng = ChaCha20Rng::seed_from_u64(seed);
        let blocks = crate::selftest::random_blocks(&shape, &mut rng);
        let masks = packing_masks(&ring, &shape, &[seed as u8; 32]);
        let db = ScoreDb::build(&ring, shape, &blocks, &QSEED, &masks).unwrap();
        Fixture {
            n,
            ring,
            blocks,
            masks,
            db,
            rng,
        }
    }

    #[test]
    fn row_chunks_cover_the_rows_in_power_of_two_widths() {
        let shape = |rows| ScoreShape {
            blocks: 1,
            dim: 1,
            rows,
        };
        assert_eq!(shape(11_000).packing_width(4096), 2048);
        assert_eq!(
            shape(11_000).row_chunks(4096),
            vec![
                0..2048,
                2048..4096,
                4096..6144,
                6144..8192,
                8192..10240,
                10240..11000
            ]
        );
        assert_eq!(shape(1000).packing_width(4096), 1024);
        assert_eq!(shape(1000).row_chunks(4096), vec![0..1000]);
        assert_eq!(shape(4096).row_chunks(4096), vec![0..2048, 2048..4096]);
        assert_eq!(shape(1).row_chunks(4096), vec![0..1]);
        for rows in 1..600 {
            let chunks = shape(rows).row_chunks(256);
            let width = shape(rows).packing_width(256);
            assert!(width.is_power_of_two() && width <= 128 && (width >= rows || width == 128));
            assert_eq!(chunks.first().unwrap().start, 0);
            assert_eq!(chunks.last().unwrap().end, rows);
            assert!(chunks.windows(2).all(|w| w[0].end == w[1].start));
            assert!(chunks.iter().all(|c| c.len() <= width));
        }
    }

    #[test]
    fn planes_and_norm_digits_recompose() {
        for f in [-32767i16, -256, -1, 0, 1, 255, 256, 32767] {
            let (lo, hi) = planes_of(f);
            assert_eq!(256 * i32::from(hi) + i32::from(lo), i32::from(f));
        }
        // At the cap (4,419² · 64 = 1,249,763,904) and at a single full entry.
        for f in [vec![4_419i16; 64], vec![32_767, 0, 0], vec![0; 8]] {
            let d = norm_digits(&f);
            let back: i64 = d
                .iter()
                .enumerate()
                .map(|(k, &x)| i64::from(x) << (8 * k))
                .sum();
            assert_eq!(back, norm2(&f));
        }
    }

    #[test]
    fn a_batch_answers_each_query_as_alone_and_a_malformed_one_spoils_none() {
        let n = 256;
        let shape = ScoreShape {
            blocks: 5,
            dim: 16,
            rows: 200,
        };
        let mut f = fixture(n, shape, 21);
        let public_a = f.db.public_a();
        let mut jobs = Vec::new();
        for block in [4usize, 0, 4, 2] {
            let q: Vec<i16> = crate::selftest::capped_features(shape.dim, &mut f.rng);
            let (upload, bodies, sk) =
                query(&f.ring, &shape, &QSEED, &f.masks, block, &q, &mut f.rng).unwrap();
            jobs.push((block, q, upload, bodies, sk));
        }
        // A query of the wrong length in the middle of the batch.
        let short = jobs[1].2[..jobs[1].2.len() - 1].to_vec();
        let mut batch: Vec<(&[u64], &InspiringBodies)> =
            jobs.iter().map(|j| (&j.2[..], &j.3)).collect();
        batch.insert(2, (&short, &jobs[1].3));
        let answers = f.db.answer_many(&f.ring, &batch, None);
        assert_eq!(answers.len(), 5);
        assert!(answers[2].is_err());
        let answers: Vec<_> = answers
            .into_iter()
            .enumerate()
            .filter(|(i, _)| *i != 2)
            .map(|(_, a)| a.unwrap())
            .collect();
        for ((block, q, upload, bodies, sk), got) in jobs.iter().zip(&answers) {
            let alone = f.db.answer(&f.ring, upload, bodies, None).unwrap();
            assert_eq!(got, &alone, "block {block}");
            let scores = decode(&f.ring, &shape, sk, &public_a, got).unwrap();
            let want = plaintext_scores(q, &f.blocks[*block], shape.dim);
            assert_eq!(&scores[..want.len()], &want[..], "block {block}");
        }
    }

    #[test]
    fn the_client_gets_its_blocks_exact_scores_and_nothing_depends_on_the_block() {
        // A small ring (tests only) and a shape with several query chunks and row chunks.
        let n = 256;
        let ring = Ring::new(n);
        let shape = ScoreShape {
            blocks: 9,
            dim: 24,
            rows: 300,
        };
        let mut rng = ChaCha20Rng::seed_from_u64(11);
        let blocks: Vec<Vec<i16>> = (0..shape.blocks)
            .map(|b| {
                let items = if b == 3 {
                    shape.rows
                } else {
                    rng.random_range(1..shape.rows)
                };
                (0..items)
                    .flat_map(|_| crate::selftest::capped_features(shape.dim, &mut rng))
                    .collect()
            })
            .collect();
        // The extremes in block 3: `e` at the norm cap, `−e`, and one entry of 32,767 — a
        // query `e` scores `−e` at `−3·‖e‖²`, the most negative score there is.
        let side = ((NORM_CAP / shape.dim as i64) as f64).sqrt() as i16;
        let e: Vec<i16> = (0..shape.dim)
            .map(|j| if j % 2 == 0 { side } else { -side })
            .collect();
        let mut blocks = blocks;
        blocks[3][..shape.dim].copy_from_slice(&e);
        for (x, &v) in blocks[3][shape.dim..2 * shape.dim].iter_mut().zip(&e) {
            *x = -v;
        }
        blocks[3][2 * shape.dim..3 * shape.dim].fill(0);
        blocks[3][2 * shape.dim] = 32767;
        let (qseed, pseed) = ([1u8; 32], [2u8; 32]);
        let masks = packing_masks(&ring, &shape, &pseed);
        let db = ScoreDb::build(&ring, shape, &blocks, &qseed, &masks).unwrap();
        let public_a = db.public_a();
        let mut sizes = Vec::new();
        for block in [3usize, 0, 8] {
            let q: Vec<i16> = if block == 3 {
                e.clone()
            } else {
                crate::selftest::capped_features(shape.dim, &mut rng)
            };
            let (upload, bodies, sk) =
                query(&ring, &shape, &qseed, &masks, block, &q, &mut rng).unwrap();
            sizes.push(upload.len());
            let answer = db.answer(&ring, &upload, &bodies, None).unwrap();
            let got = decode(&ring, &shape, &sk, &public_a, &answer).unwrap();
            let want = plaintext_scores(&q, &blocks[block], shape.dim);
            assert_eq!(&got[..want.len()], &want[..], "block {block}");
            // Padding rows score 0 (no features, no norm).
            assert!(got[want.len()..].iter().all(|&t| t == 0));
        }
        assert!(
            sizes.windows(2).all(|w| w[0] == w[1]),
            "the upload's size is public"
        );
        assert!(failure_log2(&shape, n) < -1000.0);
    }

    /// A query whose secret, masks and key bodies were drawn before the photo was known gives
    /// the same exact scores; a block or features out of the shape are refused.
    #[test]
    fn a_query_prepared_ahead_gets_exact_scores() {
        let shape = ScoreShape {
            blocks: 5,
            dim: 16,
            rows: 40,
        };
        let mut f = fixture(256, shape, 21);
        let ahead =
            |f: &mut Fixture| prepare(&f.ring, &shape, &QSEED, &f.masks, &mut f.rng).unwrap();
        let p = ahead(&mut f);
        assert_eq!(p.shape(), shape);
        let q: Vec<i16> = (0..16).map(|j| 1_500 * j - 11_250).collect();
        let (upload, bodies, sk) = p.query(4, &q).unwrap();
        assert_eq!(upload.len(), shape.cols(f.n));
        let answer = f.db.answer(&f.ring, &upload, &bodies, None).unwrap();
        let got = decode(&f.ring, &shape, &sk, &f.db.public_a(), &answer).unwrap();
        let want = plaintext_scores(&q, &f.blocks[4], 16);
        assert_eq!(&got[..want.len()], &want[..]);
        assert!(ahead(&mut f).query(5, &q).is_err());
        assert!(ahead(&mut f).query(0, &q[..15]).is_err());
    }

    /// Planes and plans read in place from the bytes `write_held` wrote answer exactly as
    /// the ones held; other bytes are refused.
    #[test]
    fn planes_and_plans_read_from_shared_bytes_answer_the_same() {
        struct Words(Vec<u64>);
        impl AsRef<[u8]> for Words {
            fn as_ref(&self) -> &[u8] {
                // SAFETY: plain integers; the slice covers exactly the words' memory.
                unsafe {
                    std::slice::from_raw_parts(self.0.as_ptr().cast::<u8>(), self.0.len() * 8)
                }
            }
        }
        let shape = ScoreShape {
            blocks: 5,
            dim: 16,
            rows: 300,
        };
        let mut f = fixture(256, shape, 31);
        let q: Vec<i16> = (0..16).map(|j| 1_500 * j - 11_000).collect();
        let (upload, bodies, sk) =
            query(&f.ring, &shape, &QSEED, &f.masks, 2, &q, &mut f.rng).unwrap();
        let held = f.db.answer(&f.ring, &upload, &bodies, None).unwrap();
        let mut out = Vec::new();
        f.db.write_held(&mut out).unwrap();
        assert_eq!(out.len(), f.db.held_len());
        let words = |out: &[u8]| -> SharedBytes {
            std::sync::Arc::new(Words(
                out.chunks_exact(8)
                    .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
                    .collect(),
            ))
        };
        let mut damaged = out.clone();
        *damaged.last_mut().unwrap() ^= 1;
        assert!(f.db.share(&words(&damaged)).is_err());
        assert!(f.db.share(&words(&out[..out.len() - 8])).is_err());
        f.db.share(&words(&out)).unwrap();
        assert!(!f.db.held_in_memory());
        let shared = f.db.answer(&f.ring, &upload, &bodies, None).unwrap();
        assert_eq!(shared, held);
        let got = decode(&f.ring, &shape, &sk, &f.db.public_a(), &shared).unwrap();
        assert_eq!(
            &got[..f.blocks[2].len() / 16],
            &plaintext_scores(&q, &f.blocks[2], 16)[..]
        );
    }

    /// Bytes as shared bytes, 8-aligned as a file mapping is.
    /// `out` as shared bytes, aligned for every word.
    pub(crate) fn shared_words(out: &[u8]) -> SharedBytes {
        struct Words(Vec<u64>);
        impl AsRef<[u8]> for Words {
            fn as_ref(&self) -> &[u8] {
                // SAFETY: plain integers; the slice covers exactly the words' memory.
                unsafe {
                    std::slice::from_raw_parts(self.0.as_ptr().cast::<u8>(), self.0.len() * 8)
                }
            }
        }
        std::sync::Arc::new(Words(
            out.chunks_exact(8)
                .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
                .collect(),
        ))
    }

    /// The fixture's planes, laid out for a build.
    fn laid_out(f: &Fixture, shape: ScoreShape) -> ScorePlanes<'_> {
        ScoreDb::lay_out(
            &f.ring,
            shape,
            block_rows(&f.blocks, shape.dim),
            &QSEED,
            &f.masks,
        )
        .unwrap()
    }

    /// A streamed build of the fixture's database (one plan at a time, its rows laid out 37
    /// at a time: bounds the default build does not cross): what it wrote, and the database
    /// to share.
    fn streamed(f: &Fixture, shape: ScoreShape) -> (Vec<u8>, WrittenScores) {
        let planes = laid_out(f, shape).plans_at_once(1).layout_rows(37);
        let mut out = Vec::new();
        let written = planes.build_into(&mut out).unwrap();
        assert_eq!(written.written_len(), out.len());
        (out, written)
    }

    /// A streamed build writes the bytes the in-memory build holds, in the same order, and
    /// the database read back from them answers byte for byte as the in-memory one, with no
    /// plan keeping digits of its own.
    #[test]
    fn a_streamed_build_answers_as_the_one_held_in_memory() {
        let shape = ScoreShape {
            blocks: 5,
            dim: 16,
            rows: 300,
        };
        let mut f = fixture(256, shape, 32);
        assert_eq!(shape.row_chunks(f.n).len(), 3, "several plans");
        let (out, written) = streamed(&f, shape);
        // Nothing was held until shared: no plan kept its digits once written, nor the planes.
        assert!(written.db.plans.iter().all(|p| !p.digits_owned()));
        assert!(!written.db.lo.is_owned() && !written.db.hi.is_owned());
        let mut held = Vec::new();
        f.db.write_held(&mut held).unwrap();
        assert!(out == held, "the streamed bytes are the held ones");
        let db = written.share(&shared_words(&out)).unwrap();
        assert!(!db.held_in_memory());
        assert!(db.plans.iter().all(|p| !p.digits_owned()));
        assert!(!db.lo.is_owned() && !db.hi.is_owned());
        assert_eq!(db.plan_bytes(), f.db.plan_bytes());
        for block in [0, 3] {
            let q: Vec<i16> = (0..16).map(|j| 1_400 * j - 10_500 + block as i16).collect();
            let (upload, bodies, sk) =
                query(&f.ring, &shape, &QSEED, &f.masks, block, &q, &mut f.rng).unwrap();
            let want = encode_answer(&f.db.answer(&f.ring, &upload, &bodies, None).unwrap());
            let got = db.answer(&f.ring, &upload, &bodies, None).unwrap();
            assert!(
                encode_answer(&got) == want,
                "block {block}: the same answer"
            );
            let scores = decode(&f.ring, &shape, &sk, &db.public_a(), &got).unwrap();
            let plain = plaintext_scores(&q, &f.blocks[block], 16);
            assert_eq!(&scores[..plain.len()], &plain[..]);
        }
    }

    /// The digits a streamed build dropped are checked against the SHA-256 kept of them: one
    /// flipped byte in any plan's digits (or the planes), or bytes of another length, are
    /// refused.
    #[test]
    fn a_streamed_build_refuses_bytes_that_are_not_what_it_wrote() {
        let shape = ScoreShape {
            blocks: 3,
            dim: 8,
            rows: 70,
        };
        let f = fixture(64, shape, 33);
        let planes = f.db.lo.padded_len() + f.db.hi.padded_len();
        let mut starts = vec![planes];
        for p in &f.db.plans {
            starts.push(starts.last().unwrap() + p.digits_len());
        }
        // In the planes; the first, a middle and the last plan's digits: their first byte,
        // one modulo Q, their last (modulo P; at N = 64 nothing is padding).
        let mut at = vec![7, f.db.lo.padded_len() + f.db.hi.byte_len() - 1];
        for k in [0, f.db.plans.len() / 2, f.db.plans.len() - 1] {
            let (start, len) = (starts[k], f.db.plans[k].digits_len());
            at.extend([start, start + len / 3, start + len - 1]);
        }
        for &i in &at {
            let (mut out, written) = streamed(&f, shape);
            out[i] ^= 0x10;
            let refused = written.share(&shared_words(&out));
            assert!(
                matches!(refused, Err(Error::InvalidParameter { .. })),
                "a flipped byte at {i}"
            );
        }
        let (out, written) = streamed(&f, shape);
        let longer = [&out[..], &[0u8; 8]].concat();
        assert!(written.share(&shared_words(&longer)).is_err());
        let (out, written) = streamed(&f, shape);
        assert!(written.share(&shared_words(&out[..out.len() - 8])).is_err());
        let (out, written) = streamed(&f, shape);
        assert!(written.share(&shared_words(&out)).is_ok());
        // A write that fails mid-way (in the second plan) stops the build with its error.
        struct FailAfter(usize);
        impl std::io::Write for FailAfter {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                self.0 = self
                    .0
                    .checked_sub(b.len())
                    .ok_or(std::io::ErrorKind::StorageFull)?;
                Ok(b.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let failed = laid_out(&f, shape).build_into(&mut FailAfter(starts[1] + 100));
        assert_eq!(
            failed.err().map(|e| e.kind()),
            Some(std::io::ErrorKind::StorageFull)
        );
    }

    #[test]
    fn wrong_keys_damaged_answers_and_wrong_public_parts_are_refused() {
        // Two packed ciphertexts (128 rows each at N = 256).
        let shape = ScoreShape {
            blocks: 4,
            dim: 16,
            rows: 200,
        };
        let Fixture {
            n,
            ring,
            db,
            masks,
            mut rng,
            ..
        } = fixture(256, shape, 12);
        let q = vec![1234i16; 16];
        let (up, bodies, sk) = query(&ring, &shape, &QSEED, &masks, 1, &q, &mut rng).unwrap();
        let answer = db.answer(&ring, &up, &bodies, None).unwrap();
        let public_a = db.public_a();
        assert!(decode(&ring, &shape, &sk, &public_a, &answer).is_ok());
        assert!(error_bound(&shape, n) < (1u64 << (LOG_DELTA - 2)) as f64);
        let other = SecretKey::generate(&ring, &mut rng);
        assert!(
            decode(&ring, &shape, &other, &public_a, &answer).is_err(),
            "wrong key"
        );
        let width = shape.packing_width(n);
        for (poly, pos) in [(0usize, 0usize), (1, 17), (1, 200 - width - 1)] {
            let mut damaged = answer.clone();
            damaged[poly][pos] = Q.add(damaged[poly][pos], 1 << 27);
            assert!(
                decode(&ring, &shape, &sk, &public_a, &damaged).is_err(),
                "damage at {poly}/{pos}"
            );
        }
        // Coefficients from the packing width on carry no rows and are not sent; an answer
        // with them is the wrong size.
        assert!(answer.iter().all(|b| b.len() == width));
        let mut long = answer.clone();
        long[0].push(0);
        assert!(decode(&ring, &shape, &sk, &public_a, &long).is_err());
        let mut wrong_a: Vec<Vec<u64>> = public_a.iter().map(|a| a.to_vec()).collect();
        // Another version's parts: a different polynomial (a change of a few units in `a`
        // moves each phase by at most that times ‖s‖₁ and is tolerated like any error).
        wrong_a[1] = (0..n).map(|_| uniform(&mut rng)).collect();
        let wrong_a: Vec<&[u64]> = wrong_a.iter().map(|a| a.as_slice()).collect();
        assert!(
            decode(&ring, &shape, &sk, &wrong_a, &answer).is_err(),
            "wrong public a"
        );
    }

    #[test]
    fn decode_all_does_every_row_and_reports_a_bad_answer_without_stopping() {
        let shape = ScoreShape {
            blocks: 3,
            dim: 8,
            rows: 70,
        };
        let Fixture {
            n,
            ring,
            db,
            masks,
            blocks,
            mut rng,
            ..
        } = fixture(64, shape, 21);
        let q = vec![-4321i16; 8];
        let (up, bodies, sk) = query(&ring, &shape, &QSEED, &masks, 1, &q, &mut rng).unwrap();
        let answer = db.answer(&ring, &up, &bodies, None).unwrap();
        let public_a = db.public_a();
        let (scores, ok) = decode_all(&ring, &shape, &sk, &public_a, &answer).unwrap();
        assert!(ok);
        assert_eq!(
            scores,
            decode(&ring, &shape, &sk, &public_a, &answer).unwrap()
        );
        let want = plaintext_scores(&q, &blocks[1], shape.dim);
        assert_eq!(&scores[..want.len()], &want[..]);
        // One corrupted coefficient — at a row's position, and at a padding row's: refused,
        // yet every row still gets a (garbage) score. The last row chunk holds 6 rows, at
        // positions 0 … 5 of its polynomial; positions 6 … width − 1 are zero rows.
        let chunks = shape.row_chunks(n);
        let last = chunks.len() - 1;
        let width = shape.packing_width(n);
        assert_eq!((chunks[last].len(), width), (6, 32));
        let delta = 1u64 << LOG_DELTA;
        for (pos, by) in [
            (0, 3 << 27),
            (5, 3 << 27),
            (6, 3 << 27),
            (width - 1, 3 << 27),
            // A whole Δ at a zero row: within the error, but not zero.
            (7, delta),
        ] {
            let mut damaged = answer.clone();
            damaged[last][pos] = Q.add(damaged[last][pos], by);
            let (garbage, ok) = decode_all(&ring, &shape, &sk, &public_a, &damaged).unwrap();
            assert!(!ok, "damage {by} at {pos}");
            assert_eq!(garbage.len(), shape.rows);
            assert!(decode(&ring, &shape, &sk, &public_a, &damaged).is_err());
        }
        // Public sizes are still refused up front, as an error.
        assert!(decode_all(&ring, &shape, &sk, &public_a, &answer[1..]).is_err());
        let mut unreduced = answer.clone();
        unreduced[1][3] = Q.value;
        assert!(decode_all(&ring, &shape, &sk, &public_a, &unreduced).is_err());
    }

    #[test]
    fn the_upload_looks_uniform() {
        // Sanity, not a proof: the query values' top byte over Q's range is flat whatever the
        // block (a chi-square test with 255 degrees of freedom, far above its 0.1 % quantile
        // 330 only if something is badly wrong).
        let ring = Ring::new(1024);
        let shape = ScoreShape {
            blocks: 40,
            dim: 64,
            rows: 10,
        };
        let masks = packing_masks(&ring, &shape, &[8; 32]);
        let mut rng = ChaCha20Rng::seed_from_u64(13);
        for block in [0usize, 39] {
            // The largest equal entries within the norm cap.
            let q = vec![4_419i16; 64];
            let (up, _, _) = query(&ring, &shape, &[9; 32], &masks, block, &q, &mut rng).unwrap();
            let mut counts = [0f64; 256];
            for &v in &up {
                counts[(v >> (Q.bits() - 8)) as usize] += 1.0;
            }
            // Values are uniform below Q = 2⁶² − 2¹⁶ + 1, so each top byte has mass ≈ 1/256.
            let expected = up.len() as f64 / 256.0;
            let chi2: f64 = counts
                .iter()
                .map(|c| (c - expected).powi(2) / expected)
                .sum();
            assert!(chi2 < 330.0, "block {block}: chi-square {chi2}");
        }
    }

    #[test]
    fn uploads_and_answers_cross_the_wire_and_malformed_ones_are_refused() {
        let shape = ScoreShape {
            blocks: 3,
            dim: 10,
            rows: 50,
        };
        let Fixture {
            n,
            ring,
            db,
            masks,
            blocks,
            mut rng,
            ..
        } = fixture(256, shape, 15);
        let q = vec![-777i16; 10];
        let (up, bodies, sk) = query(&ring, &shape, &QSEED, &masks, 2, &q, &mut rng).unwrap();
        let bytes = encode_upload(&up, &bodies);
        assert_eq!(bytes.len(), upload_len(&shape, n));
        let (up2, bodies2) = decode_upload(&shape, n, &bytes).unwrap();
        assert_eq!(up2, up);
        let answer = encode_answer(&db.answer(&ring, &up2, &bodies2, None).unwrap());
        assert_eq!(answer.len(), answer_len(&shape, n));
        let decoded = decode_answer(&shape, n, &answer).unwrap();
        let got = decode(&ring, &shape, &sk, &db.public_a(), &decoded).unwrap();
        let want = plaintext_scores(&q, &blocks[2], 10);
        assert_eq!(&got[..50], &want[..]);
        // Truncated, extended, or with an unreduced value: refused, typed.
        assert!(decode_upload(&shape, n, &bytes[1..]).is_err());
        assert!(decode_upload(&shape, n, &[bytes.clone(), vec![0]].concat()).is_err());
        // A query value, a key value modulo Q (8 bytes), a key value modulo P (6 bytes).
        for (at, width) in [
            (0usize, 8usize),
            (shape.cols(n) * 8, 8),
            (bytes.len() - 6, 6),
        ] {
            let mut bad = bytes.clone();
            bad[at..at + width].fill(0xff);
            assert!(
                decode_upload(&shape, n, &bad).is_err(),
                "unreduced value at {at}"
            );
        }
        assert!(decode_answer(&shape, n, &answer[8..]).is_err());
        // Unused bits set in the last byte: refused (one encoding per answer).
        let values = decoded.iter().map(Vec::len).sum::<usize>();
        let spare = answer_len(&shape, n) * 8 - values * ANSWER_BITS as usize;
        if spare > 0 {
            let mut bad = answer.clone();
            *bad.last_mut().unwrap() |= 0x80;
            assert!(decode_answer(&shape, n, &bad).is_err());
        }
    }

    #[test]
    fn the_documented_bounds_are_what_the_code_computes() {
        // The figures quoted in this module's docs, `rlwe`'s and docs/eval/pir.md (the tree
        // packing's, for comparison: `tests/tree_pack.rs`).
        let n = lattice::N;
        let shape = |blocks, rows| ScoreShape {
            blocks,
            dim: 64,
            rows,
        };
        let served = shape(302, 12_288);
        let before = shape(492, 8_000);
        let bench = shape(256, 11_000);
        let near = |got: f64, want: f64, tol: f64| {
            assert!((got - want).abs() <= tol, "{got} is not {want} ± {tol}")
        };
        near(failure_log2(&served, n), -2_939.3, 0.5);
        near(failure_log2_worst_case(&served, n), -2_825.6, 0.5);
        near(error_bound(&served, n).log2(), 25.60, 0.01);
        near(failure_log2(&before, n), -1_799.2, 0.5);
        near(failure_log2_worst_case(&before, n), -1_733.2, 0.5);
        near(failure_log2(&bench, n), -3_470.3, 0.5);
        near(failure_log2_worst_case(&bench, n), -3_332.7, 0.5);
        near(error_bound(&before, n).log2(), 25.84, 0.01);
        // InspiRING at the served width (`inspiring`'s docs).
        let (g, w) = (Gadget::DEFAULT, served.packing_width(n));
        assert_eq!(w, 2048);
        near(added_variance(n, w, g).log2() / 2.0, 12.71, 0.005);
        near(added_gaussian_variance(n, w, g).log2() / 2.0, 18.18, 0.005);
        near(rounding_worst_case(n, w).log2(), 22.0, 0.001);
        near(
            (2.0 * 41.0 * std::f64::consts::LN_2 * added_variance(n, w, g))
                .sqrt()
                .log2(),
            15.63,
            0.01,
        );
        let g = Gadget::DEFAULT;
        near(g.switch_variance(n).log2(), 14.43, 0.005);
        near(g.switch_gaussian_variance(n).log2(), 14.36, 0.005);
        near(g.switch_variance(n).sqrt(), 148.0, 0.5);
    }

    #[test]
    fn shapes_the_scheme_cannot_serve_exactly_are_refused() {
        let ok = ScoreShape {
            blocks: 256,
            dim: 64,
            rows: 21_046,
        };
        assert!(ok.check(4096).is_ok());
        for bad in [
            ScoreShape { blocks: 0, ..ok },
            ScoreShape { dim: 0, ..ok },
            ScoreShape { rows: 0, ..ok },
            ScoreShape {
                rows: (1 << 20) + 1,
                ..ok
            },
            ScoreShape {
                blocks: 1 << 15,
                ..ok
            },
        ] {
            assert!(bad.check(4096).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn bad_inputs_are_refused() {
        let ring = Ring::new(64);
        let shape = ScoreShape {
            blocks: 2,
            dim: 4,
            rows: 3,
        };
        let masks = packing_masks(&ring, &shape, &[0; 32]);
        let mut rng = ChaCha20Rng::seed_from_u64(1);
        let ok = vec![vec![1i16; 8], vec![2i16; 4]];
        assert!(ScoreDb::build(&ring, shape, &ok[..1], &[0; 32], &masks).is_err());
        let too_many = vec![vec![1i16; 16], vec![2i16; 4]];
        assert!(ScoreDb::build(&ring, shape, &too_many, &[0; 32], &masks).is_err());
        let db = ScoreDb::build(&ring, shape, &ok, &[0; 32], &masks).unwrap();
        assert!(query(&ring, &shape, &[0; 32], &masks, 2, &[0; 4], &mut rng).is_err());
        assert!(query(&ring, &shape, &[0; 32], &masks, 0, &[0; 3], &mut rng).is_err());
        let (up, bodies, sk) =
            query(&ring, &shape, &[0; 32], &masks, 1, &[5; 4], &mut rng).unwrap();
        assert!(db.answer(&ring, &up[1..], &bodies, None).is_err());
        let mut bad = up.clone();
        bad[0] = Q.value;
        assert!(db.answer(&ring, &bad, &bodies, None).is_err());
        let answer = db.answer(&ring, &up, &bodies, None).unwrap();
        assert!(decode(&ring, &shape, &sk, &db.public_a(), &answer[1..]).is_err());
    }
}
