//! Hashes shared by layers that must not depend on each other.

/// Java's `String.hashCode` over UTF-16 code units, with 32-bit wrap-around.
///
/// RocketMQ identifies a message's tag by this hash (the "tags code") and filters on it, so the
/// engine stores it in every node and the broker computes it the same way for subscriptions.
///
/// ```
/// assert_eq!(baiji::hash::java_string_hash("TagA"), 2598919);
/// assert_eq!(baiji::hash::java_string_hash(""), 0);
/// ```
pub fn java_string_hash(s: &str) -> i32 {
    s.encode_utf16().fold(0i32, |h, c| h.wrapping_mul(31).wrapping_add(i32::from(c)))
}
