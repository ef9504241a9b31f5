//! Fair admission of expensive work (PIR answers and `POST /search`, one admission for
//! both): the operator's global cap kept, and no client (address) able to take more than its
//! share — in admission count and in service time.
//!
//! Two gates, in the order a request meets them:
//! 1. **Uploads** ([`Admission::begin_upload`]): a client may have at most
//!    [`Shares::uploads`] bodies being received, and each body's bytes are charged to a byte
//!    budget as they arrive ([`Upload::charge`]), so bodies are never buffered beyond it,
//!    whatever number of stalled uploads is open (256 stalled 16 MiB uploads once took
//!    3.2 GB), and a body that has not come holds nothing (a declared length reserved up
//!    front let slow bodies hold the budget for their whole timeout).
//! 2. **Answer slots** ([`Admission::acquire`]): at most `concurrency` answers run at once,
//!    one client at most [`Shares::running`] of them while it is alone, and **one** while
//!    any other client has an answer running or waiting, with at most [`Shares::waiting`] of
//!    its requests queued and [`WAITING_PER_SLOT`] × `concurrency` queued in all, each for up
//!    to [`QUEUE_WAIT`]. A free slot goes to the waiting client with the fewest answers
//!    running (then the longest wait), so one client with many connections gets one turn per
//!    round, not one per connection. A request beyond any bound is refused at once (503 with
//!    `Retry-After`), never queued behind work it could not get.
//!
//! 3. **CPU priority**: a client that asked for more than its share within the last
//!    [`GREEDY_FOR`] (a request queued behind its own running share, or refused for it) runs
//!    its answers at background priority ([`Slot::background`], `net::pools`). One pass per
//!    client shares the cores between the passes running, and a client alone between others'
//!    sparse light queries runs its whole share: a light query beside a hostile address's
//!    heavy passes got a third of the cores (3.3–4.5× its unloaded p50 at 10,000 images on 2
//!    cores). The operating system now gives the cores to foreground answers first, and
//!    background ones take what is left — all of it when nobody else asks, so no work is lost.
//!
//! Why one answer per client under contention: every answer is split across all the cores,
//! so the cores are shared by the answers running, not by the clients. With half the slots,
//! a client running the most expensive answers in a loop held as many passes as every other
//! client together and their light queries took 11× (p50) as long (issue #63). With one pass
//! per client, a light client's answer runs beside at most one pass of each other client,
//! and a hostile address's extra requests wait in its own queue, not in front of others'.
//!
//! The running share is below the global cap whenever the cap is above 1, so a client can
//! always be served at once while another is using its full share.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use super::client::ClientKey;

/// Requests that may wait per answer slot (in all clients).
pub const WAITING_PER_SLOT: usize = 4;
/// How long a waiting request waits for a slot at most.
pub const QUEUE_WAIT: Duration = Duration::from_secs(30);
/// How long a client that asked for more than its share runs its answers in the background.
pub const GREEDY_FOR: Duration = Duration::from_secs(2);

/// Why no slot or upload was given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlotRefusal {
    /// The queue is full.
    QueueFull,
    /// No slot came free within [`QUEUE_WAIT`].
    Timeout,
    /// This client already has its share running, waiting or uploading.
    ClientLimit,
    /// The bytes of bodies in flight would exceed the budget.
    UploadBudget,
}

impl SlotRefusal {
    /// Seconds a client should wait before retrying (`Retry-After`): a queue turns over in
    /// about an answer's time, a client's own share when its own requests finish.
    pub fn retry_after_secs(self) -> u64 {
        match self {
            SlotRefusal::QueueFull | SlotRefusal::UploadBudget => 2,
            SlotRefusal::Timeout => 5,
            SlotRefusal::ClientLimit => 1,
        }
    }
}

/// One client's shares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shares {
    pub running: usize,
    pub waiting: usize,
    pub uploads: usize,
}

