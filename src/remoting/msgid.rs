//! Message ids.
//!
//! * **Offset msgId** — what the broker returns as `msgId` in a SEND response and clients call
//!   "offsetMsgId": upper-case hex of the store host's address, its port as an i32 and the
//!   commit-log offset as an i64. 32 hex digits for IPv4 (4 + 4 + 8 bytes), 56 for IPv6
//!   (16 + 4 + 8). Clients decode it to find the broker and offset for `VIEW_MESSAGE_BY_ID`.
//! * **UNIQ_KEY** — the client-generated id in the `UNIQ_KEY` property (clients report it as the
//!   message id): 32 upper-case hex digits of client IPv4 (4), low 16 bits of the pid (2), a
//!   per-process random or class-loader hash (4), milliseconds since a start time (4; Java uses
//!   the start of the current month) and a counter (2). The broker adds one when a 5.x-style
//!   sender left it out; clients treat it as opaque.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use crate::remoting::error::MsgIdError;

/// Hex digits of an offset msgId with an IPv4 store host.
pub const OFFSET_MSG_ID_V4_LEN: usize = 32;
/// Hex digits of an offset msgId with an IPv6 store host.
pub const OFFSET_MSG_ID_V6_LEN: usize = 56;
/// Hex digits of a UNIQ_KEY.
pub const UNIQ_KEY_LEN: usize = 32;

const HEX_UPPER: &[u8; 16] = b"0123456789ABCDEF";

fn push_hex(out: &mut String, bytes: &[u8]) {
    for &b in bytes {
        out.push(char::from(HEX_UPPER[usize::from(b >> 4)]));
        out.push(char::from(HEX_UPPER[usize::from(b & 0x0f)]));
    }
}

/// The broker address and commit-log offset an offset msgId encodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct OffsetMsgId {
    /// Store host of the broker that holds the message.
    pub store_host: SocketAddr,
    /// Commit-log offset of the message on that broker.
    pub commit_log_offset: i64,
}

/// Offset msgId for a message stored at `commit_log_offset` on `store_host`.
///
/// # Examples
///
/// ```
/// use baiji::remoting::msgid::{decode_offset_msg_id, encode_offset_msg_id};
///
/// let host = "127.0.0.1:10911".parse()?;
/// let id = encode_offset_msg_id(host, 4096);
/// assert_eq!(id, "7F00000100002A9F0000000000001000");
/// assert_eq!(decode_offset_msg_id(&id)?.commit_log_offset, 4096);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[must_use]
pub fn encode_offset_msg_id(store_host: SocketAddr, commit_log_offset: i64) -> String {
    let mut out = String::with_capacity(OFFSET_MSG_ID_V6_LEN);
    match store_host.ip() {
        IpAddr::V4(ip) => push_hex(&mut out, &ip.octets()),
        IpAddr::V6(ip) => push_hex(&mut out, &ip.octets()),
    }
    push_hex(&mut out, &i32::from(store_host.port()).to_be_bytes());
    push_hex(&mut out, &commit_log_offset.to_be_bytes());
    out
}

