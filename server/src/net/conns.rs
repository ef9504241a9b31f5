//! The open connections: a cap on their number, and which one to close to make room.
//!
//! At the cap, a new connection closes the oldest *idle* one (no request being handled and
//! no response being sent: a keep-alive connection, or one still sending a request head)
//! rather than being turned away, so connections held open by a slow or hostile client can
//! never keep a real client out while any of them is idle. Only if every connection is busy
//! is the new one closed at once.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

struct Entry {
    busy: Arc<AtomicUsize>,
    close: Arc<Notify>,
}

/// The registry (one per listener).
pub struct Connections {
    max: usize,
    /// By admission order: the first idle entry is the oldest.
    open: Mutex<(u64, BTreeMap<u64, Entry>)>,
}

/// One admitted connection; dropping it leaves the registry.
pub struct Conn {
    id: u64,
    reg: Arc<Connections>,
    pub busy: Arc<AtomicUsize>,
    /// Notified when the registry wants this connection closed.
    pub close: Arc<Notify>,
}

/// What admitting a connection did.
pub enum Admitted {
    /// Room was free.
    Free(Conn),
    /// An idle connection was told to close to make room.
    Evicted(Conn),
    /// At the cap with every connection busy.
    Full,
}

impl Connections {
    pub fn new(max: usize) -> Arc<Connections> {
        Arc::new(Connections {
            max: max.max(1),
            open: Mutex::new((0, BTreeMap::new())),
        })
    }

    pub fn len(&self) -> usize {
        self.lock().1.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, (u64, BTreeMap<u64, Entry>)> {
        self.open.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn admit(self: &Arc<Self>) -> Admitted {
        let mut g = self.lock();
        let mut evicted = false;
        if g.1.len() >= self.max {
            // O(open) only at the cap; 4,096 entries scan in microseconds.
            let idle =
                g.1.iter()
                    .find(|(_, e)| e.busy.load(Ordering::Acquire) == 0)
                    .map(|(id, _)| *id);
            match idle {
                Some(id) => {
                    let e = g.1.remove(&id).expect("found above");
                    // A stored permit: the connection closes even if not yet waiting on it.
                    e.close.notify_one();
                    evicted = true;
                }
                None => return Admitted::Full,
            }
        }
        let id = g.0;
        g.0 += 1;
        let (busy, close) = (Arc::new(AtomicUsize::new(0)), Arc::new(Notify::new()));
        g.1.insert(
            id,
            Entry {
                busy: Arc::clone(&busy),
                close: Arc::clone(&close),
            },
        );
        let conn = Conn {
            id,
            reg: Arc::clone(self),
            busy,
            close,
        };
        if evicted {
            Admitted::Evicted(conn)
        } else {
            Admitted::Free(conn)
        }
    }

    /// Tells every connection to close (the end of a shutdown's grace period).
    pub fn close_all(&self) {
        for e in self.lock().1.values() {
            e.close.notify_one();
        }
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        self.reg.lock().1.remove(&self.id);
    }
}

/// Marks a connection busy while it lives (held by a request and then its response body).
pub struct Busy(Arc<AtomicUsize>);

impl Busy {
    pub fn new(counter: &Arc<AtomicUsize>) -> Busy {
        counter.fetch_add(1, Ordering::AcqRel);
        Busy(Arc::clone(counter))
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn at_the_cap_the_oldest_idle_connection_makes_room_and_busy_ones_stay() {
        let reg = Connections::new(3);
        let a = match reg.admit() {
            Admitted::Free(c) => c,
            _ => panic!("room"),
        };
        let b = match reg.admit() {
            Admitted::Free(c) => c,
            _ => panic!("room"),
        };
        let c = match reg.admit() {
            Admitted::Free(c) => c,
            _ => panic!("room"),
        };
        let _busy_a = Busy::new(&a.busy);
        // a is busy: b (the oldest idle) is told to close.
        let d = match reg.admit() {
            Admitted::Evicted(d) => d,
            _ => panic!("an idle connection should make room"),
        };
        assert_eq!(reg.len(), 3);
        let b_close = Arc::clone(&b.close);
        let notified = b_close.notified();
        tokio_test_ready(notified);
        let _busy_c = Busy::new(&c.busy);
        let _busy_d = Busy::new(&d.busy);
        assert!(matches!(reg.admit(), Admitted::Full));
        drop(b);
        assert_eq!(reg.len(), 3, "b had already left the registry");
        drop((a, c, d));
        assert!(reg.is_empty());
    }

    /// A stored `notify_one` permit completes the next `notified()` at once.
    fn tokio_test_ready(f: tokio::sync::futures::Notified<'_>) {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        rt.block_on(async {
            tokio::time::timeout(std::time::Duration::from_millis(100), f)
                .await
                .expect("the evicted connection was told to close")
        });
    }
}
