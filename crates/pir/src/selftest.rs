//! Helpers for the tests of this crate and the crates above it, on every target: a
//! deterministic run of the whole scheme for cross-target checks (the wasm tests compare its
//! digest with the native one: same records, seeds and RNG ⇒ the same query bytes, answers and
//! decoded records on every target), random score blocks, and the timing of cases that must
//! take the same time.

use rand::SeedableRng;
use rand_chacha::ChaCha20Rng;

use crate::client::{query, Hint};
use crate::digest::sha256_hex as hash_hex;
use crate::layout::{encode_hint, Database, Shape};
use crate::lwe::matrix_a;

/// SHA-256 over the query body, the answer and the decoded records of a fixed database
/// (stacked and split records) queried with a ChaCha20 stream seeded by `seed`.
pub fn transcript(seed: u64) -> String {
    let mut out = Vec::new();
    for (len, count, rows) in [(24usize, 50usize, 96usize), (200, 6, 40)] {
        let shape = Shape::new(len, count, rows).expect("valid shape");
        let recs: Vec<Vec<u8>> = (0..count)
            .map(|r| (0..len).map(|b| (r * 31 + b * 7) as u8).collect())
            .collect();
        let db = Database::build(shape, recs.iter().map(|r| r.as_slice())).expect("fits");
        let a_seed = [seed as u8; 32];
        let hint = encode_hint(&db.hint_rows(&matrix_a(&a_seed, shape.cols), 0..rows));
        let h = Hint::from_bytes(&shape, &hint, &hash_hex(&hint)).expect("hint");
        let mut rng = ChaCha20Rng::seed_from_u64(seed);
        let (body, pending) = query(&shape, &a_seed, &[count - 1, 1], &mut rng).expect("query");
        let q: Vec<u32> = shape.decode_queries(&body).unwrap();
        let answer = shape.encode_answer(&db.answer_rows(&q, 0..rows));
        let decoded = pending.decode(&h, &answer).expect("decode");
        assert_eq!(decoded[0], recs[count - 1], "the scheme decodes");
        out.extend_from_slice(&body);
        out.extend_from_slice(&answer);
        decoded.iter().for_each(|d| out.extend_from_slice(d));
    }
    hash_hex(&out)
}

/// Full blocks of random features for a score database of `shape` (the hintless tests and
/// benchmark: their costs depend only on the shape), each item from [`capped_features`].
pub fn random_blocks(shape: &crate::scores::ScoreShape, rng: &mut impl rand::Rng) -> Vec<Vec<i16>> {
    (0..shape.blocks)
        .map(|_| {
            (0..shape.rows)
                .flat_map(|_| capped_features(shape.dim, rng))
                .collect()
        })
        .collect()
}

/// `dim` features in `±32,767` whose squared norm is at most
/// [`crate::scores::NORM_CAP`]: a uniform direction scaled to a random squared norm,
/// a third of the time the cap itself (the extremes the bounds are about).
pub fn capped_features(dim: usize, rng: &mut impl rand::Rng) -> Vec<i16> {
    use crate::scores::NORM_CAP;
    let mut f: Vec<i64> = (0..dim).map(|_| rng.random_range(-32767..=32767)).collect();
    let norm2 = |f: &[i64]| f.iter().map(|v| v * v).sum::<i64>();
    let target = if rng.random_bool(0.3) {
        NORM_CAP
    } else {
        rng.random_range(0..=NORM_CAP)
    };
    let n2 = norm2(&f);
    if n2 > target {
        let scale = (target as f64 / n2 as f64).sqrt();
        f.iter_mut()
            .for_each(|v| *v = (*v as f64 * scale).trunc() as i64);
        // Rounding in f64 could leave it a hair above: shrink the largest entry.
        while norm2(&f) > target {
            let big = (0..dim).max_by_key(|&j| f[j].abs()).expect("dim > 0");
            f[big] -= f[big].signum();
        }
    }
    f.into_iter().map(|v| v as i16).collect()
}

