//! The schemes' work over many items: on every core with the `parallel` feature (the server),
//! serially otherwise (the browser).

/// `f` over `items`, in order: on every core with the `parallel` feature (the server), serially
/// otherwise (the browser). With `micros`, the calls' summed CPU time (each thread's own clock,
/// [`crate::cpu`]) is added to it, µs — what the server reports per search; not measured where
/// there is no thread clock (wasm32).
pub(crate) fn par_map<T: Sync, U: Send>(
    items: &[T],
    f: impl Fn(&T) -> U + Sync + Send,
    micros: Option<&std::sync::atomic::AtomicU64>,
) -> Vec<U> {
    let timed = |x: &T| match micros {
        Some(m) => crate::cpu::timed(m, || f(x)),
        None => f(x),
    };
    #[cfg(feature = "parallel")]
    {
        use rayon::prelude::*;
        items.par_iter().map(timed).collect()
    }
    #[cfg(not(feature = "parallel"))]
    {
        items.iter().map(timed).collect()
    }
}

/// `f` over `items` (on up to `at_once` cores with the `parallel` feature), each result handed
/// to `sink` in the items' order as soon as it and all before it are made — for results too
/// large to hold all at once (the score database's packing plans, written out as they are
/// built). At most `at_once` results (and one per thread) exist at a time, made or waiting for
/// their turn: a thread takes the next item only while fewer than that many are not yet through
/// `sink`. Stops at `sink`'s first error and returns it.
pub(crate) fn par_for_each_in_order<T: Sync, U: Send, E: Send>(
    items: &[T],
    at_once: usize,
    f: impl Fn(&T) -> U + Sync,
    mut sink: impl FnMut(U) -> Result<(), E> + Send,
) -> Result<(), E> {
    #[cfg(feature = "parallel")]
    {
        let window = at_once.min(rayon::current_num_threads());
        if window > 1 {
            return in_order::run(items, f, sink, window);
        }
    }
    #[cfg(not(feature = "parallel"))]
    let _ = at_once;
    items.iter().try_for_each(|x| sink(f(x)))
}

#[cfg(feature = "parallel")]
mod in_order {
    use std::collections::BTreeMap;
    use std::sync::{Condvar, Mutex, MutexGuard};

    struct State<U, S, E> {
        /// Items taken by a thread (the first `taken`).
        taken: usize,
        /// Items through the sink (the first `done`).
        done: usize,
        /// Results made, waiting for their turn.
        ready: BTreeMap<usize, U>,
        /// The sink, unless a thread has taken it to hand results to it.
        sink: Option<S>,
        failed: Option<E>,
        /// A thread panicked: the others stop (the scope then resumes the panic).
        panicked: bool,
    }

    /// Marks the run as stopped if a thread unwinds (making a result or in the sink), so that
    /// the others do not wait for it forever.
    struct OnPanic<'a, U, S, E>(&'a Mutex<State<U, S, E>>, &'a Condvar);

