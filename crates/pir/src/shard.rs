//! Row shards: a database too large for one machine split by rows over `S` processes, each
//! answering its part of every query; the parts combine into exactly the answer one process
//! holding the whole database gives, bit for bit.
//!
//! - **LWE (SimplePIR, [`crate::layout`]).** An answer entry is one row's dot product with the
//!   query, so a shard holding rows `r0..r1` ([`crate::layout::Database::keep_rows`]) answers
//!   those entries ([`RowsPart`]) and the parts are concatenated ([`combine_rows`]), then
//!   rounded and packed as one process would.
//! - **Scores ([`crate::scores`]).** A packed answer is linear in its inputs and in its switch
//!   steps until its one division by `P` ([`crate::inspiring::InspiringPlan::accumulate_many`]):
//!   a shard holds rows of the planes and a run of every plan's switch steps (so about `1/S` of
//!   both), and sends that accumulation ([`crate::scores::ScorePart`]); the sum of the parts,
//!   divided once, is the one-process answer ([`crate::scores::combine_parts`]).
//!
//! # Guarantee
//! Query privacy is unchanged: every shard receives the client's whole upload, exactly what one
//! process would, and a part is a function of that upload and public data (the shard's rows of
//! a public database); whatever combines the parts sees only them and sends the client one
//! answer of the one-process size. Combining checks that the parts tile the rows (and, for
//! scores, the steps) exactly once and refuses anything else, typed: a missing, repeated or
//! misconfigured shard is an error, never a wrong answer.

use std::ops::Range;

use crate::error::{Error, Result};
use crate::layout::{Shape, MAX_QUERIES};

/// What a [`RowsPart`]'s bytes start with.
const ROWS_MAGIC: [u8; 4] = *b"PMr1";
/// The header: magic, then the shape's record length, records, rows and columns, the part's
/// rows' start and end and the query count, as `u32`.
const ROWS_HEADER: usize = 32;

/// A part's header: `magic`, then `words` as little-endian `u32` (each below 2³², as every
/// shape and range a part names is).
pub(crate) fn write_header(magic: &[u8; 4], words: &[usize], capacity: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(capacity);
    out.extend_from_slice(magic);
    for &x in words {
        out.extend_from_slice(&(x as u32).to_le_bytes());
    }
    out
}

/// The `count` words [`write_header`] wrote after `magic`; `None` unless `bytes` start so.
pub(crate) fn read_header(bytes: &[u8], magic: &[u8; 4], count: usize) -> Option<Vec<usize>> {
    if bytes.len() < 4 + 4 * count || bytes[..4] != magic[..] {
        return None;
    }
    Some(
        bytes[4..4 + 4 * count]
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes(c.try_into().expect("4 bytes")) as usize)
            .collect(),
    )
}

fn invalid(reason: String) -> Error {
    Error::InvalidParameter {
        name: "shard part",
        reason,
    }
}

/// A shard's entries of the LWE answers to `queries` query vectors: rows `rows` of each,
/// query by query (`values[q·len + k]` is row `rows.start + k` of query `q`), before rounding;
/// with the database's shape, so whatever combines the parts needs nothing else.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RowsPart {
    pub shape: Shape,
    pub rows: Range<usize>,
    pub queries: usize,
    pub values: Vec<u32>,
}

impl RowsPart {
    /// Little-endian: the header, then the values.
    pub fn encode(&self) -> Vec<u8> {
        let s = &self.shape;
        let words = [
            s.record_len,
            s.records,
            s.rows,
            s.cols,
            self.rows.start,
            self.rows.end,
            self.queries,
        ];
        let mut out = write_header(&ROWS_MAGIC, &words, ROWS_HEADER + 4 * self.values.len());
        for v in &self.values {
            out.extend_from_slice(&v.to_le_bytes());
        }
        out
    }

