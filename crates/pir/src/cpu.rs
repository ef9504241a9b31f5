//! The calling thread's CPU time, for the work a server reports (`/status`'s core-ms a search).
//! Wall time over-reads once tasks share cores: a task waiting for a core is not working, and
//! with eight concurrent searches on two cores the tasks' wall clocks read more than twice the
//! work done.

/// Microseconds of CPU (user and system) the calling thread has used so far, or `None` where
/// the platform gives no per-thread clock (wasm32 and non-Unix targets): callers then report
/// nothing rather than a wall-clock figure.
pub fn thread_micros() -> Option<u64> {
    #[cfg(unix)]
    {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `ts` is a valid, writable timespec; the call only writes it.
        let r = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
        (r == 0).then(|| ts.tv_sec as u64 * 1_000_000 + ts.tv_nsec as u64 / 1_000)
    }
    #[cfg(not(unix))]
    {
        None
    }
}

/// `f()`, with the CPU time this thread spent in it added to `micros` (µs) where measurable.
pub fn timed<U>(micros: &std::sync::atomic::AtomicU64, f: impl FnOnce() -> U) -> U {
    let start = thread_micros();
    let out = f();
    if let (Some(a), Some(b)) = (start, thread_micros()) {
        micros.fetch_add(b.saturating_sub(a), std::sync::atomic::Ordering::Relaxed);
    }
    out
}

#[cfg(all(test, unix))]
mod tests {
    use std::sync::atomic::{AtomicU64, Ordering};

    /// Sleeping does not count (a wall clock would); work counts, and never more than the
    /// wall time it took (whatever else the machine runs meanwhile).
    #[test]
    fn counts_work_not_waiting() {
        let m = AtomicU64::new(0);
        super::timed(&m, || {
            std::thread::sleep(std::time::Duration::from_millis(200))
        });
        assert!(
            m.load(Ordering::Relaxed) < 50_000,
            "{}",
            m.load(Ordering::Relaxed)
        );
        let m = AtomicU64::new(0);
        let wall = std::time::Instant::now();
        let x = super::timed(&m, || {
            // Busy until this thread has run 100 ms, however long that takes on a busy machine.
            let start = super::thread_micros().unwrap();
            let mut x = 0u64;
            while super::thread_micros().unwrap() - start < 100_000 {
                x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
            }
            x
        });
        std::hint::black_box(x);
        let us = m.load(Ordering::Relaxed);
        assert!(us >= 100_000, "{us}");
        assert!(us as u128 <= wall.elapsed().as_micros(), "{us}");
    }
}
