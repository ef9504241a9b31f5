//! What the server refused or cut off to protect itself (timeouts, caps, shed load): counted
//! for `/api/v1/status`, and logged as at most one summary line per [`LOG_EVERY`] — an attack
//! that makes the server refuse a million requests must not also make it write a million log
//! lines (one 503 used to be logged twice at ERROR: 32.5 MB of log in nine minutes).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// At most one summary line this often.
pub const LOG_EVERY: Duration = Duration::from_secs(10);

/// One kind of refusal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// A new connection closed at once: the connection cap was reached and no idle
    /// connection could be closed for it.
    ConnectionCap,
    /// A new connection closed at once: its address already held its share, all busy.
    AddressCap,
    /// An idle connection (no request in progress) closed to admit a new one.
    Evicted,
    /// A busy connection of the address holding the most closed to admit a new one.
    EvictedBusy,
    /// `accept` failed (e.g. out of file descriptors); the listener pauses briefly.
    AcceptError,
    /// A request head not received within the header timeout (also idle keep-alive).
    HeaderTimeout,
    /// A request body not received within the body timeout: 408.
    BodyTimeout,
    /// A request not answered within the request timeout: 408.
    RequestTimeout,
    /// A response that could not be written (the client stopped reading).
    WriteStalled,
    /// A response cut because the client read it slower than the minimum rate.
    SlowReader,
    /// A request body that came slower than the minimum rate: 408.
    SlowBody,
    /// A URI or a header section over the limits: 414 / 431.
    HeadTooLarge,
    /// PIR: the queue was full, or no slot came free in time: 503.
    Busy,
    /// PIR: one client's share of the answer slots, queue or uploads was used up: 503.
    ClientLimit,
    /// PIR: the memory budget for request bodies in flight was used up: 503.
    UploadBudget,
    /// Other request bodies: the budget for bodies in flight, or the client's share of it,
    /// was used up: 503.
    BodyBudget,
    /// `POST /search`: the queue was full, or no slot came free in time: 503.
    SearchBusy,
    /// `POST /search`: the client's share of the search slots or queue was used up: 503.
    SearchClientLimit,
}

const KINDS: usize = 18;

impl Refusal {
    const ALL: [Refusal; KINDS] = [
        Refusal::ConnectionCap,
        Refusal::AddressCap,
        Refusal::Evicted,
        Refusal::EvictedBusy,
        Refusal::AcceptError,
        Refusal::HeaderTimeout,
        Refusal::BodyTimeout,
        Refusal::RequestTimeout,
        Refusal::WriteStalled,
        Refusal::SlowReader,
        Refusal::SlowBody,
        Refusal::HeadTooLarge,
        Refusal::Busy,
        Refusal::ClientLimit,
        Refusal::UploadBudget,
        Refusal::BodyBudget,
        Refusal::SearchBusy,
        Refusal::SearchClientLimit,
    ];

    fn name(self) -> &'static str {
        match self {
            Refusal::ConnectionCap => "connection_cap",
            Refusal::AddressCap => "address_cap",
            Refusal::Evicted => "evicted_idle",
            Refusal::EvictedBusy => "evicted_busy",
            Refusal::AcceptError => "accept_errors",
            Refusal::HeaderTimeout => "header_timeouts",
            Refusal::BodyTimeout => "body_timeouts",
            Refusal::RequestTimeout => "request_timeouts",
            Refusal::WriteStalled => "write_stalled",
            Refusal::SlowReader => "slow_readers",
            Refusal::SlowBody => "slow_bodies",
            Refusal::HeadTooLarge => "head_too_large",
            Refusal::Busy => "pir_busy",
            Refusal::ClientLimit => "pir_client_limit",
            Refusal::UploadBudget => "pir_upload_budget",
            Refusal::BodyBudget => "body_budget",
            Refusal::SearchBusy => "search_busy",
            Refusal::SearchClientLimit => "search_client_limit",
        }
    }
}

/// The counters (since start) and the log throttle.
#[derive(Debug)]
pub struct Refusals {
    total: [AtomicU64; KINDS],
    /// Counts since the last summary line, and when it was written.
    pending: Mutex<([u64; KINDS], Option<Instant>)>,
}

impl Default for Refusals {
    fn default() -> Self {
        Refusals {
            total: std::array::from_fn(|_| AtomicU64::new(0)),
            pending: Mutex::new(([0; KINDS], None)),
        }
    }
}

/// The `refusals` object of `GET /api/v1/status`: counts since start, by kind.
pub type RefusalStatus = std::collections::BTreeMap<String, u64>;

impl Refusals {
    pub fn record(&self, r: Refusal) {
        self.total[r as usize].fetch_add(1, Ordering::Relaxed);
        let mut p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        p.0[r as usize] += 1;
        let now = Instant::now();
        if p.1.is_some_and(|t| now.duration_since(t) < LOG_EVERY) {
            return;
        }
        let summary: Vec<String> = Refusal::ALL
            .iter()
            .filter(|k| p.0[**k as usize] > 0)
            .map(|k| format!("{} {}", p.0[*k as usize], k.name()))
            .collect();
        tracing::warn!(
            "refused or cut off since the last such line: {} (at most one line per {} s; totals in /api/v1/status)",
            summary.join(", "),
            LOG_EVERY.as_secs()
        );
        *p = ([0; KINDS], Some(now));
    }

    pub fn get(&self, r: Refusal) -> u64 {
        self.total[r as usize].load(Ordering::Relaxed)
    }

    pub fn status(&self) -> RefusalStatus {
        Refusal::ALL
            .iter()
            .map(|k| (k.name().to_string(), self.get(*k)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_refusal_is_counted_under_its_own_name() {
        let r = Refusals::default();
        for (i, k) in Refusal::ALL.iter().enumerate() {
            for _ in 0..=i {
                r.record(*k);
            }
        }
        let s = r.status();
        assert_eq!(s.len(), KINDS);
        for (i, k) in Refusal::ALL.iter().enumerate() {
            assert_eq!(s[k.name()], i as u64 + 1, "{}", k.name());
            assert_eq!(Refusal::ALL[*k as usize], *k);
        }
    }
}
