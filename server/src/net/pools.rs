//! The thread pools expensive answers run on: one per answer slot (`admission::Slot::index`,
//! modulo their number), so answers running at once share the cores by the operating system's
//! scheduler rather than queueing behind one another in one pool; and for each, a twin whose
//! threads run at background priority, for the passes of a client asking for more than its
//! share (`admission::Slot::background`).
//!
//! Background priority is `nice` [`BACKGROUND_NICE`] on Linux (per thread): the scheduler's
//! weight of such a thread is about a tenth of a normal one's, so a foreground answer running
//! beside it gets about nine tenths of a contended core, and the background answer all of an
//! idle one. Elsewhere both sets run at normal priority (fairness then rests on admission).

use super::admission::Slot;

/// Pools beyond this share (slot index modulo the count): each holds a thread per core.
pub const MAX_POOLS: usize = 8;
/// The `nice` of the background pools' threads.
pub const BACKGROUND_NICE: i32 = 10;

/// Foreground and background pools, one of each per slot (up to [`MAX_POOLS`]).
pub struct AnswerPools {
    foreground: Vec<rayon::ThreadPool>,
    background: Vec<rayon::ThreadPool>,
}

impl AnswerPools {
    /// Pools for `concurrency` answers at once, each of `threads` threads.
    pub fn new(
        concurrency: usize,
        threads: usize,
    ) -> Result<AnswerPools, rayon::ThreadPoolBuildError> {
        let n = concurrency.clamp(1, MAX_POOLS);
        let build = |i: usize, background: bool| {
            rayon::ThreadPoolBuilder::new()
                .num_threads(threads.max(1))
                .thread_name(move |t| {
                    if background {
                        format!("pir-bg-{i}-{t}")
                    } else {
                        format!("pir-{i}-{t}")
                    }
                })
                .start_handler(move |_| {
                    if background {
                        lower_this_threads_priority();
                    }
                })
                .build()
        };
        Ok(AnswerPools {
            foreground: (0..n).map(|i| build(i, false)).collect::<Result<_, _>>()?,
            background: (0..n).map(|i| build(i, true)).collect::<Result<_, _>>()?,
        })
    }

    /// The pool `slot`'s answer runs on.
    pub fn for_slot(&self, slot: &Slot) -> &rayon::ThreadPool {
        let set = if slot.background() {
            &self.background
        } else {
            &self.foreground
        };
        &set[slot.index() % set.len()]
    }
}

#[cfg(target_os = "linux")]
fn lower_this_threads_priority() {
    // SAFETY: gettid and setpriority on the calling thread; a failure leaves it as it was.
    unsafe {
        let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
        libc::setpriority(libc::PRIO_PROCESS, tid, BACKGROUND_NICE);
    }
}

#[cfg(not(target_os = "linux"))]
fn lower_this_threads_priority() {}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    fn nice_of_this_thread() -> i32 {
        // SAFETY: as above; errno is not consulted since every nice here is ≥ 0.
        unsafe {
            let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
            libc::getpriority(libc::PRIO_PROCESS, tid)
        }
    }

    #[test]
    fn background_pools_run_below_the_foreground() {
        let pools = AnswerPools::new(2, 2).unwrap();
        let base = nice_of_this_thread();
        for p in &pools.foreground {
            assert_eq!(p.install(nice_of_this_thread), base);
        }
        for p in &pools.background {
            let n = p.install(nice_of_this_thread);
            assert_eq!(n, (base + BACKGROUND_NICE).min(19), "background nice");
        }
    }
}
