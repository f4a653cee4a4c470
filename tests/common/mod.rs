//! Helpers the in-process harnesses share (`broker_raw`, `rocketmq_client`, `grpc_clients`,
//! `bench_grpc`), each `#[path]`-including this folder as `common`. The seeded engine tests
//! include `rng.rs` alone.

#![allow(dead_code)] // each harness uses what it needs

pub(crate) mod broker;
pub(crate) mod child;
pub(crate) mod names;
pub(crate) mod raw;
pub(crate) mod sync;
pub(crate) mod wait;