impl Shares {
    /// Half the slots (rounded up) running while alone (one while another client is active,
    /// see the module's rules), two waiting, and as many uploads as both.
    pub fn for_concurrency(concurrency: usize) -> Shares {
        let running = concurrency.div_ceil(2).max(1);
        Shares {
            running,
            waiting: 2,
            uploads: running + 2,
        }
    }
}

#[derive(Default)]
struct Client {
    running: usize,
    uploads: usize,
    /// When it was last given a slot (the count of grants then): among clients with as many
    /// answers running, the one served longest ago goes first — round robin.
    last_grant: u64,
    /// Waiting requests: ticket (arrival order) and where to send the slot.
    queue: VecDeque<(u64, oneshot::Sender<Slot>)>,
    /// Until when its answers run in the background (it asked for more than its share).
    greedy_until: Option<Instant>,
}

impl Client {
    fn asked_beyond_share(&mut self) {
        self.greedy_until = Some(Instant::now() + GREEDY_FOR);
    }

    fn greedy(&self) -> bool {
        self.greedy_until.is_some_and(|t| Instant::now() < t)
    }
}

#[derive(Default)]
struct Sched {
    /// Slot numbers not in use (`Slot::index`).
    free: Vec<usize>,
    running: usize,
    waiting: usize,
    upload_bytes: usize,
    next_ticket: u64,
    grants: u64,
    clients: HashMap<ClientKey, Client>,
}

/// The admission state (one per server).
pub struct Admission {
    /// Itself, for the slots handed out from `&self` (a waiter leaving the queue).
    me: std::sync::Weak<Admission>,
    sched: Mutex<Sched>,
    concurrency: usize,
    max_waiting: usize,
    upload_budget: usize,
    shares: Shares,
}

/// An answer slot; dropping it gives the slot to the next waiting client.
pub struct Slot {
    adm: Arc<Admission>,
    client: ClientKey,
    index: usize,
    background: bool,
}

impl Slot {
    /// Which of the `concurrency` slots this is (distinct among slots held at once): the
    /// server runs each slot's answer on a thread pool of its own, so concurrent answers
    /// share the cores by the operating system's scheduler rather than queueing behind one
    /// another in one pool.
    pub fn index(&self) -> usize {
        self.index
    }

    /// Whether this answer runs at background CPU priority (`net::pools`): its client asked
    /// for more than its share within the last [`GREEDY_FOR`] when it was granted, so its
    /// pass yields the cores to other clients' answers.
    pub fn background(&self) -> bool {
        self.background
    }
}

/// An admitted body being received, and the bytes of it charged so far; dropping it
/// returns them to the budget.
pub struct Upload {
    adm: Arc<Admission>,
    client: ClientKey,
    bytes: usize,
}

impl Upload {
    /// Charges `n` more received bytes; refused (nothing charged) beyond the budget.
    pub fn charge(&mut self, n: usize) -> Result<(), SlotRefusal> {
        let mut s = self.adm.lock();
        if s.upload_bytes.saturating_add(n) > self.adm.upload_budget {
            return Err(SlotRefusal::UploadBudget);
        }
        s.upload_bytes += n;
        self.bytes += n;
        Ok(())
    }
}

impl Admission {
    /// `concurrency` answers at once (≥ 1), `upload_budget` bytes of bodies in flight.
    pub fn new(concurrency: usize, upload_budget: usize) -> Arc<Admission> {
        let concurrency = concurrency.max(1);
        Arc::new_cyclic(|me| Admission {
            me: me.clone(),
            sched: Mutex::new(Sched {
                free: (0..concurrency).rev().collect(),
                ..Sched::default()
            }),
            concurrency,
            max_waiting: WAITING_PER_SLOT * concurrency,
            upload_budget,
            shares: Shares::for_concurrency(concurrency),
        })
    }

