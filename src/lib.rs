//! baiji: an in-memory message broker transparent to Apache RocketMQ clients, and the
//! lock-free message engine under it.
//!
//! Layers (dependencies point downwards only; see `docs/design.md`):
//!
//! ```text
//!  bin (CLI: broker, namesrv, bench)
//!    └── broker     connections, request processors, long polling, client registry, name server
//!          ├── remoting   frame codec, commands, codes, typed headers, stored-message layout
//!          └── store      the traits the broker sees
//!                └── engine    topics, queue selection, consumer groups, acks, budget
//!                      └── queue     the lock-free doubly-linked queue, nodes, reaper, epochs
//!                            └── sync   std / loom shim
//! ```
//!
//! Most programs want [`engine::Engine`].

#![cfg_attr(docsrs, feature(doc_cfg))]

#[cfg(feature = "bench")]
pub mod bench;
#[cfg(feature = "broker")]
pub mod broker;
pub mod engine;
pub mod hash;
pub mod queue;
pub mod remoting;
pub mod store;
mod sync;

/// The README's Rust examples compile and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
