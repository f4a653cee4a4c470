//! Stored-message records (what a pull body is made of) and batch bodies (what a batch send
//! carries).
//!
//! # Stored record (Java `MessageDecoder`), big-endian
//!
//! | field | size |
//! |---|---|
//! | TOTALSIZE | 4, whole record |
//! | MAGICCODE | 4, [`MAGIC_V1`] (1-byte topic length) or [`MAGIC_V2`] (2-byte) |
//! | BODYCRC | 4, CRC32 of the body `& 0x7FFFFFFF` |
//! | QUEUEID, FLAG | 4 + 4 |
//! | QUEUEOFFSET, PHYSICALOFFSET | 8 + 8 |
//! | SYSFLAG | 4 ([`sys_flag`]) |
//! | BORNTIMESTAMP | 8 |
//! | BORNHOST | 8 (IPv4 + port i32) or 20 (IPv6, sys flag 0x10) |
//! | STORETIMESTAMP | 8 |
//! | STOREHOST | 8 or 20 (IPv6, sys flag 0x20) |
//! | RECONSUMETIMES | 4 |
//! | PREPARED_TX_OFFSET | 8 |
//! | BODY | 4 + n |
//! | TOPIC | 1 + n (V1) or 2 + n (V2) |
//! | PROPERTIES | 2 + n |
//!
//! A pull body is records back to back. The broker stores each message already encoded, so a
//! pull is a concatenation of stored slices; only the properties the broker adds at read time
//! (such as `CLUSTER`) are appended by [`encode_record`] through
//! [`StoredRecord::extra_properties`].
//!
//! # Batch body
//!
//! `TOTALSIZE i32 | MAGICCODE i32 (0) | BODYCRC i32 (0) | FLAG i32 | BODYLEN i32 | BODY |
//! PROPLEN i16 | PROPERTIES`, repeated. Like Java, [`decode_batch`] trusts the inner lengths and
//! only reports TOTALSIZE; every length is still checked against the bytes that remain.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::ops::Range;

use bytes::{BufMut, Bytes, BytesMut};

use crate::remoting::error::MessageError;
use crate::remoting::msgid::encode_offset_msg_id;
use crate::remoting::properties::MAX_PROPERTIES_LEN;
use crate::remoting::reader::Reader;

/// Magic code of a record whose topic length is one byte.
pub const MAGIC_V1: i32 = 0xDAA3_20A7_u32 as i32;
/// Magic code of a record whose topic length is two bytes.
pub const MAGIC_V2: i32 = 0xDAA3_20AB_u32 as i32;
/// Longest topic written with [`MAGIC_V1`]. Java 4.x decoders read the length byte as signed,
/// so Java 5.x switches to V2 above 127 bytes; baiji does the same.
pub const MAX_TOPIC_LEN_V1: usize = 127;
/// Longest topic a record can hold at all (two-byte length, read as signed by Java).
pub const MAX_TOPIC_LEN: usize = i16::MAX as usize;

/// Message system flag bits (`MessageSysFlag`).
pub mod sys_flag {
    /// The body is compressed (zlib unless a 5.x compression type is set).
    pub const COMPRESSED: i32 = 0x1;
    /// Multiple tags (never set by clients).
    pub const MULTI_TAGS: i32 = 0x2;
    /// Transaction type mask: 0 = not transactional.
    pub const TRANSACTION_TYPE_MASK: i32 = 0xC;
    /// Transactional half message.
    pub const TRANSACTION_PREPARED: i32 = 0x4;
    /// Transaction committed.
    pub const TRANSACTION_COMMIT: i32 = 0x8;
    /// Transaction rolled back.
    pub const TRANSACTION_ROLLBACK: i32 = 0xC;
    /// The born host is IPv6 (20 bytes in the record).
    pub const BORNHOST_V6: i32 = 0x10;
    /// The store host is IPv6 (20 bytes in the record).
    pub const STOREHOST_V6: i32 = 0x20;
    /// The client must unwrap the body.
    pub const NEED_UNWRAP: i32 = 0x40;
    /// The body is an inner batch the client unwraps.
    pub const INNER_BATCH: i32 = 0x80;
    /// 5.x compression type (bits 8–10): 1 LZ4, 2 ZSTD, 3 ZLIB, 0 legacy ZLIB.
    pub const COMPRESSION_TYPE_MASK: i32 = 0x700;
}

/// Size of the fixed fields before BORNHOST.
const FIXED_BEFORE_BORN_HOST: usize = 4 + 4 + 4 + 4 + 4 + 8 + 8 + 4 + 8;