/// SHA-256 over the hintless scores' query, key bodies' effect (the answer) and decoded
/// scores at a small ring, queried with a ChaCha20 stream seeded by `seed` — the same on
/// every target. Checks the scores against the plaintext ones.
pub fn hintless_transcript(seed: u64) -> String {
    use crate::scores::{
        decode, decode_answer, encode_answer, packing_masks, plaintext_scores, query, ScoreDb,
        ScoreShape,
    };
    use lattice::rlwe::Ring;
    let ring = Ring::new(256);
    let shape = ScoreShape {
        blocks: 5,
        dim: 12,
        rows: 70,
    };
    let blocks: Vec<Vec<i16>> = (0..shape.blocks)
        .map(|b| {
            (0..(40 + 6 * b) * shape.dim)
                .map(|i| ((i * 7919 + b * 104_729) % 19_001) as i32 - 9_500)
                .map(|v| v as i16)
                .collect()
        })
        .collect();
    let masks = packing_masks(&ring, &shape, &[seed as u8; 32]);
    let db = ScoreDb::build(&ring, shape, &blocks, &[1; 32], &masks).expect("builds");
    let mut rng = ChaCha20Rng::seed_from_u64(seed);
    let q: Vec<i16> = (0..shape.dim as i16).map(|j| 2_000 * j - 11_000).collect();
    let (upload, bodies, sk) =
        query(&ring, &shape, &[1; 32], &masks, 2, &q, &mut rng).expect("query");
    // Through the wire format both ways (the answer switched to its wire bits).
    let answer = encode_answer(&db.answer(&ring, &upload, &bodies, None).expect("answer"));
    let read = decode_answer(&shape, ring.n(), &answer).expect("answer bytes");
    let scores = decode(&ring, &shape, &sk, &db.public_a(), &read).expect("decode");
    let want = plaintext_scores(&q, &blocks[2], shape.dim);
    assert_eq!(
        &scores[..want.len()],
        &want[..],
        "the scheme decodes exact scores"
    );
    let mut out = Vec::new();
    upload
        .iter()
        .for_each(|v| out.extend_from_slice(&v.to_le_bytes()));
    out.extend_from_slice(&answer);
    scores
        .iter()
        .for_each(|v| out.extend_from_slice(&v.to_le_bytes()));
    hash_hex(&out)
}

/// How long cases take against each other: `rounds` rounds in each of which every case runs
/// `batch` times in a row.
#[derive(Clone, Debug)]
pub struct Timing {
    /// The median time of one run, over every case and round (in `now`'s unit).
    pub typical: f64,
    /// Each case's median, over the rounds, of its time divided by its round's mean time.
    pub relative: Vec<f64>,
}

impl Timing {
    /// The slowest case's relative time over the fastest's, less one (0.03 = 3 % slower); NaN
    /// when a case has no round to compare (every round's mean zero: a clock too coarse).
    pub fn spread(&self) -> f64 {
        if self.relative.iter().any(|r| !r.is_finite()) {
            return f64::NAN;
        }
        let (lo, hi) = self
            .relative
            .iter()
            .fold((f64::MAX, 0f64), |(l, h), &m| (l.min(m), h.max(m)));
        hi / lo - 1.0
    }
}

/// Times `cases` cases against each other, paired within rounds ([`Timing`]).
///
/// Why pairs: load on the machine (the test harness's other threads, other processes) and the
/// machine's own changes of pace (clock frequency, a browser's compiler tiers) come and go
/// over milliseconds, and a round takes about one. Dividing each case's time by its round's
/// mean cancels whatever fell on the whole round, and the median over rounds ignores what
/// fell on a single sample, so a systematic difference between cases survives and the rest
/// does not. (Medians of the raw times of equal cases moved by 7 % on two busy cores, and by
/// 8 % in Chromium's WebAssembly, whose times spread from 200 to 350 µs within one run.) Each
/// round starts one case further on, so no case always follows the same one.
pub fn paired_timing(
    cases: usize,
    rounds: usize,
    batch: usize,
    mut run: impl FnMut(usize),
    now: impl Fn() -> f64,
) -> Timing {
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let mut all = Vec::with_capacity(rounds * cases);
    let mut ratios = vec![Vec::with_capacity(rounds); cases];
    let mut round = vec![0.0; cases];
    for r in 0..rounds {
        for i in 0..cases {
            let c = (r + i) % cases;
            let start = now();
            for _ in 0..batch {
                run(c);
            }
            round[c] = (now() - start) / batch as f64;
        }
        all.extend_from_slice(&round);
        let mean = round.iter().sum::<f64>() / cases as f64;
        if mean > 0.0 {
            ratios
                .iter_mut()
                .zip(&round)
                .for_each(|(v, t)| v.push(t / mean));
        }
    }
    Timing {
        typical: median(&mut all),
        relative: ratios
            .iter_mut()
            .map(|v| if v.is_empty() { f64::NAN } else { median(v) })
            .collect(),
    }
}
