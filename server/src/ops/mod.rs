//! Operations: latency histograms, failure injection for tests, large
//! bytes kept as file pages (`mapped`).

pub mod failpoint;
pub mod latency;
pub mod mapped;
pub mod refusals;