fn host_len(addr: &SocketAddr) -> usize {
    match addr {
        SocketAddr::V4(_) => 8,
        SocketAddr::V6(_) => 20,
    }
}

/// One message to be written as a stored record, from borrowed parts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoredRecord<'a> {
    /// Queue of the topic the message is in.
    pub queue_id: i32,
    /// User flag from the send header, stored as is.
    pub flag: i32,
    /// Logical offset in the queue.
    pub queue_offset: i64,
    /// Commit-log offset (unique per broker; encoded into the offset msgId).
    pub physical_offset: i64,
    /// System flags; the IPv6 host bits are set or cleared from the address kinds.
    pub sys_flag: i32,
    /// Producer time, milliseconds.
    pub born_timestamp: i64,
    /// Producer address.
    pub born_host: SocketAddr,
    /// Broker time, milliseconds.
    pub store_timestamp: i64,
    /// Broker address clients can reach (it ends up in the offset msgId).
    pub store_host: SocketAddr,
    /// Deliveries so far.
    pub reconsume_times: i32,
    /// Transaction offset, 0 for ordinary messages.
    pub prepared_tx_offset: i64,
    /// The body as sent (possibly compressed; see [`sys_flag::COMPRESSED`]).
    pub body: &'a [u8],
    /// Topic name.
    pub topic: &'a str,
    /// The stored properties string, with or without the 0x02 after its last pair; it is
    /// written in canonical form (with it).
    pub properties: &'a [u8],
    /// Properties appended at read time (for example `CLUSTER`), written after `properties`
    /// under the same length prefix. Canonical pairs (each ending in 0x02).
    pub extra_properties: &'a [u8],
}

impl StoredRecord<'_> {
    /// Properties are written in canonical form: a last pair without its 0x02 gets one (see
    /// [`properties::needs_separator`](crate::remoting::properties::needs_separator)), except
    /// for a string alone at exactly the 32767-byte limit, which is written as sent (whole,
    /// still parsable) rather than refused.
    fn terminates_properties(&self) -> bool {
        crate::remoting::properties::needs_separator(self.properties)
            && (self.properties.len() < MAX_PROPERTIES_LEN || !self.extra_properties.is_empty())
    }

    fn properties_len(&self) -> usize {
        self.properties.len()
            + usize::from(self.terminates_properties())
            + self.extra_properties.len()
    }

    /// Bytes the record takes when encoded.
    ///
    /// # Errors
    ///
    /// As for [`encode_record`].
    pub fn encoded_len(&self) -> Result<usize, MessageError> {
        self.layout().map(|l| l.total)
    }

    fn layout(&self) -> Result<Layout, MessageError> {
        let topic_len = self.topic.len();
        let wide_topic = match topic_len {
            0..=MAX_TOPIC_LEN_V1 => false,
            n if n <= MAX_TOPIC_LEN => true,
            n => return Err(MessageError::TopicTooLong { len: n, max: MAX_TOPIC_LEN }),
        };
        let props_len = self.properties_len();
        if props_len > MAX_PROPERTIES_LEN {
            return Err(MessageError::PropertiesTooLong {
                len: props_len,
                max: MAX_PROPERTIES_LEN,
            });
        }
        let total = FIXED_BEFORE_BORN_HOST
            + host_len(&self.born_host)
            + 8
            + host_len(&self.store_host)
            + 4
            + 8
            + 4
            + self.body.len()
            + if wide_topic { 2 } else { 1 }
            + topic_len
            + 2
            + props_len;
        if i32::try_from(total).is_err() {
            return Err(MessageError::BodyTooLong(self.body.len()));
        }
        Ok(Layout { total, wide_topic })
    }

    /// The offset msgId of this record (store host + physical offset).
    #[must_use]
    pub fn offset_msg_id(&self) -> String {
        encode_offset_msg_id(self.store_host, self.physical_offset)
    }
}

struct Layout {
    total: usize,
    wide_topic: bool,
}

fn put_host(dst: &mut BytesMut, addr: &SocketAddr) {
    match addr.ip() {
        IpAddr::V4(ip) => dst.put_slice(&ip.octets()),
        IpAddr::V6(ip) => dst.put_slice(&ip.octets()),
    }
    dst.put_i32(i32::from(addr.port()));
}

/// CRC32 (IEEE) of a body with the sign bit cleared, as RocketMQ stores it.
#[must_use]
pub fn body_crc(body: &[u8]) -> i32 {
    // Masking with 0x7FFF_FFFF makes the value fit an i32 exactly.
    (crc32fast::hash(body) & 0x7FFF_FFFF) as i32
}