fn hex_value(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

/// Decodes hex digits (either case) into `out`, which must be half as long as `hex`.
fn decode_hex(hex: &[u8], out: &mut [u8]) -> Result<(), MsgIdError> {
    for (i, (pair, byte)) in hex.chunks_exact(2).zip(out.iter_mut()).enumerate() {
        let [hi, lo] = pair else {
            return Err(MsgIdError::BadLength(hex.len()));
        };
        let hi = hex_value(*hi).ok_or(MsgIdError::BadHex(2 * i))?;
        let lo = hex_value(*lo).ok_or(MsgIdError::BadHex(2 * i + 1))?;
        *byte = (hi << 4) | lo;
    }
    Ok(())
}

/// Decodes an offset msgId (32 or 56 hex digits, either letter case).
///
/// # Errors
///
/// [`MsgIdError::BadLength`] for any other length, [`MsgIdError::BadHex`] for a non-hex
/// character, [`MsgIdError::InvalidPort`] if the port is outside 0..=65535.
pub fn decode_offset_msg_id(msg_id: &str) -> Result<OffsetMsgId, MsgIdError> {
    let hex = msg_id.as_bytes();
    let mut raw = [0u8; OFFSET_MSG_ID_V6_LEN / 2];
    let ip_len = match hex.len() {
        OFFSET_MSG_ID_V4_LEN => 4,
        OFFSET_MSG_ID_V6_LEN => 16,
        other => return Err(MsgIdError::BadLength(other)),
    };
    let raw = raw.get_mut(..hex.len() / 2).ok_or(MsgIdError::BadLength(hex.len()))?;
    decode_hex(hex, raw)?;
    let (ip_bytes, rest) = raw.split_at(ip_len);
    let (port_bytes, offset_bytes) = rest.split_at(4);
    let ip = match <[u8; 4]>::try_from(ip_bytes) {
        Ok(v4) => IpAddr::V4(Ipv4Addr::from(v4)),
        Err(_) => IpAddr::V6(Ipv6Addr::from(
            <[u8; 16]>::try_from(ip_bytes).map_err(|_| MsgIdError::BadLength(hex.len()))?,
        )),
    };
    let port = i32::from_be_bytes(
        <[u8; 4]>::try_from(port_bytes).map_err(|_| MsgIdError::BadLength(hex.len()))?,
    );
    let offset = i64::from_be_bytes(
        <[u8; 8]>::try_from(offset_bytes).map_err(|_| MsgIdError::BadLength(hex.len()))?,
    );
    let port = u16::try_from(port).map_err(|_| MsgIdError::InvalidPort(port))?;
    Ok(OffsetMsgId { store_host: SocketAddr::new(ip, port), commit_log_offset: offset })
}

/// Formats a UNIQ_KEY from its fixed 10-byte prefix (ip, pid, instance), the elapsed
/// milliseconds and the counter.
#[must_use]
pub fn format_uniq_key(prefix: &[u8; 10], elapsed_millis: u32, counter: u16) -> String {
    let mut out = String::with_capacity(UNIQ_KEY_LEN);
    push_hex(&mut out, prefix);
    push_hex(&mut out, &elapsed_millis.to_be_bytes());
    push_hex(&mut out, &counter.to_be_bytes());
    out
}

/// Generates UNIQ_KEYs for messages that arrive without one.
///
/// The caller owns it (no global state) and supplies the clock, so it is deterministic under
/// test. Two ids collide only if the same generator produces them within the same millisecond
/// after 65 536 other ids, or different generators share ip, pid and instance.
#[derive(Debug, Clone)]
pub struct UniqKeyGenerator {
    prefix: [u8; 10],
    start_millis: i64,
    counter: u16,
}

impl UniqKeyGenerator {
    /// A generator for host `ip`, process `pid` (low 16 bits used) and a per-instance
    /// discriminator (random, or a hash of something unique), counting time from `start_millis`.
    #[must_use]
    pub fn new(ip: Ipv4Addr, pid: u32, instance: u32, start_millis: i64) -> Self {
        let mut prefix = [0u8; 10];
        let [pid_hi, pid_lo] = (pid as u16).to_be_bytes();
        let parts = ip.octets().into_iter().chain([pid_hi, pid_lo]).chain(instance.to_be_bytes());
        for (slot, byte) in prefix.iter_mut().zip(parts) {
            *slot = byte;
        }
        Self { prefix, start_millis, counter: 0 }
    }

    /// The next id at wall-clock time `now_millis`. The elapsed time is truncated to 32 bits, as
    /// Java's `(int)` cast does.
    pub fn next_key(&mut self, now_millis: i64) -> String {
        // Deliberate truncation: only the low 32 bits of the elapsed time are carried.
        let elapsed = now_millis.wrapping_sub(self.start_millis) as u32;
        let counter = self.counter;
        self.counter = self.counter.wrapping_add(1);
        format_uniq_key(&self.prefix, elapsed, counter)
    }
}

#[cfg(test)]
mod tests;
