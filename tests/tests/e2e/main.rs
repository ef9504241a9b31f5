//! The end-to-end suites against the real server binary, one test binary: the server, the
//! gallery fixtures and the test dependencies are compiled and linked once, not once a suite.
//! Each module is one behaviour's suite; `cargo test --workspace --test e2e -- <module>::`
//! runs one of them. Two suites stay binaries of their own: the hostile-client load suites
//! (`hostile_clients`: their latency ratios must not share the machine with another suite's
//! searches) and the hostile-server suite (`hostile`: it measures each CLI run's peak RSS with
//! `wait4`, which counts the test process's own pages in a forked child, so it wants a small one).

mod api;
mod blocks_api;
mod blockstore;
mod browser;
mod ceilings_cli;
mod cli;
mod cut_off;
mod gallery;
mod identity;
mod load;
mod malicious;
mod nothing_to_see;
mod object_store;
mod page_origin;
mod page_truth;
mod photo_decode;
mod pir;
mod restart;
mod scale;
mod shards;
mod strict;
mod template;
mod weight;
