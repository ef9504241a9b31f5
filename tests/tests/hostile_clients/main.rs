//! The server under hostile clients, one test binary kept apart from the other suites, so the
//! latency and fairness it measures are the server's, not another suite's load: connections
//! held open, half-sent heads and bodies, one client hammering PIR (`connections`); and clients
//! each on their own loopback address, no single address holding the server (`addresses`).

mod addresses;
mod connections;
