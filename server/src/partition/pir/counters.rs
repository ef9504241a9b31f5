//! The work counters of PIR answers that `/status` shows.

use std::sync::atomic::AtomicU64;

/// Work done answering queries (for `/status`).
#[derive(Debug, Default)]
pub struct PirCounters {
    pub requests: AtomicU64,
    /// Searches: every search sends exactly one thumbnail request.
    pub searches: AtomicU64,
    pub queries: AtomicU64,
    /// Summed CPU time of the answer tasks (each thread's own clock, `pir::cpu`), µs.
    pub core_us: AtomicU64,
    /// Hintless scores batches computed, and the queries answered in them (`batch`).
    pub score_batches: AtomicU64,
    pub score_queries: AtomicU64,
}