    /// The part [`RowsPart::encode`] wrote: refused unless its shape is valid, its rows lie
    /// within the shape's, it answers 1 to [`MAX_QUERIES`] queries and its length is exactly
    /// that many values.
    pub fn decode(bytes: &[u8]) -> Result<RowsPart> {
        let w =
            read_header(bytes, &ROWS_MAGIC, 7).ok_or_else(|| invalid("not a rows part".into()))?;
        let word = |i: usize| w[i - 1];
        let shape = Shape {
            record_len: word(1),
            records: word(2),
            rows: word(3),
            cols: word(4),
        };
        shape.validate()?;
        let (start, end, queries) = (word(5), word(6), word(7));
        let total_rows = shape.rows;
        if start > end || end > total_rows || !(1..=MAX_QUERIES).contains(&queries) {
            return Err(invalid(format!(
                "rows {start}..{end} of {total_rows}, {queries} queries"
            )));
        }
        let want = ROWS_HEADER + 4 * (end - start) * queries;
        if bytes.len() != want {
            return Err(invalid(format!("{} bytes, expected {want}", bytes.len())));
        }
        let values = bytes[ROWS_HEADER..]
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes(c.try_into().expect("4 bytes")))
            .collect();
        Ok(RowsPart {
            shape,
            rows: start..end,
            queries,
            values,
        })
    }
}

/// Whether `ranges` (in any order) tile `0..total` exactly once, contiguous: their order by
/// start, or why not.
pub(crate) fn tiling(ranges: &[Range<usize>], total: usize, what: &str) -> Result<Vec<usize>> {
    let mut order: Vec<usize> = (0..ranges.len()).collect();
    order.sort_by_key(|&i| (ranges[i].start, ranges[i].end));
    let mut at = 0;
    for &i in &order {
        if ranges[i].start != at {
            return Err(invalid(format!(
                "the parts' {what} do not tile 0..{total}: a part starts at {} where {at} was due",
                ranges[i].start
            )));
        }
        at = ranges[i].end;
    }
    if at != total || ranges.is_empty() {
        return Err(invalid(format!(
            "the parts' {what} end at {at}, not at {total}"
        )));
    }
    Ok(order)
}

/// The whole answers from the shards' parts (any order): `queries × rows` entries, query by
/// query, as [`crate::layout::Database::answer_rows`] over all rows gives them, and the shape
/// ([`Shape::encode_answer`] then puts them on the wire) — refused unless the parts are of
/// one shape, tile its rows exactly once and answer the same number of queries.
pub fn combine_rows(parts: &[RowsPart]) -> Result<(Shape, Vec<u32>)> {
    let first = parts
        .first()
        .ok_or_else(|| invalid("no parts to combine".into()))?;
    let (shape, queries) = (first.shape, first.queries);
    if parts
        .iter()
        .any(|p| p.queries != queries || p.shape != shape)
    {
        return Err(invalid(
            "the parts are of different shapes or numbers of queries".into(),
        ));
    }
    let total_rows = shape.rows;
    let ranges: Vec<Range<usize>> = parts.iter().map(|p| p.rows.clone()).collect();
    tiling(&ranges, total_rows, "rows")?;
    let mut out = vec![0u32; queries * total_rows];
    for p in parts {
        let len = p.rows.len();
        if p.values.len() != queries * len {
            return Err(invalid(format!(
                "{} values for {len} rows of {queries} queries",
                p.values.len()
            )));
        }
        for q in 0..queries {
            out[q * total_rows + p.rows.start..q * total_rows + p.rows.end]
                .copy_from_slice(&p.values[q * len..(q + 1) * len]);
        }
    }
    Ok((shape, out))
}

#[cfg(test)]
mod tests {
    use lattice::rlwe::Ring;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha20Rng;

    use super::*;
    use crate::inspiring::InspiringBodies;
    use crate::layout::{Database, Shape};
    use crate::scores::{
        combine_parts, decode, packing_masks, plaintext_scores, query, ScoreDb, ScorePart,
        ScoreShape,
    };

    /// `len` split into `count` contiguous runs as evenly as possible (the server's
    /// `--shard-rows i/S`), and some uneven splits with empty runs.
    fn splits(len: usize) -> Vec<Vec<Range<usize>>> {
        let mut out: Vec<Vec<Range<usize>>> = (1..=4)
            .map(|s| (0..s).map(|i| len * i / s..len * (i + 1) / s).collect())
            .collect();
        out.push(vec![0..1, 1..len - 3, len - 3..len]);
        out.push(vec![0..0, 0..len / 5, len / 5..len, len..len]);
        out
    }