    pub fn shares(&self) -> Shares {
        self.shares
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Sched> {
        self.sched.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Admits a body before it is read: within the client's share of uploads, and only
    /// while the budget has room for `first` bytes (the least a valid body holds).
    pub fn begin_upload(
        self: &Arc<Self>,
        client: ClientKey,
        first: usize,
    ) -> Result<Upload, SlotRefusal> {
        let mut s = self.lock();
        if s.upload_bytes.saturating_add(first) > self.upload_budget {
            return Err(SlotRefusal::UploadBudget);
        }
        let c = s.clients.entry(client).or_default();
        if c.uploads >= self.shares.uploads {
            c.asked_beyond_share();
            return Err(SlotRefusal::ClientLimit);
        }
        c.uploads += 1;
        Ok(Upload {
            adm: Arc::clone(self),
            client,
            bytes: 0,
        })
    }

    /// An answer slot for `client`: at once if a slot and its share allow, else after
    /// waiting in its queue (see the module's rules).
    pub async fn acquire(self: &Arc<Self>, client: ClientKey) -> Result<Slot, SlotRefusal> {
        let (ticket, rx) = {
            let mut s = self.lock();
            let free = s.running < self.concurrency;
            let (max_waiting, shares) = (self.max_waiting, self.shares);
            let (total_waiting, grants) = (s.waiting, s.grants + 1);
            let others = others_active(&s, client);
            let share = self.running_share(others);
            let c = s.clients.entry(client).or_default();
            // Invariant: while a slot is free no waiter is eligible (grants run at every
            // change of who is active), so a request within its share may take a free slot
            // at once.
            if free && c.running < share {
                c.running += 1;
                c.last_grant = grants;
                let background = c.greedy();
                s.grants = grants;
                s.running += 1;
                let index = s.free.pop().expect("a slot is free");
                return Ok(Slot {
                    adm: Arc::clone(self),
                    client,
                    index,
                    background,
                });
            }
            // Queued or refused behind its own share (not for want of a free slot).
            if c.running >= share {
                c.asked_beyond_share();
            }
            let refusal = if c.queue.len() >= shares.waiting {
                Some(SlotRefusal::ClientLimit)
            } else if total_waiting >= max_waiting {
                Some(SlotRefusal::QueueFull)
            } else {
                None
            };
            if let Some(r) = refusal {
                forget_if_idle(&mut s, client);
                return Err(r);
            }
            let (tx, rx) = oneshot::channel();
            let ticket = s.next_ticket;
            s.next_ticket += 1;
            s.waiting += 1;
            s.clients
                .get_mut(&client)
                .expect("entry made above")
                .queue
                .push_back((ticket, tx));
            (ticket, rx)
        };
        // Leaves the queue if the request is dropped (its client gone) or times out; a slot
        // already sent to it is dropped with the channel, which releases it.
        struct Leave<'a>(&'a Admission, ClientKey, u64);
        impl Drop for Leave<'_> {
            fn drop(&mut self) {
                self.0.leave_queue(self.1, self.2);
            }
        }
        let _leave = Leave(self, client, ticket);
        match tokio::time::timeout(QUEUE_WAIT, rx).await {
            Ok(Ok(slot)) => Ok(slot),
            _ => Err(SlotRefusal::Timeout),
        }
    }

    fn leave_queue(&self, client: ClientKey, ticket: u64) {
        let mut s = self.lock();
        let Some(c) = s.clients.get_mut(&client) else {
            return;
        };
        let before = c.queue.len();
        c.queue.retain(|(t, _)| *t != ticket);
        let left = before - c.queue.len();
        s.waiting -= left;
        forget_if_idle(&mut s, client);
        // A client gone idle may widen another's share.
        let grants = self.dispatch(&mut s);
        drop(s);
        send(grants);
    }

    /// Slots a client may run now: its share alone, one while another client is active.
    fn running_share(&self, others_active: bool) -> usize {
        if others_active {
            1
        } else {
            self.shares.running
        }
    }

    /// A slot came free: hand slots to eligible waiters (outside the lock).
    fn release(self: &Arc<Self>, client: ClientKey, index: usize) {
        let grants = {
            let mut s = self.lock();
            s.running -= 1;
            s.free.push(index);
            if let Some(c) = s.clients.get_mut(&client) {
                c.running -= 1;
            }
            forget_if_idle(&mut s, client);
            self.dispatch(&mut s)
        };
        send(grants);
    }

