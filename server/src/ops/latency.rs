//! A lock-free latency histogram: 10 µs buckets up to 100 ms (the last bucket takes the rest),
//! enough to read p50/p99 of the search handler under load without slowing it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use shared::api::LatencySummary;

const BUCKET_US: u64 = 10;
const BUCKETS: usize = 10_000;

pub struct Histogram {
    buckets: Vec<AtomicU64>,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            buckets: (0..BUCKETS).map(|_| AtomicU64::new(0)).collect(),
        }
    }
}

impl Histogram {
    pub fn record(&self, d: Duration) {
        let b = ((d.as_micros() as u64) / BUCKET_US).min(BUCKETS as u64 - 1) as usize;
        self.buckets[b].fetch_add(1, Ordering::Relaxed);
    }

    /// Upper edges of the buckets holding the 50th and 99th percentiles.
    pub fn summary(&self) -> LatencySummary {
        let counts: Vec<u64> = self
            .buckets
            .iter()
            .map(|b| b.load(Ordering::Relaxed))
            .collect();
        let total: u64 = counts.iter().sum();
        let quantile = |q: f64| {
            let target = (q * total as f64).ceil().max(1.0) as u64;
            let mut acc = 0;
            for (i, c) in counts.iter().enumerate() {
                acc += c;
                if acc >= target {
                    return (i as u64 + 1) * BUCKET_US;
                }
            }
            0
        };
        LatencySummary {
            count: total,
            p50_us: if total == 0 { 0 } else { quantile(0.5) },
            p99_us: if total == 0 { 0 } else { quantile(0.99) },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_of_a_known_sample() {
        let h = Histogram::default();
        for us in 1..=1000u64 {
            h.record(Duration::from_micros(us));
        }
        let s = h.summary();
        assert_eq!(s.count, 1000);
        assert_eq!(s.p50_us, 510); // the 500th sample (500 µs) lies in bucket [500, 510)
        assert_eq!(s.p99_us, 1000);
        assert_eq!(Histogram::default().summary(), LatencySummary::default());
    }
}