    #[test]
    fn row_shards_answers_concatenate_to_the_one_database_answer() {
        let mut rng = ChaCha20Rng::seed_from_u64(62);
        for (record_len, records, rows) in [(16usize, 300usize, 64usize), (96, 50, 32)] {
            let shape = Shape::new(record_len, records, rows).unwrap();
            let recs: Vec<Vec<u8>> = (0..records)
                .map(|_| (0..record_len).map(|_| rng.random()).collect())
                .collect();
            let whole = Database::build(shape, recs.iter().map(Vec::as_slice)).unwrap();
            let c = 3;
            let queries: Vec<u32> = (0..c * shape.cols).map(|_| rng.random()).collect();
            let want = whole.answer_rows(&queries, 0..shape.rows);
            for split in splits(shape.rows) {
                let parts: Vec<RowsPart> = split
                    .iter()
                    .map(|r| {
                        let mut db = whole.clone();
                        db.keep_rows(r.clone()).unwrap();
                        assert_eq!(db.data().len(), r.len() * shape.cols, "only its rows");
                        // Laid out with only these rows from the start: the same rows.
                        let direct =
                            Database::build_rows(shape, recs.iter().map(Vec::as_slice), r.clone())
                                .unwrap();
                        assert_eq!(direct, db, "{r:?}");
                        let part = RowsPart {
                            shape,
                            rows: r.clone(),
                            queries: c,
                            values: db.answer_rows(&queries, r.clone()),
                        };
                        // Across the wire and back.
                        RowsPart::decode(&part.encode()).unwrap()
                    })
                    .rev()
                    .collect();
                let (got_shape, got) = combine_rows(&parts).unwrap();
                assert_eq!((got_shape, &got), (shape, &want), "{split:?}");
                assert_eq!(shape.encode_answer(&got), shape.encode_answer(&want));
                // A shard missing, or one twice: refused.
                let held = parts.iter().position(|p| !p.rows.is_empty()).unwrap();
                let mut missing = parts.clone();
                let lost = missing.remove(held);
                assert!(combine_rows(&missing).is_err(), "{split:?}");
                missing.extend([lost.clone(), lost]);
                assert!(combine_rows(&missing).is_err(), "{split:?}");
            }
            // Rows outside those held, and damaged bytes, are refused.
            let mut db = whole.clone();
            db.keep_rows(2..5).unwrap();
            assert!(db.keep_rows(0..3).is_err());
            let recs = || recs.iter().map(Vec::as_slice);
            assert!(Database::build_rows(shape, recs(), 0..shape.rows + 1).is_err());
            #[allow(clippy::reversed_empty_ranges)]
            let backwards = 3..2;
            assert!(Database::build_rows(shape, recs(), backwards).is_err());
            let part = RowsPart {
                shape,
                rows: 0..2,
                queries: 1,
                values: vec![1, 2],
            };
            let bytes = part.encode();
            assert_eq!(RowsPart::decode(&bytes).unwrap(), part);
            assert!(RowsPart::decode(&bytes[..bytes.len() - 1]).is_err());
            let beyond = RowsPart {
                rows: shape.rows - 1..shape.rows + 1,
                ..part.clone()
            };
            assert!(RowsPart::decode(&beyond.encode()).is_err());
            let other = RowsPart {
                shape: Shape::new(record_len, records + 1000, rows).unwrap(),
                ..part
            };
            let mut mixed = vec![other];
            mixed.push(RowsPart {
                shape,
                rows: 2..shape.rows,
                queries: 1,
                values: vec![0; shape.rows - 2],
            });
            assert!(combine_rows(&mixed).is_err(), "parts of two shapes");
        }
    }