/// Appends one stored record to `dst` and returns its length.
///
/// Computes BODYCRC and TOTALSIZE, uses [`MAGIC_V1`] unless the topic is longer than
/// [`MAX_TOPIC_LEN_V1`], and sets the IPv6 sys-flag bits from the address kinds.
///
/// # Errors
///
/// [`MessageError::TopicTooLong`] beyond [`MAX_TOPIC_LEN`] bytes,
/// [`MessageError::PropertiesTooLong`] if properties plus extra properties exceed 32767 bytes,
/// [`MessageError::BodyTooLong`] if the record would exceed 2 GiB. Nothing is written on error.
pub fn encode_record(record: &StoredRecord<'_>, dst: &mut BytesMut) -> Result<usize, MessageError> {
    let layout = record.layout()?;
    let mut sys_flag = record.sys_flag & !(sys_flag::BORNHOST_V6 | sys_flag::STOREHOST_V6);
    if record.born_host.is_ipv6() {
        sys_flag |= sys_flag::BORNHOST_V6;
    }
    if record.store_host.is_ipv6() {
        sys_flag |= sys_flag::STOREHOST_V6;
    }
    // `layout` proved every length below fits its field.
    let total = i32::try_from(layout.total).unwrap_or(i32::MAX);
    let body_len = i32::try_from(record.body.len()).unwrap_or(i32::MAX);
    let props_len = i16::try_from(record.properties_len()).unwrap_or(i16::MAX);

    dst.reserve(layout.total);
    dst.put_i32(total);
    dst.put_i32(if layout.wide_topic { MAGIC_V2 } else { MAGIC_V1 });
    dst.put_i32(body_crc(record.body));
    dst.put_i32(record.queue_id);
    dst.put_i32(record.flag);
    dst.put_i64(record.queue_offset);
    dst.put_i64(record.physical_offset);
    dst.put_i32(sys_flag);
    dst.put_i64(record.born_timestamp);
    put_host(dst, &record.born_host);
    dst.put_i64(record.store_timestamp);
    put_host(dst, &record.store_host);
    dst.put_i32(record.reconsume_times);
    dst.put_i64(record.prepared_tx_offset);
    dst.put_i32(body_len);
    dst.put_slice(record.body);
    if layout.wide_topic {
        dst.put_i16(i16::try_from(record.topic.len()).unwrap_or(i16::MAX));
    } else {
        dst.put_u8(u8::try_from(record.topic.len()).unwrap_or(u8::MAX));
    }
    dst.put_slice(record.topic.as_bytes());
    dst.put_i16(props_len);
    dst.put_slice(record.properties);
    if record.terminates_properties() {
        dst.put_u8(crate::remoting::properties::PROPERTY_SEPARATOR);
    }
    dst.put_slice(record.extra_properties);
    Ok(layout.total)
}

/// One record read back from a pull body or stored buffer; body and properties share the
/// input's memory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodedMessage {
    /// TOTALSIZE.
    pub total_size: i32,
    /// MAGICCODE ([`MAGIC_V1`] or [`MAGIC_V2`]).
    pub magic: i32,
    /// BODYCRC as stored.
    pub body_crc: i32,
    /// Queue id.
    pub queue_id: i32,
    /// User flag.
    pub flag: i32,
    /// Queue offset.
    pub queue_offset: i64,
    /// Commit-log offset.
    pub physical_offset: i64,
    /// System flags.
    pub sys_flag: i32,
    /// Producer time.
    pub born_timestamp: i64,
    /// Producer address.
    pub born_host: SocketAddr,
    /// Broker time.
    pub store_timestamp: i64,
    /// Broker address.
    pub store_host: SocketAddr,
    /// Deliveries so far.
    pub reconsume_times: i32,
    /// Transaction offset.
    pub prepared_tx_offset: i64,
    /// Body bytes.
    pub body: Bytes,
    /// Topic.
    pub topic: String,
    /// Properties string (see [`properties`](crate::remoting::properties)).
    pub properties: Bytes,
}

impl DecodedMessage {
    /// Whether the stored BODYCRC matches the body.
    #[must_use]
    pub fn body_crc_matches(&self) -> bool {
        body_crc(&self.body) == self.body_crc
    }

    /// The offset msgId of this message.
    #[must_use]
    pub fn offset_msg_id(&self) -> String {
        encode_offset_msg_id(self.store_host, self.physical_offset)
    }
}

