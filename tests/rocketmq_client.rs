//! Tests that drive baiji with the real Rust RocketMQ client (rocketmq-client-rust 1.0.0).
//!
//! One test target for every real-client test, so the client is compiled and linked once; each
//! concern is a module under `tests/rocketmq_client/` (a crate root's modules resolve next to
//! it, hence the paths).

#[path = "rocketmq_client/cluster.rs"]
mod cluster;
#[path = "rocketmq_client/cluster_support.rs"]
mod cluster_support;
