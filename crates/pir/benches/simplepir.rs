//! The SimplePIR answer at the thumbnail database's shape at 1,000,000 images (294-byte
//! records, 9,408 rows × 31,250 columns: 294 MB), for the 8 queries a search sends in one
//! request, on one core. `cargo bench -p privatemail-pir --bench simplepir`.

use std::time::Instant;

use pir::layout::{Database, Shape};

fn main() {
    let bench = std::env::args().any(|a| a == "--bench");
    // Under `cargo test --all-targets` this runs once at a small shape, as a smoke test.
    let (records, rows) = if bench {
        (1_000_000, 9_408)
    } else {
        (2_000, 294)
    };
    let shape = Shape::new(294, records, rows).expect("shape");
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let recs: Vec<Vec<u8>> = (0..records)
        .map(|_| (0..294).map(|_| next() as u8).collect())
        .collect();
    let db = Database::build(shape, recs.iter().map(|r| r.as_slice())).expect("builds");
    let queries: Vec<u32> = (0..8 * shape.cols).map(|_| next() as u32).collect();
    println!(
        "{} rows × {} columns ({:.0} MB), 8 queries",
        shape.rows,
        shape.cols,
        (shape.rows * shape.cols) as f64 / 1e6
    );
    let mut times = Vec::new();
    let mut check = 0u32;
    for _ in 0..if bench { 5 } else { 1 } {
        let t = Instant::now();
        let out = db.answer_rows(&queries, 0..shape.rows);
        times.push(t.elapsed().as_secs_f64() * 1e3);
        check = check.wrapping_add(out.iter().fold(0u32, |s, &v| s.wrapping_add(v)));
    }
    times.sort_by(f64::total_cmp);
    println!(
        "answer, 8 queries: median {:.1} ms (min {:.1}, max {:.1}); checksum {check:08x}",
        times[times.len() / 2],
        times[0],
        times[times.len() - 1]
    );
}