    impl<U, S, E> Drop for OnPanic<'_, U, S, E> {
        fn drop(&mut self) {
            if std::thread::panicking() {
                self.0.lock().unwrap_or_else(|e| e.into_inner()).panicked = true;
                self.1.notify_all();
            }
        }
    }

    pub(super) fn run<T: Sync, U: Send, E: Send, S: FnMut(U) -> Result<(), E> + Send>(
        items: &[T],
        f: impl Fn(&T) -> U + Sync,
        sink: S,
        window: usize,
    ) -> Result<(), E> {
        let state = Mutex::new(State {
            taken: 0,
            done: 0,
            ready: BTreeMap::new(),
            sink: Some(sink),
            failed: None,
            panicked: false,
        });
        let turn = Condvar::new();
        let lock = || state.lock().unwrap_or_else(|e| e.into_inner());
        let stopped = |s: &MutexGuard<State<U, S, E>>| s.failed.is_some() || s.panicked;
        rayon::scope(|scope| {
            for _ in 0..window {
                scope.spawn(|_| {
                    let _stop_on_panic = OnPanic(&state, &turn);
                    loop {
                        let i = {
                            let mut s = lock();
                            loop {
                                if stopped(&s) || s.taken == items.len() {
                                    return;
                                }
                                if s.taken - s.done < window {
                                    break;
                                }
                                s = turn.wait(s).unwrap_or_else(|e| e.into_inner());
                            }
                            s.taken += 1;
                            s.taken - 1
                        };
                        let made = f(&items[i]);
                        let mut s = lock();
                        if stopped(&s) {
                            return;
                        }
                        s.ready.insert(i, made);
                        // Hand over what is due, unless another thread is doing so (it will find
                        // this result when its current one is through).
                        let Some(mut sink) = s.sink.take() else {
                            continue;
                        };
                        loop {
                            let next = s.done;
                            let Some(due) = s.ready.remove(&next) else {
                                break;
                            };
                            drop(s);
                            let result = sink(due);
                            s = lock();
                            match result {
                                Ok(()) => s.done += 1,
                                Err(e) => {
                                    s.failed = Some(e);
                                    s.ready.clear();
                                }
                            }
                            turn.notify_all();
                            if stopped(&s) {
                                break;
                            }
                        }
                        s.sink = Some(sink);
                    }
                });
            }
        });
        let s = state.into_inner().unwrap_or_else(|e| e.into_inner());
        match s.failed {
            Some(e) => Err(e),
            None => {
                debug_assert_eq!(s.done, items.len());
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Results reach the sink in order, at most one per thread (and `at_once`) exists at a
    /// time, and the first failed hand-over stops the run with its error.
    fn check_in_order(threads: usize, at_once: usize) {
        let items: Vec<usize> = (0..40).collect();
        let (alive, most) = (AtomicUsize::new(0), AtomicUsize::new(0));
        let make = |&i: &usize| {
            let now = alive.fetch_add(1, Ordering::SeqCst) + 1;
            most.fetch_max(now, Ordering::SeqCst);
            // Later items are quicker: they finish out of order.
            std::thread::sleep(std::time::Duration::from_micros((40 - i as u64) * 50));
            i
        };
        let mut seen = Vec::new();
        super::par_for_each_in_order(&items, at_once, make, |i| {
            alive.fetch_sub(1, Ordering::SeqCst);
            seen.push(i);
            Ok::<_, ()>(())
        })
        .unwrap();
        assert_eq!(seen, items);
        let most = most.load(Ordering::SeqCst);
        assert!(
            most <= threads.min(at_once),
            "{most} results at once on {threads} threads, at most {at_once}"
        );
        let mut seen = Vec::new();
        let stopped = super::par_for_each_in_order(
            &items,
            at_once,
            |&i| i,
            |i| {
                if i == 7 {
                    return Err(i);
                }
                seen.push(i);
                Ok(())
            },
        );
        assert_eq!(stopped, Err(7));
        assert_eq!(seen, (0..7).collect::<Vec<_>>());
    }

    #[test]
    fn in_order_hands_results_over_in_order() {
        #[cfg(feature = "parallel")]
        for threads in [2, 4] {
            for at_once in [1, 2, usize::MAX] {
                rayon::ThreadPoolBuilder::new()
                    .num_threads(threads)
                    .build()
                    .unwrap()
                    .install(|| check_in_order(threads, at_once));
            }
        }
        #[cfg(not(feature = "parallel"))]
        check_in_order(1, usize::MAX);
    }

    /// A result that panics while it is made ends the run with that panic: the threads that
    /// wait for their turn do not wait forever.
    #[test]
    fn in_order_passes_a_panic_on() {
        let run = || {
            std::panic::catch_unwind(|| {
                let items: Vec<usize> = (0..20).collect();
                super::par_for_each_in_order(
                    &items,
                    usize::MAX,
                    |&i| {
                        assert_ne!(i, 3, "the made-up failure");
                        std::thread::sleep(std::time::Duration::from_millis(2));
                        i
                    },
                    |_| Ok::<_, ()>(()),
                )
            })
        };
        #[cfg(feature = "parallel")]
        let got = rayon::ThreadPoolBuilder::new()
            .num_threads(3)
            .build()
            .unwrap()
            .install(run);
        #[cfg(not(feature = "parallel"))]
        let got = run();
        assert!(got.is_err());
    }
}