    /// Gives free slots to eligible waiters: a client within its running share (one while
    /// another is active), fewest running first, then the client served longest ago, then
    /// the oldest request. Run at every change of what is running or waiting.
    fn dispatch(&self, s: &mut Sched) -> Vec<(oneshot::Sender<Slot>, Slot)> {
        let mut grants = Vec::new();
        let Some(adm) = self.me.upgrade() else {
            return grants;
        };
        while s.running < self.concurrency {
            let active = s
                .clients
                .values()
                .filter(|c| c.running > 0 || !c.queue.is_empty())
                .count();
            let share = self.running_share(active > 1);
            let next = s
                .clients
                .iter()
                .filter(|(_, c)| c.running < share)
                .filter_map(|(k, c)| {
                    c.queue
                        .front()
                        .map(|(t, _)| (c.running, c.last_grant, *t, *k))
                })
                .min();
            let Some((_, _, _, k)) = next else { break };
            let grant = s.grants + 1;
            s.grants = grant;
            let c = s.clients.get_mut(&k).expect("found above");
            let (_, tx) = c.queue.pop_front().expect("non-empty");
            let background = c.greedy();
            c.running += 1;
            c.last_grant = grant;
            s.running += 1;
            s.waiting -= 1;
            let index = s.free.pop().expect("a slot is free");
            grants.push((
                tx,
                Slot {
                    adm: Arc::clone(&adm),
                    client: k,
                    index,
                    background,
                },
            ));
        }
        grants
    }

    fn end_upload(&self, client: ClientKey, bytes: usize) {
        let mut s = self.lock();
        s.upload_bytes -= bytes;
        if let Some(c) = s.clients.get_mut(&client) {
            c.uploads -= 1;
        }
        forget_if_idle(&mut s, client);
    }

    /// What is admitted now (`/status`'s `pir_load`).
    pub fn load(&self) -> AdmissionLoad {
        let s = self.lock();
        AdmissionLoad {
            running: s.running,
            waiting: s.waiting,
            upload_bytes: s.upload_bytes,
            clients: s.clients.len(),
        }
    }
}

/// PIR answers running and waiting, bytes of PIR bodies being received, and clients with any
/// of these, at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct AdmissionLoad {
    pub running: usize,
    pub waiting: usize,
    pub upload_bytes: usize,
    pub clients: usize,
}

/// Sends granted slots (outside the lock); a waiter gone meanwhile returns its slot (its
/// `Slot` dropped: released again).
fn send(grants: Vec<(oneshot::Sender<Slot>, Slot)>) {
    for (tx, slot) in grants {
        let _ = tx.send(slot);
    }
}

/// Whether a client other than `client` has an answer running or waiting.
fn others_active(s: &Sched, client: ClientKey) -> bool {
    s.clients
        .iter()
        .any(|(k, c)| *k != client && (c.running > 0 || !c.queue.is_empty()))
}

/// A client with nothing running, waiting or uploading is not kept (the map stays as small as
/// the set of active clients, whatever number of addresses send requests).
fn forget_if_idle(s: &mut Sched, client: ClientKey) {
    if s.clients
        .get(&client)
        .is_some_and(|c| c.running == 0 && c.uploads == 0 && c.queue.is_empty())
    {
        s.clients.remove(&client);
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let adm = Arc::clone(&self.adm);
        adm.release(self.client, self.index);
    }
}

