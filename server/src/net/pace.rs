//! Refusals paced per client: a client that keeps asking while refused is answered at a
//! bounded rate, so ignoring `Retry-After` buys it nothing but waiting.
//!
//! A 503 is cheap to compute, but not free: a head parsed, a JSON search body parsed before
//! its admission, a PIR body drained so the refusal is read rather than reset. One address
//! running ten loops that retried every 503 at once made about 2,500 refusals a second on
//! two cores, and the other addresses' light PIR queries took 4–6× (p50) as long as unloaded
//! (issue #63), against about 2× with the same loops waiting 100 ms after each refusal.
//!
//! Each client gets [`PROMPT_PER_SECOND`] refusals a second answered at once; beyond that
//! each refusal is held until its turn, one every 1/[`PROMPT_PER_SECOND`] s, for at most
//! [`MAX_HOLD`]. A client therefore gets at most `PROMPT_PER_SECOND` + its open connections
//! / `MAX_HOLD` refusals a second, whatever it sends; its connections are bounded by its
//! share of the connection cap (`conns`). A client that honours `Retry-After` (the page, the
//! CLI) is never held: its refusals are far apart. What is held is a finished answer, not
//! work: no slot, upload or body budget is kept while it waits.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::client::ClientKey;

/// Refusals a second one client gets answered without delay.
pub const PROMPT_PER_SECOND: u32 = 20;
/// The longest a refusal is held (at most the shortest `Retry-After` a refusal carries).
pub const MAX_HOLD: Duration = Duration::from_secs(1);
/// Clients remembered before the ones whose turn has passed are forgotten.
const SWEEP_AT: usize = 1024;

/// When each recently refused client's next refusal may be answered.
#[derive(Debug, Default)]
pub struct RefusalPace {
    next: Mutex<HashMap<ClientKey, Instant>>,
}

impl RefusalPace {
    /// How long to hold a refusal to `client` made at `now` before sending it.
    ///
    /// A client's turns are spaced 1/[`PROMPT_PER_SECOND`] s apart; a refusal takes the next
    /// free turn, and a turn more than [`MAX_HOLD`] ahead is not taken (the refusal is held
    /// `MAX_HOLD`), so the schedule of a flooding client stays within `MAX_HOLD` of now. Past
    /// a bound, the map keeps only clients whose next turn is ahead: those refused within the
    /// last `MAX_HOLD`.
    pub fn hold(&self, client: ClientKey, now: Instant) -> Duration {
        let interval = Duration::from_secs(1) / PROMPT_PER_SECOND;
        let mut next = self.next.lock().unwrap_or_else(|e| e.into_inner());
        if next.len() >= SWEEP_AT {
            next.retain(|_, t| *t > now);
        }
        let turn = next.entry(client).or_insert(now);
        // Unused turns are not saved up: a quiet client starts from now.
        let at = (*turn).max(now);
        let hold = (at - now).min(MAX_HOLD);
        *turn = (at + interval).min(now + MAX_HOLD);
        hold
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{IpAddr, Ipv4Addr};

    fn key(last: u8) -> ClientKey {
        ClientKey::of(IpAddr::V4(Ipv4Addr::new(127, 0, 0, last)))
    }

    #[test]
    fn a_flood_is_answered_one_turn_at_a_time_and_never_held_past_the_bound() {
        let pace = RefusalPace::default();
        let now = Instant::now();
        let interval = Duration::from_secs(1) / PROMPT_PER_SECOND;
        let holds: Vec<Duration> = (0..100).map(|_| pace.hold(key(1), now)).collect();
        for (i, h) in holds.iter().enumerate() {
            assert_eq!(*h, (interval * i as u32).min(MAX_HOLD), "refusal {i}");
        }
        // Another address is not held behind the first.
        assert_eq!(pace.hold(key(2), now), Duration::ZERO);
    }

    #[test]
    fn a_client_that_waits_between_refusals_is_never_held() {
        let pace = RefusalPace::default();
        let start = Instant::now();
        let interval = Duration::from_secs(1) / PROMPT_PER_SECOND;
        for i in 0..50u32 {
            assert_eq!(pace.hold(key(1), start + interval * i), Duration::ZERO);
        }
        // A burst after a quiet second starts from now, not from saved-up turns.
        let later = start + Duration::from_secs(10);
        assert_eq!(pace.hold(key(1), later), Duration::ZERO);
        assert_eq!(pace.hold(key(1), later), interval);
    }

    #[test]
    fn the_clients_remembered_are_bounded_by_those_with_a_turn_ahead() {
        let pace = RefusalPace::default();
        let now = Instant::now();
        for i in 0..(SWEEP_AT * 3) {
            let ip = IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + i as u32));
            pace.hold(ClientKey::of(ip), now);
        }
        let later = now + Duration::from_secs(2);
        pace.hold(key(1), later);
        assert!(pace.next.lock().unwrap().len() <= SWEEP_AT, "swept");
    }
}
