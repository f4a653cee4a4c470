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
// The RocketMQ 5 gRPC face of the broker (`--grpc-listen`); internal: reached through
// `broker::start`.
#[cfg(feature = "grpc")]
pub(crate) mod grpc;
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