fn need<T>(
    value: Option<T>,
    field: &'static str,
    needed: usize,
    r: &Reader<'_>,
) -> Result<T, MessageError> {
    value.ok_or(MessageError::Truncated { field, needed, remaining: r.remaining() })
}

fn read_host(
    r: &mut Reader<'_>,
    v6: bool,
    field: &'static str,
) -> Result<SocketAddr, MessageError> {
    let ip = if v6 {
        IpAddr::V6(Ipv6Addr::from(need(r.array::<16>(), field, 16, r)?))
    } else {
        IpAddr::V4(Ipv4Addr::from(need(r.array::<4>(), field, 4, r)?))
    };
    let port = need(r.i32(), field, 4, r)?;
    let port = u16::try_from(port).map_err(|_| MessageError::InvalidPort(port))?;
    Ok(SocketAddr::new(ip, port))
}

fn read_len(
    r: &mut Reader<'_>,
    raw: Option<i64>,
    field: &'static str,
    width: usize,
) -> Result<usize, MessageError> {
    let len = need(raw, field, width, r)?;
    usize::try_from(len).map_err(|_| MessageError::NegativeLength { field, len })
}

fn read_block(
    r: &mut Reader<'_>,
    len: usize,
    field: &'static str,
) -> Result<Range<usize>, MessageError> {
    let remaining = r.remaining();
    r.take_range(len).ok_or(MessageError::Truncated { field, needed: len, remaining })
}

/// Decodes the record starting at the reader's position.
fn decode_one(src: &Bytes, r: &mut Reader<'_>) -> Result<DecodedMessage, MessageError> {
    let start = r.position();
    let total_size = need(r.i32(), "TOTALSIZE", 4, r)?;
    let magic = need(r.i32(), "MAGICCODE", 4, r)?;
    let wide_topic = match magic {
        MAGIC_V1 => false,
        MAGIC_V2 => true,
        other => return Err(MessageError::UnknownMagic(other)),
    };
    let body_crc = need(r.i32(), "BODYCRC", 4, r)?;
    let queue_id = need(r.i32(), "QUEUEID", 4, r)?;
    let flag = need(r.i32(), "FLAG", 4, r)?;
    let queue_offset = need(r.i64(), "QUEUEOFFSET", 8, r)?;
    let physical_offset = need(r.i64(), "PHYSICALOFFSET", 8, r)?;
    let sys_flag = need(r.i32(), "SYSFLAG", 4, r)?;
    let born_timestamp = need(r.i64(), "BORNTIMESTAMP", 8, r)?;
    let born_host = read_host(r, sys_flag & sys_flag::BORNHOST_V6 != 0, "BORNHOST")?;
    let store_timestamp = need(r.i64(), "STORETIMESTAMP", 8, r)?;
    let store_host = read_host(r, sys_flag & sys_flag::STOREHOST_V6 != 0, "STOREHOST")?;
    let reconsume_times = need(r.i32(), "RECONSUMETIMES", 4, r)?;
    let prepared_tx_offset = need(r.i64(), "PREPARED_TX_OFFSET", 8, r)?;
    let raw = r.i32().map(i64::from);
    let body_len = read_len(r, raw, "BODY length", 4)?;
    let body = read_block(r, body_len, "BODY")?;
    let topic_len = if wide_topic {
        let raw = r.i16().map(i64::from);
        read_len(r, raw, "TOPIC length", 2)?
    } else {
        usize::from(need(r.u8(), "TOPIC length", 1, r)?)
    };
    let topic = read_block(r, topic_len, "TOPIC")?;
    let raw = r.i16().map(i64::from);
    let props_len = read_len(r, raw, "PROPERTIES length", 2)?;
    let properties = read_block(r, props_len, "PROPERTIES")?;

    let actual = r.position() - start;
    if i64::from(total_size) != actual as i64 {
        return Err(MessageError::SizeMismatch { declared: i64::from(total_size), actual });
    }
    let topic = std::str::from_utf8(src.get(topic).unwrap_or_default())
        .map_err(|_| MessageError::InvalidUtf8("topic"))?
        .to_owned();
    Ok(DecodedMessage {
        total_size,
        magic,
        body_crc,
        queue_id,
        flag,
        queue_offset,
        physical_offset,
        sys_flag,
        born_timestamp,
        born_host,
        store_timestamp,
        store_host,
        reconsume_times,
        prepared_tx_offset,
        body: src.slice(body),
        topic,
        properties: src.slice(properties),
    })
}

/// Iterator over the records of a buffer; yields an error once and then stops at the first
/// malformed record, as clients do.
#[derive(Debug, Clone)]
pub struct RecordIter<'a> {
    src: &'a Bytes,
    pos: usize,
    failed: bool,
}

