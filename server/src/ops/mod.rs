//! Operations: progress lines and bars, latency histograms, failure injection for tests.

pub mod failpoint;
pub mod latency;
pub mod progress;
pub mod refusals;