impl Drop for Upload {
    fn drop(&mut self) {
        self.adm.end_upload(self.client, self.bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{IpAddr, Ipv4Addr};

    fn client(i: u8) -> ClientKey {
        ClientKey(IpAddr::V4(Ipv4Addr::new(10, 0, 0, i)))
    }

    async fn settle() {
        for _ in 0..50 {
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test]
    async fn one_client_gets_its_share_and_another_is_served_at_once() {
        let adm = Admission::new(2, 1 << 20);
        let a = client(1);
        let held = adm.acquire(a).await.expect("a free slot");
        // Its share (1 of 2) is running: its next requests wait (2), then are refused.
        let waiters: Vec<_> = (0..2)
            .map(|_| {
                let adm = Arc::clone(&adm);
                tokio::spawn(async move { adm.acquire(a).await.map(drop) })
            })
            .collect();
        settle().await;
        assert_eq!(adm.load().waiting, 2);
        assert_eq!(adm.acquire(a).await.err(), Some(SlotRefusal::ClientLimit));
        // Another client takes the free slot at once, although a's requests are queued.
        let b_slot = adm.acquire(client(2)).await.expect("b's share is free");
        assert_ne!(held.index(), b_slot.index());
        assert!(held.index() < 2 && b_slot.index() < 2);
        drop(held);
        drop(b_slot);
        for w in waiters {
            assert_eq!(w.await.unwrap(), Ok(()));
        }
        assert_eq!(adm.load(), AdmissionLoad::default());
    }

    #[tokio::test]
    async fn a_client_that_asks_beyond_its_share_runs_in_the_background_for_a_while() {
        let queued = |adm: &Arc<Admission>, k| {
            let adm = Arc::clone(adm);
            tokio::spawn(async move { adm.acquire(k).await })
        };
        // Waiting for a free slot (none is) is not asking beyond its share.
        let one = Admission::new(1, 1 << 20);
        let x = one.acquire(client(1)).await.unwrap();
        let y = queued(&one, client(2));
        settle().await;
        drop(x);
        assert!(
            !y.await.unwrap().unwrap().background(),
            "queued for capacity"
        );
        // Alone, a runs its share (2 of 4) in the foreground.
        let adm = Admission::new(4, 1 << 20);
        let a = client(1);
        let a1 = adm.acquire(a).await.unwrap();
        let a2 = adm.acquire(a).await.unwrap();
        assert!(!a1.background() && !a2.background(), "within its share");
        // A third request waits behind its own share: asking beyond it.
        let a3 = queued(&adm, a);
        settle().await;
        drop(a1);
        let a3 = a3.await.unwrap().unwrap();
        assert!(a3.background(), "asked beyond its share");
        // Within GREEDY_FOR, even a pass granted at once runs in the background.
        drop(a2);
        let a4 = adm.acquire(a).await.unwrap();
        assert!(a4.background());
        drop((a3, a4));
    }

    #[tokio::test]
    async fn while_another_client_is_active_a_client_runs_one_answer() {
        let adm = Admission::new(4, 1 << 20);
        let (a, b) = (client(1), client(2));
        // Alone, a runs its share: 2 of 4.
        let a1 = adm.acquire(a).await.unwrap();
        let a2 = adm.acquire(a).await.unwrap();
        assert_eq!(adm.shares().running, 2);
        // b is served at once, beside a's two.
        let b1 = adm.acquire(b).await.unwrap();
        // a's next request waits although a slot is free: b is active.
        let a3 = {
            let adm = Arc::clone(&adm);
            tokio::spawn(async move { adm.acquire(a).await })
        };
        settle().await;
        assert_eq!((adm.load().running, adm.load().waiting), (3, 1));
        // One of a's answers done: a still runs one, so its request still waits.
        drop(a1);
        settle().await;
        assert_eq!((adm.load().running, adm.load().waiting), (2, 1));
        drop(a2);
        let a3 = a3.await.unwrap().expect("a's turn");
        assert_eq!((adm.load().running, adm.load().waiting), (2, 0));
        // b gone idle: a alone again has its whole share, its waiter served at once.
        let a4 = {
            let adm = Arc::clone(&adm);
            tokio::spawn(async move { adm.acquire(a).await })
        };
        settle().await;
        assert_eq!(adm.load().waiting, 1);
        drop(b1);
        let a4 = a4.await.unwrap().expect("alone, a runs its share");
        assert_eq!((adm.load().running, adm.load().waiting), (2, 0));
        drop((a3, a4));
        assert_eq!(adm.load(), AdmissionLoad::default());
    }

    #[tokio::test]
    async fn freed_slots_go_round_robin_over_clients() {
        let adm = Admission::new(1, 1 << 20);
        let first = adm.acquire(client(1)).await.unwrap();
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        // Client 1 queues two requests first, then clients 2 and 3 one each.
        for c in [1, 1, 2, 3] {
            let (adm, order) = (Arc::clone(&adm), Arc::clone(&order));
            tasks.push(tokio::spawn(async move {
                let slot = adm.acquire(client(c)).await.unwrap();
                order.lock().unwrap().push(c);
                settle().await;
                drop(slot);
            }));
            settle().await;
        }
        drop(first);
        for t in tasks {
            t.await.unwrap();
        }
        // Client 1 had the first turn: 2 and 3 go before its queued requests.
        assert_eq!(*order.lock().unwrap(), vec![2, 3, 1, 1]);
    }

    #[tokio::test]
    async fn the_global_queue_is_bounded_and_a_dropped_waiter_leaves_it() {
        let adm = Admission::new(1, 1 << 20);
        let held = adm.acquire(client(0)).await.unwrap();
        let waiters: Vec<_> = (1..=WAITING_PER_SLOT as u8)
            .map(|i| {
                let adm = Arc::clone(&adm);
                tokio::spawn(async move { adm.acquire(client(i)).await.map(drop) })
            })
            .collect();
        settle().await;
        assert_eq!(
            adm.acquire(client(99)).await.err(),
            Some(SlotRefusal::QueueFull)
        );
        waiters[0].abort();
        settle().await;
        assert_eq!(adm.load().waiting, WAITING_PER_SLOT - 1);
        drop(held);
        for w in waiters.into_iter().skip(1) {
            assert_eq!(w.await.unwrap(), Ok(()));
        }
        assert_eq!(adm.load(), AdmissionLoad::default());
    }

    #[tokio::test]
    async fn a_slot_sent_to_a_waiter_that_is_gone_passes_on() {
        let adm = Admission::new(1, 1 << 20);
        let held = adm.acquire(client(1)).await.unwrap();
        let gone = {
            let adm = Arc::clone(&adm);
            tokio::spawn(async move { adm.acquire(client(2)).await.map(drop) })
        };
        settle().await;
        let next = {
            let adm = Arc::clone(&adm);
            tokio::spawn(async move { adm.acquire(client(3)).await.map(drop) })
        };
        settle().await;
        gone.abort();
        drop(held);
        assert_eq!(next.await.unwrap(), Ok(()));
        assert_eq!(adm.load(), AdmissionLoad::default());
    }

    #[test]
    fn uploads_are_bounded_in_bytes_received_and_per_client() {
        let adm = Admission::new(2, 100);
        let shares = adm.shares();
        let mut a: Vec<_> = (0..shares.uploads)
            .map(|_| adm.begin_upload(client(1), 10).unwrap())
            .collect();
        assert_eq!(
            adm.begin_upload(client(1), 10).err(),
            Some(SlotRefusal::ClientLimit)
        );
        // Admitted bodies hold nothing until their bytes come.
        assert_eq!(adm.load().upload_bytes, 0);
        for u in &mut a {
            u.charge(10).unwrap();
        }
        assert_eq!(adm.load().upload_bytes, 10 * shares.uploads);
        let mut big = adm.begin_upload(client(2), 1).unwrap();
        big.charge(100 - 10 * shares.uploads).unwrap();
        assert_eq!(big.charge(1).err(), Some(SlotRefusal::UploadBudget));
        assert_eq!(
            adm.begin_upload(client(3), 1).err(),
            Some(SlotRefusal::UploadBudget)
        );
        drop(big);
        drop(a);
        assert_eq!(adm.load(), AdmissionLoad::default());
    }
}
