//! The open connections: a cap on their number, a share of it per client address, and which
//! connection to close to make room (as nginx's `limit_conn` and Envoy's connection limits).
//!
//! Connections are counted by [`ClientKey`] (IPv6 by /64). Behind a trusted proxy
//! (`--client-address-header`) every connection comes from the proxy, so a connection is
//! counted as *unkeyed* until its first request head names its client ([`Conn::rekey`]).
//!
//! - **An address at its share** (`per_address`): a new connection from it closes that
//!   address's own oldest idle connection, or is closed at once if all of them are busy. One
//!   address can never hold more than its share, whatever it sends.
//! - **The server at its cap**: the address holding the most connections, if it holds more
//!   than the newcomer's, gives up its oldest idle connection or else its oldest busy one
//!   (a stalled body or a slow download is no shelter). Otherwise the oldest idle connection
//!   anywhere makes room, and if every connection is busy the new one is closed at once.
//!
//! So filling the server takes at least `max / per_address` addresses, and even then each new
//! address is served at the expense of the largest holder.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

use super::client::ClientKey;

/// Who a connection is counted under: its client, or `None` until a trusted proxy's header
/// has named it.
pub type ConnKey = Option<ClientKey>;

struct Entry {
    key: ConnKey,
    busy: Arc<AtomicUsize>,
    close: Arc<Notify>,
}

#[derive(Default)]
struct Registry {
    next: u64,
    /// By admission order: the first entry of a set is the oldest.
    open: BTreeMap<u64, Entry>,
    by_key: HashMap<ConnKey, BTreeSet<u64>>,
}

impl Registry {
    fn insert(&mut self, key: ConnKey) -> (u64, Arc<AtomicUsize>, Arc<Notify>) {
        let id = self.next;
        self.next += 1;
        let (busy, close) = (Arc::new(AtomicUsize::new(0)), Arc::new(Notify::new()));
        self.open.insert(
            id,
            Entry {
                key,
                busy: Arc::clone(&busy),
                close: Arc::clone(&close),
            },
        );
        self.by_key.entry(key).or_default().insert(id);
        (id, busy, close)
    }

    fn remove(&mut self, id: u64) -> Option<Entry> {
        let e = self.open.remove(&id)?;
        if let Some(set) = self.by_key.get_mut(&e.key) {
            set.remove(&id);
            if set.is_empty() {
                self.by_key.remove(&e.key);
            }
        }
        Some(e)
    }

    fn held_by(&self, key: ConnKey) -> usize {
        self.by_key.get(&key).map_or(0, BTreeSet::len)
    }

    fn is_idle(&self, id: u64) -> bool {
        self.open
            .get(&id)
            .is_some_and(|e| e.busy.load(Ordering::Acquire) == 0)
    }

    /// `key`'s oldest idle connection other than `except`, or (if `busy_too`) its oldest.
    fn victim_of(&self, key: ConnKey, except: Option<u64>, busy_too: bool) -> Option<u64> {
        let set = self.by_key.get(&key)?;
        let mut ids = set.iter().copied().filter(|id| Some(*id) != except);
        let idle = ids.clone().find(|id| self.is_idle(*id));
        idle.or_else(|| if busy_too { ids.next() } else { None })
    }

    /// Tells connection `id` to close and forgets it. A stored permit: the connection closes
    /// even if it is not yet waiting on it.
    fn close(&mut self, id: u64) {
        if let Some(e) = self.remove(id) {
            e.close.notify_one();
        }
    }
}

/// The registry (one per listener).
pub struct Connections {
    max: usize,
    per_address: usize,
    reg: Mutex<Registry>,
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
    /// A connection was told to close to make room: an idle one, or one of the largest
    /// holder's (`busy` says which).
    Evicted { conn: Conn, busy: bool },
    /// The address already holds its share, every one of them busy.
    AddressFull,
    /// At the cap with every connection busy and no address holding more than this one.
    Full,
}

impl Connections {
    /// At most `max` connections, `per_address` of them from one client.
    pub fn new(max: usize, per_address: usize) -> Arc<Connections> {
        let max = max.max(1);
        Arc::new(Connections {
            max,
            per_address: per_address.clamp(1, max),
            reg: Mutex::new(Registry::default()),
        })
    }

