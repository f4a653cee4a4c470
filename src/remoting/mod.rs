//! The RocketMQ "remoting" wire protocol: pure encoding and decoding, no I/O.
//!
//! baiji speaks this protocol so unmodified RocketMQ clients (rocketmq-client-rust, ali-ons,
//! the Java client) can use it as their broker and name server. Apart from the feature-gated
//! transport glue (`codec`, `client`), this module knows nothing of
//! sockets, async runtimes or the engine: it turns bytes into typed values and back, and is
//! fuzzed in isolation. `docs/rocketmq-remoting.md` is the reference it implements.
//!
//! # Layers
//!
//! | layer | module | what it does |
//! |---|---|---|
//! | frame | [`frame`] | cuts the byte stream into `length | type+headerLen | header | body` |
//! | command | [`command`] | [`RemotingCommand`]: JSON or binary header + body |
//! | header codec | `header_codec` | the JSON (direct scanner, serde fallback) and binary header encodings |
//! | custom header | [`ext`], [`header`] | [`ExtFields`] and typed request/response headers |
//! | bodies | [`body`], [`message`], [`properties`] | JSON bodies, stored-message records, batch bodies, properties |
//! | ids and filters | [`msgid`], [`subscription`] | offset msgIds, UNIQ_KEYs, tag matching |
//! | transport glue | `codec` (feature `broker`) | `tokio_util` codec over the pure functions |
//! | client | `client` (feature `client`) | request/response over TCP, matched by opaque |
//! | tables | [`code`] | request and response codes |
//!
//! # Principles
//!
//! * **Lenient in, strict out.** Clients differ (ali-ons sends raw JSON numbers, omits keys);
//!   decoding accepts every variant seen in the wild. Encoding always writes the complete form
//!   the strictest client (the Rust client's serde derives) requires.
//! * **Fatal vs. answerable.** A [`FrameError`] means the stream is unusable and the connection
//!   must close. A [`HeaderError`] or [`BodyError`] concerns one well-framed request; the
//!   broker answers it with an error code and the error text as remark.
//! * **No panic from peer bytes, no allocation beyond them.** Every length read from the wire is
//!   checked against the bytes that remain before anything is sliced or reserved; bodies and
//!   message payloads are zero-copy [`bytes::Bytes`] views of the read buffer.
//!
//! # Tests
//!
//! One layout, the standard library's: the unit tests of `foo.rs` (or `foo/mod.rs`) are its child
//! module in `foo/tests.rs`; the suites that test the codec as a whole (decoding bounds, fuzzing,
//! client scenarios) are `remoting`'s own, in `tests/`. (`properties.rs` still has its tests
//! inline.)

pub mod body;
#[cfg(feature = "client")]
pub mod client;
pub mod code;
#[cfg(feature = "broker")]
pub mod codec;
pub mod command;
pub mod error;
pub mod ext;
pub mod frame;
pub mod header;
pub mod message;
pub mod msgid;
pub mod properties;
pub mod sql92;
pub mod subscription;

mod header_codec;
mod reader;

#[cfg(test)]
mod tests;

pub use command::{RemotingCommand, BROKER_VERSION};
pub use error::{BodyError, FrameError, HeaderError, MessageError, MsgIdError, RefusedHeader};
pub use ext::{ExtFields, MAX_EXT_FIELDS};
pub use frame::{decode_frame, Frame, MAX_FRAME_LEN, MAX_HEADER_BYTES};
pub use header_codec::{LanguageCode, SerializeType};
