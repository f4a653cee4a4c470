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

/// FNV-1a, 64 bits (offset basis `0xcbf29ce484222325`, prime `0x100000001b3`).
///
/// A key's queue must be the same in every process and after every restart, which `std`'s
/// randomly keyed hasher does not give: the engine's keyed appends and the broker's message
/// groups map a key to a queue with this hash modulo the queue count.
///
/// ```
/// assert_eq!(baiji::hash::fnv1a_64(b""), 0xcbf2_9ce4_8422_2325);
/// assert_eq!(baiji::hash::fnv1a_64(b"a"), 0xaf63_dc4c_8601_ec8c);
/// ```
pub fn fnv1a_64(bytes: &[u8]) -> u64 {
    bytes
        .iter()
        .fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(*b)).wrapping_mul(0x100_0000_01b3))
}
