//! The cases of the ranking timing tests (issue #60, point 3): a level's ranking record of 1,
//! 3, 8 and 300 items, each zero-padded to the database's record length as a server serves
//! them, and the longest with a hash that fails; ranked with `k` = 8. Shared by the native
//! test (`crates/client/tests/ranking_time.rs`, the workspace's build) and the browser's
//! (`client-wasm/tests/browser/ranking_time.rs`, the serial build the page runs).

use client::pir_search::{rank_padded, ranked, Ranked};
use pir::layout::Shape;
use pir::selftest::Timing;
use publish::blocks::hash_hex;
use publish::pir::doc::{level_shape, PirDbDoc, PirDoc, SchemeDoc};
use publish::pir::records::{decode_rank_record, encode_rank_record, rank_record_len, RankItem};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha20Rng;

const DIM: usize = 64;
pub const K: usize = 8;
/// The records' item counts; the last is the database's longest.
pub const SIZES: [usize; 4] = [1, 3, 8, 300];
/// The most the slowest case's time may exceed the fastest's.
pub const TOLERANCE: f64 = 0.05;

fn unit(rng: &mut ChaCha20Rng) -> Vec<f32> {
    let v: Vec<f32> = (0..DIM).map(|_| rng.random::<f32>() - 0.5).collect();
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    v.iter().map(|x| x / norm).collect()
}

/// A PIR document whose thumbnail database has `records` records (all the ranking reads).
fn doc(records: usize) -> PirDoc {
    let shape = Shape::new(294, records, 294).unwrap();
    PirDoc {
        version: "v".into(),
        scheme: SchemeDoc::ours(),
        answer_url: "/api/v1/pir/v".into(),
        thumbs: PirDbDoc {
            shape,
            a_seed: "00".repeat(32),
            hint_sha256: "ab".repeat(32),
            record_hashes: Vec::new(),
            failure_log2: shape.failure_log2(),
        },
        rank_table: None,
        levels: Vec::new(),
        scores: None,
        thumb_features: false,
        thumbs_code: None,
    }
}

/// The padded records with their published hashes (one a size, then the longest with a
/// wrong hash), the document and the photo's features.
pub struct Cases {
    pir: PirDoc,
    records: Vec<(Vec<u8>, String)>,
    query: Vec<f32>,
}

impl Cases {
    pub fn build() -> Self {
        let mut rng = ChaCha20Rng::seed_from_u64(60);
        let items: usize = SIZES.iter().sum();
        let features: Vec<Vec<f32>> = (0..items).map(|_| unit(&mut rng)).collect();
        let query = unit(&mut rng);
        let longest = *SIZES.iter().max().unwrap();
        let shape = level_shape(SIZES.len(), rank_record_len(longest, DIM)).unwrap();
        let mut at = 0;
        let mut records: Vec<(Vec<u8>, String)> = SIZES
            .iter()
            .map(|&n| {
                let its: Vec<RankItem> = (at..at + n)
                    .map(|i| RankItem {
                        id: 1_000 + i as u64,
                        label: (i % 10) as u8,
                        features: &features[i],
                        index: i as u32,
                        digest: [i as u8; 16],
                    })
                    .collect();
                at += n;
                let record = encode_rank_record(&its, DIM).unwrap();
                let hash = hash_hex(&record);
                let mut padded = record;
                padded.resize(shape.record_len, 0);
                (padded, hash)
            })
            .collect();
        records.push((records[SIZES.len() - 1].0.clone(), "00".repeat(32)));
        Self {
            pir: doc(items),
            records,
            query,
        }
    }

    pub fn run(&self, c: usize) -> shared::error::Result<Ranked> {
        let (padded, hash) = &self.records[c];
        rank_padded(&self.pir, padded, hash, &self.query, K)
    }

    /// What each case gives: the exact top k (as the table's ranking), or a refusal.
    pub fn check_outcomes(&self) {
        for (c, (padded, hash)) in self.records.iter().enumerate() {
            match (self.run(c), SIZES.get(c)) {
                (Ok(got), Some(&n)) if n >= K => {
                    let record = decode_rank_record(padded, hash).unwrap();
                    assert_eq!(
                        got,
                        ranked(&record, &self.query, K).unwrap(),
                        "record of {n}"
                    );
                    assert_eq!(got.hits.len(), K);
                }
                (Err(e), Some(&n)) if n < K => {
                    assert!(e.to_string().contains("fewer than k"), "{e}")
                }
                (Err(e), None) => assert!(e.to_string().contains("SHA-256"), "{e}"),
                (r, n) => panic!("case {c} ({n:?} items): {r:?}"),
            }
        }
    }

    /// The cases' times against each other over `rounds` rounds of `batch` rankings each
    /// ([`pir::selftest::paired_timing`]: each time against its round's, so load on the
    /// machine is left out).
    pub fn timing(&self, rounds: usize, batch: usize, now: impl Fn() -> f64) -> Timing {
        let run = |c: usize| {
            let _ = std::hint::black_box(self.run(c));
        };
        pir::selftest::paired_timing(self.records.len(), rounds, batch, run, now)
    }
}

/// The slowest case's time is within [`TOLERANCE`] of the fastest's.
pub fn assert_equal_within_noise(timing: &Timing) {
    assert!(
        timing.spread() <= TOLERANCE,
        "{timing:.3?}: the cases' times differ by more than {} %",
        TOLERANCE * 100.0
    );
}
