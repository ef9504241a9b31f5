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
