//! Issue #60, point 3, for a level's ranking record: between the level's answer and the
//! thumbnail request, the client's work depends on no size the server chose. Records of 1, 3,
//! 8 and 300 items, each zero-padded to the database's record length as a server serves them,
//! and one whose check fails: `k` = 8 results chosen over as many items as the padded record
//! could hold, the whole padded record hashed, the records of fewer than `k` items refused
//! after the same work. Medians of interleaved rounds (load on the machine falls on every case
//! alike) agree within 5 %. (The decode before this, `rank_level`'s SimplePIR answer times the
//! hint, is the same for every record of a database: its shape's.)

use client::pir_search::{rank_padded, ranked};
use pir::layout::Shape;
use publish::blocks::hash_hex;
use publish::pir::doc::{level_shape, PirDbDoc, PirDoc, SchemeDoc};
use publish::pir::records::{decode_rank_record, encode_rank_record, rank_record_len, RankItem};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha20Rng;

const DIM: usize = 64;
const K: usize = 8;

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

fn median(t: &mut [f64]) -> f64 {
    t.sort_by(f64::total_cmp);
    t[t.len() / 2]
}

#[test]
fn a_level_records_ranking_takes_the_same_time_whatever_its_size() {
    let sizes = [1usize, 3, 8, 300];
    let mut rng = ChaCha20Rng::seed_from_u64(60);
    let items: usize = sizes.iter().sum();
    let features: Vec<Vec<f32>> = (0..items).map(|_| unit(&mut rng)).collect();
    let query = unit(&mut rng);
    let shape = level_shape(sizes.len(), rank_record_len(300, DIM)).unwrap();
    let mut at = 0;
    // (padded record, its published hash) for each size, then the longest with another hash.
    let mut cases: Vec<(Vec<u8>, String)> = sizes
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
    cases.push((cases[3].0.clone(), "00".repeat(32)));
    let pir = doc(items);
    let run = |c: usize| rank_padded(&pir, &cases[c].0, &cases[c].1, &query, K);
    // What each case gives: the exact top k (as the table's ranking), or a refusal.
    for (c, (padded, hash)) in cases.iter().enumerate() {
        match (run(c), sizes.get(c)) {
            (Ok(got), Some(&n)) if n >= K => {
                let record = decode_rank_record(padded, hash).unwrap();
                assert_eq!(got, ranked(&record, &query, K).unwrap(), "record of {n}");
                assert_eq!(got.hits.len(), K);
            }
            (Err(e), Some(&n)) if n < K => {
                assert!(e.to_string().contains("fewer than k"), "{e}")
            }
            (Err(e), None) => assert!(e.to_string().contains("SHA-256"), "{e}"),
            (r, n) => panic!("case {c} ({n:?} items): {r:?}"),
        }
    }
    let mut times = vec![Vec::new(); cases.len()];
    for _ in 0..400 {
        for (c, t) in times.iter_mut().enumerate() {
            let start = std::time::Instant::now();
            let _ = std::hint::black_box(run(c));
            t.push(start.elapsed().as_secs_f64() * 1e6);
        }
    }
    let medians: Vec<f64> = times.iter_mut().map(|t| median(t)).collect();
    eprintln!("ranking medians (µs), records of {sizes:?} items and a failed check: {medians:.1?}");
    let (lo, hi) = medians
        .iter()
        .fold((f64::MAX, 0f64), |(l, h), &m| (l.min(m), h.max(m)));
    assert!(
        hi <= 1.05 * lo,
        "medians {medians:.1?} differ by more than 5 %"
    );
}