impl Iterator for RecordIter<'_> {
    type Item = Result<DecodedMessage, MessageError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.pos >= self.src.len() {
            return None;
        }
        let rest = self.src.get(self.pos..).unwrap_or_default();
        let mut r = Reader::new(rest);
        let base = self.src.slice(self.pos..);
        let result = decode_one(&base, &mut r);
        match &result {
            Ok(_) => self.pos += r.position(),
            Err(_) => self.failed = true,
        }
        Some(result)
    }
}

/// Iterates the records of `src` lazily.
#[must_use]
pub fn records(src: &Bytes) -> RecordIter<'_> {
    RecordIter { src, pos: 0, failed: false }
}

/// Decodes every record of a pull body or stored buffer.
///
/// # Errors
///
/// The first [`MessageError`] met; records before it are discarded.
pub fn decode_records(src: &Bytes) -> Result<Vec<DecodedMessage>, MessageError> {
    records(src).collect()
}

/// One message of a batch body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchEntry {
    /// TOTALSIZE as the client wrote it (not checked, like Java).
    pub total_size: i32,
    /// BODYCRC as the client wrote it (clients write 0).
    pub body_crc: i32,
    /// User flag.
    pub flag: i32,
    /// Body bytes, a view of the request body.
    pub body: Bytes,
    /// This message's own properties string, a view of the request body.
    pub properties: Bytes,
}

impl BatchEntry {
    /// The properties as text.
    ///
    /// # Errors
    ///
    /// [`MessageError::InvalidUtf8`] if they are not UTF-8.
    pub fn properties_str(&self) -> Result<&str, MessageError> {
        std::str::from_utf8(&self.properties).map_err(|_| MessageError::InvalidUtf8("properties"))
    }
}

fn decode_batch_one(src: &Bytes, r: &mut Reader<'_>) -> Result<BatchEntry, MessageError> {
    let total_size = need(r.i32(), "TOTALSIZE", 4, r)?;
    let _magic = need(r.i32(), "MAGICCODE", 4, r)?;
    let body_crc = need(r.i32(), "BODYCRC", 4, r)?;
    let flag = need(r.i32(), "FLAG", 4, r)?;
    let raw = r.i32().map(i64::from);
    let body_len = read_len(r, raw, "BODY length", 4)?;
    let body = read_block(r, body_len, "BODY")?;
    let raw = r.i16().map(i64::from);
    let props_len = read_len(r, raw, "PROPERTIES length", 2)?;
    let properties = read_block(r, props_len, "PROPERTIES")?;
    Ok(BatchEntry {
        total_size,
        body_crc,
        flag,
        body: src.slice(body),
        properties: src.slice(properties),
    })
}

/// Decodes a `SEND_BATCH_MESSAGE` body into its messages.
///
/// # Errors
///
/// [`MessageError::Truncated`] or [`MessageError::NegativeLength`] at the first bad record.
pub fn decode_batch(src: &Bytes) -> Result<Vec<BatchEntry>, MessageError> {
    let mut r = Reader::new(src);
    let mut entries = Vec::new();
    while r.remaining() > 0 {
        entries.push(decode_batch_one(src, &mut r)?);
    }
    Ok(entries)
}

/// Appends one batch record (what a client's batch encoder writes), for tests and for the
/// broker's own batch sends.
///
/// # Errors
///
/// [`MessageError::PropertiesTooLong`] or [`MessageError::BodyTooLong`] if a length does not fit.
pub fn encode_batch_entry(
    dst: &mut BytesMut,
    flag: i32,
    body: &[u8],
    properties: &[u8],
) -> Result<(), MessageError> {
    let props_len = i16::try_from(properties.len()).map_err(|_| {
        MessageError::PropertiesTooLong { len: properties.len(), max: MAX_PROPERTIES_LEN }
    })?;
    let total = 4 + 4 + 4 + 4 + 4 + body.len() + 2 + properties.len();
    let total_i32 = i32::try_from(total).map_err(|_| MessageError::BodyTooLong(body.len()))?;
    let body_len = i32::try_from(body.len()).map_err(|_| MessageError::BodyTooLong(body.len()))?;
    dst.reserve(total);
    dst.put_i32(total_i32);
    dst.put_i32(0);
    dst.put_i32(0);
    dst.put_i32(flag);
    dst.put_i32(body_len);
    dst.put_slice(body);
    dst.put_i16(props_len);
    dst.put_slice(properties);
    Ok(())
}

#[cfg(test)]
mod tests;
