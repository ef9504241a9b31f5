//! The end-to-end suites against the real server binary, one test binary: the server, the
//! gallery fixtures and the test dependencies are compiled and linked once, not once a suite.
//! Each module is one behaviour's suite; `cargo test --workspace --test e2e -- <module>::`
//! runs one of them. The hostile-client load suite (`hostile_clients`) stays a binary of its own:
//! its latency ratios must not share the machine with another suite's searches.

mod api;
mod blocks_api;
mod blockstore;
mod browser;
mod ceilings_cli;
mod cli;
mod gallery;
mod hostile;
mod identity;
mod load;
mod malicious;
mod object_store;
mod page_origin;
mod page_truth;
mod pir;
mod restart;
mod strict;
mod weight;
