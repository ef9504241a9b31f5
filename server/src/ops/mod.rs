//! Operations: latency histograms, failure injection for tests, large
//! bytes kept as file pages (`mapped`), slices of `N` (`slice`).

pub mod failpoint;
pub mod latency;
pub mod mapped;
pub mod refusals;
pub mod slice;
