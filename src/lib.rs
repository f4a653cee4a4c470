//! baiji: an in-memory message broker transparent to Apache RocketMQ clients, and the
//! lock-free message engine under it.
//!
//! Layers (dependencies point downwards only; see `docs/design.md`):
//!
//! ```text
//!  bin (src/bin/baiji: broker, namesrv, bench, top)
//!    ├── bench, top       the load generator and the live cluster view
//!    └── broker           composition root (broker/mod.rs): builds the core, starts the faces
//!          ├── broker::remoting   face: connections, the code table, one processor file per
//!          │                      RocketMQ request family, name server, registrar, the ACL's
//!          │                      code rules, the TLS gate
//!          ├── broker::grpc       face: MessagingService for the RocketMQ 5 SDKs: sessions,
//!          │                      receipts, renewals, Telemetry (neither face imports the other)
//!          ├── broker::security   what both faces' security needs: accounts, signatures, the
//!          │                      certificate store, file reloads
//!          └── broker::core       protocol-free: topics, groups, clients, locks, sends, pops,
//!                │                transactions, timers, delay levels, retries, counters; core
//!                │                error enums each face maps to its own codes
//!                ├── remoting     frame codec, commands, codes, typed headers, stored-message
//!                │                layout, message properties (no I/O)
//!                └── store        the traits the core sees
//!                      └── engine    topics, queue selection, consumer groups, acks, budget
//!                            └── queue     the lock-free doubly-linked queue, nodes, reaper
//!                                  └── sync   std / loom shim
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
// The lock-free queue is internal: its references are tied to epoch guards, not to the queue,
// so safe code outside the engine could misuse it into a use after free (review 2.4). Its
// items stay `pub` for the loom models, which reach them through `__private` under `cfg(loom)`.
#[allow(unreachable_pub)]
pub(crate) mod queue;
pub mod remoting;
// Shared-memory segments (issue 26): the log of checksummed records the engine keeps its state
// in across restarts.
pub mod shm;
pub mod store;
mod sync;
mod time;
#[cfg(feature = "client")]
pub mod top;

/// Internals for `loom-tests/` only (built with `--cfg loom`); not part of the API.
#[cfg(loom)]
#[doc(hidden)]
pub mod __private {
    pub use crate::queue::{NodeRef, Queue, Reclaimer, WaitState, Wakeup, NODE_SIZE};
}

/// `baiji::queue` is not public (review 2.4):
///
/// ```compile_fail
/// use baiji::queue::Queue;
/// ```
#[cfg(doctest)]
struct QueueIsPrivate;

/// The README's Rust examples compile and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