    pub fn len(&self) -> usize {
        self.lock().open.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Registry> {
        self.reg.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Admits a connection counted under `key` (see the module's rules). O(open connections
    /// + addresses) only when a cap is reached; 4,096 entries scan in microseconds.
    pub fn admit(self: &Arc<Self>, key: ConnKey) -> Admitted {
        let mut g = self.lock();
        let mut evicted = None;
        if key.is_some() && g.held_by(key) >= self.per_address {
            match g.victim_of(key, None, false) {
                Some(id) => {
                    g.close(id);
                    evicted = Some(false);
                }
                None => return Admitted::AddressFull,
            }
        } else if g.open.len() >= self.max {
            let mine = g.held_by(key);
            let biggest = g
                .by_key
                .iter()
                .map(|(k, s)| (s.len(), *k))
                .max()
                .filter(|(n, _)| *n > mine + 1);
            let victim = match biggest {
                Some((_, k)) => g.victim_of(k, None, true).map(|id| (id, !g.is_idle(id))),
                None => g
                    .open
                    .keys()
                    .copied()
                    .find(|id| g.is_idle(*id))
                    .map(|id| (id, false)),
            };
            match victim {
                Some((id, busy)) => {
                    g.close(id);
                    evicted = Some(busy);
                }
                None => return Admitted::Full,
            }
        }
        let (id, busy, close) = g.insert(key);
        let conn = Conn {
            id,
            reg: Arc::clone(self),
            busy,
            close,
        };
        match evicted {
            Some(busy) => Admitted::Evicted { conn, busy },
            None => Admitted::Free(conn),
        }
    }

    /// Counts connection `id` under `key` from now on (a trusted proxy named its client). If
    /// that puts `key` over its share, its oldest other connection (idle first) is closed;
    /// returns whether one was.
    fn rekey(&self, id: u64, key: ClientKey) -> bool {
        let mut g = self.lock();
        let Some(old) = g.open.get(&id).map(|e| e.key) else {
            return false;
        };
        if old == Some(key) {
            return false;
        }
        let e = g.remove(id).expect("present above");
        g.open.insert(
            id,
            Entry {
                key: Some(key),
                ..e
            },
        );
        g.by_key.entry(Some(key)).or_default().insert(id);
        if g.held_by(Some(key)) > self.per_address {
            if let Some(victim) = g.victim_of(Some(key), Some(id), true) {
                g.close(victim);
                return true;
            }
        }
        false
    }

    /// Tells every connection to close (the end of a shutdown's grace period).
    pub fn close_all(&self) {
        for e in self.lock().open.values() {
            e.close.notify_one();
        }
    }
}

impl Conn {
    /// See [`Connections::rekey`].
    pub fn rekey(&self, key: ClientKey) -> bool {
        self.reg.rekey(self.id, key)
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        self.reg.lock().remove(self.id);
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

    fn key(i: u8) -> ConnKey {
        Some(ClientKey(std::net::IpAddr::V4(std::net::Ipv4Addr::new(
            10, 0, 0, i,
        ))))
    }

    fn free(a: Admitted) -> Conn {
        match a {
            Admitted::Free(c) => c,
            _ => panic!("room was free"),
        }
    }

    /// A stored `notify_one` permit completes the next `notified()` at once.
    fn told_to_close(c: &Conn) -> bool {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        rt.block_on(async {
            tokio::time::timeout(std::time::Duration::from_millis(20), c.close.notified())
                .await
                .is_ok()
        })
    }

    #[test]
    fn at_the_cap_the_oldest_idle_connection_makes_room_and_busy_ones_stay() {
        let reg = Connections::new(3, 3);
        let a = free(reg.admit(key(1)));
        let b = free(reg.admit(key(2)));
        let c = free(reg.admit(key(3)));
        let _busy_a = Busy::new(&a.busy);
        // Every address holds one: a is busy, so b (the oldest idle) is told to close.
        let d = match reg.admit(key(4)) {
            Admitted::Evicted { conn, busy: false } => conn,
            _ => panic!("an idle connection should make room"),
        };
        assert_eq!(reg.len(), 3);
        assert!(told_to_close(&b));
        assert!(!told_to_close(&c));
        let _busy_c = Busy::new(&c.busy);
        let _busy_d = Busy::new(&d.busy);
        assert!(matches!(reg.admit(key(5)), Admitted::Full));
        drop(b);
        assert_eq!(reg.len(), 3, "b had already left the registry");
        drop((a, c, d));
        assert!(reg.is_empty());
    }

    #[test]
    fn one_address_holds_at_most_its_share() {
        let reg = Connections::new(100, 2);
        let a = free(reg.admit(key(1)));
        let b = free(reg.admit(key(1)));
        let _busy_a = Busy::new(&a.busy);
        // At its share: its own oldest idle connection (b) makes room…
        let c = match reg.admit(key(1)) {
            Admitted::Evicted { conn, busy: false } => conn,
            _ => panic!("its idle connection should make room"),
        };
        assert!(told_to_close(&b));
        assert!(!told_to_close(&a));
        // …and with both busy, a third is refused; another address is not.
        let _busy_c = Busy::new(&c.busy);
        assert!(matches!(reg.admit(key(1)), Admitted::AddressFull));
        let _other = free(reg.admit(key(2)));
        assert_eq!(reg.len(), 3);
    }

    #[test]
    fn when_full_the_largest_holder_gives_up_a_connection_even_a_busy_one() {
        let reg = Connections::new(6, 3);
        let big: Vec<Conn> = (0..3).map(|_| free(reg.admit(key(1)))).collect();
        let small: Vec<Conn> = [2, 2, 3].iter().map(|i| free(reg.admit(key(*i)))).collect();
        let _busy: Vec<Busy> = big
            .iter()
            .chain(&small)
            .map(|c| Busy::new(&c.busy))
            .collect();
        match reg.admit(key(9)) {
            Admitted::Evicted { busy: true, .. } => {}
            _ => panic!("the largest holder's oldest connection should make room"),
        }
        assert!(told_to_close(&big[0]));
        assert!(!big[1..].iter().chain(&small).any(told_to_close));
    }

    #[test]
    fn a_proxied_connection_counts_under_the_client_its_proxy_names() {
        let reg = Connections::new(10, 2);
        let conns: Vec<Conn> = (0..3).map(|_| free(reg.admit(None))).collect();
        assert!(!conns[0].rekey(key(1).unwrap()));
        assert!(!conns[1].rekey(key(1).unwrap()));
        // A third for the same client closes its oldest other one.
        assert!(conns[2].rekey(key(1).unwrap()));
        assert!(told_to_close(&conns[0]));
        assert_eq!(reg.lock().held_by(key(1)), 2);
    }
}
