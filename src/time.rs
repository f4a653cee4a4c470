//! The wall clock every layer stamps with: store timestamps in the engine, message and topic
//! times in the broker. A utility below the engine, so the broker reads the clock without
//! naming the engine (design.md: the broker sees the store traits only).

use std::time::{SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch (0 if the clock is before it). Avoids `as_millis`'s
/// 128-bit arithmetic: this runs on every append.
pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() * 1000 + u64::from(d.subsec_millis()))
}
