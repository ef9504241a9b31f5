//! Issue #60, point 3, for a level's ranking record: between the level's answer and the
//! thumbnail request, the client's work depends on no size the server chose. Records of 1, 3,
//! 8 and 300 items, each zero-padded to the database's record length as a server serves them,
//! and one whose check fails: `k` = 8 results chosen over every slot the padded record could
//! hold, the record's prefix hashed with the same work whatever its length, the records of
//! fewer than `k` items refused after the same work. The cases' times agree within 5 %,
//! each measured against its round's (`pir::selftest::paired_timing`: load on the machine
//! is left out). (The decode before this,
//! `rank_level`'s SimplePIR answer times the hint, is the same for every record of a
//! database: its shape's.) The same cases run in the browser's WebAssembly, the serial build
//! the page runs (`client-wasm/tests/browser/ranking_time.rs`).

#[path = "common/ranking_cases.rs"]
mod cases;

use client::pir_search::ranked;

#[test]
fn a_level_records_ranking_takes_the_same_time_whatever_its_size() {
    let cases = cases::Cases::build();
    cases.check_outcomes();
    let clock = std::time::Instant::now();
    let timing = cases.timing(400, 1, || clock.elapsed().as_secs_f64() * 1e6);
    eprintln!(
        "ranking (µs), records of {:?} items and a failed check: {timing:.3?}",
        cases::SIZES
    );
    cases::assert_equal_within_noise(&timing);
}

/// The ranking table (the default PIR plan): a server that writes and orders it can make a
/// ranking that stops early work hardest for one photo — its rows sorted farthest first from a
/// target, every row then displaces the current 8th best for a photo at the target and almost
/// none for another. Ranked with the same work whatever the values (`ranked`:
/// `publish::topk::nearest_fixed`), the two photos' times agree within 5 %, so the thumbnail
/// queries that follow leave after the same time. (A bounded insertion list took about half as
/// long again for the photo at the target at 100,000 rows.)
#[test]
fn the_ranking_tables_ranking_takes_the_same_time_wherever_the_photo_lies() {
    use publish::blocks::Block;
    use publish::pir::records::RankRecord;
    use rand::{Rng, SeedableRng};
    const N: usize = 20_000;
    const DIM: usize = 64;
    let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(63);
    let mut unit = || {
        let v: Vec<f32> = (0..DIM).map(|_| rng.random::<f32>() - 0.5).collect();
        let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        v.iter().map(|x| x / norm).collect::<Vec<f32>>()
    };
    let target = unit();
    let other = unit();
    let mut rows: Vec<Vec<f32>> = (0..N).map(|_| unit()).collect();
    let dist = |r: &[f32]| -> f32 { r.iter().zip(&target).map(|(x, y)| (x - y) * (x - y)).sum() };
    rows.sort_by(|a, b| dist(b).total_cmp(&dist(a)));
    let record = RankRecord {
        block: Block {
            dim: DIM,
            thumb_side: 0,
            ids: (0..N as u64).collect(),
            labels: (0..N).map(|i| (i % 10) as u8).collect(),
            features: rows.concat(),
            thumbnails: Vec::new(),
        },
        indices: (0..N as u32).collect(),
        digests: vec![[0; 16]; N],
    };
    let photos = [&target, &other];
    // The nearest first: for the photo at the target, the rows it was sorted away from.
    let got = ranked(&record, &target, cases::K).unwrap();
    assert_eq!(got.hits[0].id, N as u64 - 1);
    let clock = std::time::Instant::now();
    let timing = pir::selftest::paired_timing(
        photos.len(),
        200,
        1,
        |c| {
            let _ = std::hint::black_box(ranked(&record, photos[c], cases::K));
        },
        || clock.elapsed().as_secs_f64() * 1e6,
    );
    eprintln!("the table's ranking (µs), a photo at the target and another: {timing:.3?}");
    cases::assert_equal_within_noise(&timing);
}