    #[test]
    fn row_shards_score_parts_sum_to_the_one_database_answer_bit_for_bit() {
        let n = 256;
        let shape = ScoreShape {
            blocks: 5,
            dim: 16,
            rows: 200,
        };
        let ring = Ring::new(n);
        let mut rng = ChaCha20Rng::seed_from_u64(31);
        let blocks = crate::selftest::random_blocks(&shape, &mut rng);
        let masks = packing_masks(&ring, &shape, &[3; 32]);
        let qseed = [9u8; 32];
        let whole = ScoreDb::build(&ring, shape, &blocks, &qseed, &masks).unwrap();
        let lay_out = || {
            ScoreDb::lay_out(
                &ring,
                shape,
                crate::scores::block_rows(&blocks, shape.dim),
                &qseed,
                &masks,
            )
            .unwrap()
        };
        let jobs: Vec<(usize, Vec<i16>, Vec<u64>, InspiringBodies, _)> = [4usize, 0, 2]
            .into_iter()
            .map(|block| {
                let q = crate::selftest::capped_features(shape.dim, &mut rng);
                let (upload, bodies, sk) =
                    query(&ring, &shape, &qseed, &masks, block, &q, &mut rng).unwrap();
                (block, q, upload, bodies, sk)
            })
            .collect();
        let batch: Vec<(&[u64], &InspiringBodies)> =
            jobs.iter().map(|j| (&j.2[..], &j.3)).collect();
        let want: Vec<Vec<Vec<u64>>> = whole
            .answer_many(&ring, &batch, None)
            .into_iter()
            .map(Result::unwrap)
            .collect();
        let steps = shape.packing_steps(n);
        assert!(
            shape.ciphertexts(n) > 1 && steps > 1,
            "chunks and steps to split"
        );
        let (row_splits, step_splits) = (splits(shape.rows), splits(steps));
        for (rows, steps) in row_splits.iter().zip(&step_splits) {
            let shards: Vec<ScoreDb> = rows
                .iter()
                .zip(steps)
                .map(|(r, s)| {
                    lay_out()
                        .part(r.clone(), s.clone())
                        .unwrap()
                        .build()
                        .unwrap()
                })
                .collect();
            for db in &shards {
                assert_eq!(
                    db.public_a(),
                    whole.public_a(),
                    "every shard knows the public a"
                );
            }
            let parts: Vec<Vec<ScorePart>> = shards
                .iter()
                .map(|db| {
                    db.part_many(&ring, &batch, None)
                        .into_iter()
                        .map(|p| ScorePart::decode(n, &p.unwrap().encode()).unwrap())
                        .collect()
                })
                .collect();
            for (q, (block, f, _, _, sk)) in jobs.iter().enumerate() {
                let of_query: Vec<ScorePart> = parts.iter().map(|p| p[q].clone()).collect();
                let (got_shape, got) = combine_parts(&ring, &of_query).unwrap();
                assert_eq!(got_shape, shape);
                assert_eq!(got, want[q], "rows {rows:?} steps {steps:?}");
                let scores = decode(&ring, &shape, sk, &whole.public_a(), &got).unwrap();
                let exact = plaintext_scores(f, &blocks[*block], shape.dim);
                assert_eq!(&scores[..exact.len()], &exact[..]);
                if of_query.len() > 1 {
                    let missing: Vec<ScorePart> = of_query[1..].to_vec();
                    let lost_something =
                        !of_query[0].rows.is_empty() || !of_query[0].steps.is_empty();
                    assert_eq!(combine_parts(&ring, &missing).is_err(), lost_something);
                    let mut twice = of_query.clone();
                    let held = of_query.iter().find(|p| !p.rows.is_empty()).unwrap();
                    twice.push(held.clone());
                    assert!(combine_parts(&ring, &twice).is_err());
                }
            }
        }
        // Shards whose rows and steps are split differently still sum to the whole.
        let a = lay_out().part(0..150, 0..10).unwrap().build().unwrap();
        // (Its rows laid out 9 at a time, one plan at a time: the same part.)
        let b = lay_out()
            .part(150..200, 10..steps)
            .unwrap()
            .plans_at_once(1)
            .layout_rows(9)
            .build()
            .unwrap();
        let parts: Vec<ScorePart> = [&a, &b]
            .iter()
            .map(|db| {
                db.part_many(&ring, &batch[..1], None)
                    .pop()
                    .unwrap()
                    .unwrap()
            })
            .collect();
        assert_eq!(combine_parts(&ring, &parts).unwrap().1, want[0]);
        // A shard's part written out as built and read back from the bytes (as a server maps
        // it) answers as the one held in memory.
        let mut out = Vec::new();
        let written = lay_out()
            .part(150..200, 10..steps)
            .unwrap()
            .build_into(&mut out)
            .unwrap();
        assert_eq!(written.written_len(), out.len());
        let mapped = written
            .share(&crate::scores::tests::shared_words(&out))
            .unwrap();
        assert!(!mapped.held_in_memory());
        let again = mapped
            .part_many(&ring, &batch[..1], None)
            .pop()
            .unwrap()
            .unwrap();
        assert_eq!(again, parts[1]);
        // Ranges outside the shape, and damaged parts, are refused.
        assert!(lay_out().part(0..201, 0..steps).is_err());
        assert!(lay_out().part(0..200, 0..steps + 1).is_err());
        let bytes = parts[0].encode();
        assert!(ScorePart::decode(n, &bytes[..bytes.len() - 8]).is_err());
        assert!(ScorePart::decode(2 * n, &bytes).is_err(), "another ring");
        let mut high = bytes.clone();
        high[36..44].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(ScorePart::decode(n, &high).is_err());
        assert!(ScorePart::decode(n, &bytes).is_ok());
    }
}
