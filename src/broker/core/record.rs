//! What the broker stores per message, and how it turns that back into RocketMQ's
//! stored-message layout on the way out.
//!
//! The store keeps one compact record per message: the fields a pull must return that the
//! queue does not already know (flag, sys flag, born time and host, reconsume count, body CRC),
//! the body and the properties. Topic, queue id, queue offset, store time and store host are
//! known at read time and are not stored again, so a retained 128-byte message costs about
//! 40 bytes plus its properties on top of the body.
//!
//! ```text
//!  0  flag            i32        16  reconsume_times  i32
//!  4  sys_flag        i32        20  body_crc         i32
//!  8  born_timestamp  i64        24  host kind u8 (4 | 16), ip, port i32
//!  .. body_len u32, body, props_len u16, properties
//! ```
//!
//! A commit-log offset (what clients put in offset msgIds, `VIEW_MESSAGE_BY_ID` and
//! `CONSUMER_SEND_MSG_BACK`) is `topic uid << 46 | queue << 36 | queue offset`: positive, and
//! resolvable back to the message without an index. The store keeps it from ever naming
//! another topic's message: uids of deleted topics are reused only with the new topic's
//! offsets starting after the old one's, and offsets stop below 2^36 (`TopicStore::uid`).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use bytes::{Buf, BufMut, Bytes, BytesMut};

use crate::remoting::message::{body_crc, encode_record, StoredRecord};
use crate::remoting::properties::{self, MAX_PROPERTIES_LEN};
use crate::remoting::MessageError;
use crate::store::{StoreError, MAX_ID_OFFSET, MAX_TOPIC_UID};

#[cfg(test)]
mod id_tests;

const QUEUE_SHIFT: u32 = 36;
const TOPIC_SHIFT: u32 = 46;
const OFFSET_MASK: u64 = (1 << QUEUE_SHIFT) - 1;
const QUEUE_MASK: u64 = (1 << (TOPIC_SHIFT - QUEUE_SHIFT)) - 1;
const TOPIC_MASK: u64 = (1 << (63 - TOPIC_SHIFT)) - 1;

// The store keeps uids and offsets within these bits (`TopicStore::uid`), so ids never alias.
const _: () = assert!(TOPIC_MASK == MAX_TOPIC_UID as u64 && OFFSET_MASK == MAX_ID_OFFSET);

/// The commit-log offset of `(topic uid, queue, offset)`; -1, which names no message, if a
/// part does not fit its bits (never for what the store hands out).
pub(crate) fn physical_offset(topic_uid: u32, queue: u32, offset: u64) -> i64 {
    if u64::from(topic_uid) > TOPIC_MASK || u64::from(queue) > QUEUE_MASK || offset > OFFSET_MASK {
        return -1;
    }
    let v = (u64::from(topic_uid) & TOPIC_MASK) << TOPIC_SHIFT
        | (u64::from(queue) & QUEUE_MASK) << QUEUE_SHIFT
        | (offset & OFFSET_MASK);
    v as i64
}

/// The inverse of [`physical_offset`]; `None` for a negative offset.
pub(crate) fn split_physical_offset(phys: i64) -> Option<(u32, u32, u64)> {
    let v = u64::try_from(phys).ok()?;
    Some((
        ((v >> TOPIC_SHIFT) & TOPIC_MASK) as u32,
        ((v >> QUEUE_SHIFT) & QUEUE_MASK) as u32,
        v & OFFSET_MASK,
    ))
}

/// The fields of a message as a producer sent it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct NewRecord<'a> {
    pub(crate) flag: i32,
    pub(crate) sys_flag: i32,
    pub(crate) born_timestamp: i64,
    pub(crate) born_host: SocketAddr,
    pub(crate) reconsume_times: i32,
    pub(crate) body: &'a [u8],
    pub(crate) properties: &'a [u8],
}

/// Longest body a record accepts. Frames are at most 16 MiB, so this is never reached from the
/// wire; it keeps every length of the written-out layout within its `i32` field.
const MAX_RECORD_BODY: usize = 1 << 30;

/// Why a record cannot be stored: it could not be written out to a consumer afterwards.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum RecordError {
    /// The properties, with what the broker adds, exceed the 16-bit length of the layout.
    #[error(
        "the message properties size {len} exceeds the maximum {max} bytes once the broker's \
         own properties are added (UNIQ_KEY, retry and delay properties, CLUSTER on delivery)"
    )]
    PropertiesTooLong {
        /// Length the properties would have when written out.
        len: usize,
        /// [`MAX_PROPERTIES_LEN`].
        max: usize,
    },
    /// The body is longer than a record can hold.
    #[error("the message body size {0} exceeds what a stored record can hold")]
    BodyTooLong(usize),
}

/// Encodes a record for the store, refusing one that could not be written out again: its
/// properties, made canonical, plus `read_extra` bytes added at read time (the broker's
/// `CLUSTER`) must fit [`MAX_PROPERTIES_LEN`]. Checking the *final* record here, where every
/// path (send, batch, retry, schedule) builds it, is what keeps a poison record out of the
/// queues.
///
/// Every record is built here, so this is also where properties become canonical: a last pair
/// written without its 0x02 (Java 4.9.1–5.1.4) gets one, and everything later appended to the
/// stored string (`CLUSTER` on the way out) starts a pair of its own.
///
/// # Errors
/// [`RecordError`] if the record would not fit the stored-message layout.
pub(crate) fn encode(r: &NewRecord<'_>, read_extra: usize) -> Result<Bytes, RecordError> {
    let terminate = properties::needs_separator(r.properties);
    let props_len = r.properties.len() + usize::from(terminate);
    let written = props_len + read_extra;
    if written > MAX_PROPERTIES_LEN {
        return Err(RecordError::PropertiesTooLong { len: written, max: MAX_PROPERTIES_LEN });
    }
    let stored_props_len = u16::try_from(props_len)
        .map_err(|_| RecordError::PropertiesTooLong { len: props_len, max: MAX_PROPERTIES_LEN })?;
    let body_len = u32::try_from(r.body.len())
        .ok()
        .filter(|_| r.body.len() <= MAX_RECORD_BODY)
        .ok_or(RecordError::BodyTooLong(r.body.len()))?;
    let host_len = if r.born_host.is_ipv4() { 4 } else { 16 };
    let mut b = BytesMut::with_capacity(24 + 1 + host_len + 4 + 4 + r.body.len() + 2 + props_len);
    b.put_i32(r.flag);
    b.put_i32(r.sys_flag);
    b.put_i64(r.born_timestamp);
    b.put_i32(r.reconsume_times);
    b.put_i32(body_crc(r.body));
    match r.born_host.ip() {
        IpAddr::V4(ip) => {
            b.put_u8(4);
            b.put_slice(&ip.octets());
        }
        IpAddr::V6(ip) => {
            b.put_u8(16);
            b.put_slice(&ip.octets());
        }
    }
    b.put_i32(i32::from(r.born_host.port()));
    b.put_u32(body_len);
    b.put_slice(r.body);
    b.put_u16(stored_props_len);
    b.put_slice(r.properties);
    if terminate {
        b.put_u8(properties::PROPERTY_SEPARATOR);
    }
    Ok(b.freeze())
}

/// Why storing a message failed: the record is illegal, or the store refused it.
#[derive(Debug)]
pub(crate) enum PutError {
    /// The record could not be written out again (answered with `MESSAGE_ILLEGAL`).
    Record(RecordError),
    /// The store refused it.
    Store(StoreError),
}

impl From<RecordError> for PutError {
    fn from(e: RecordError) -> Self {
        Self::Record(e)
    }
}

impl From<StoreError> for PutError {
    fn from(e: StoreError) -> Self {
        Self::Store(e)
    }
}

/// A stored record, decoded (body and properties borrow from it).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Decoded<'a> {
    pub(crate) flag: i32,
    pub(crate) sys_flag: i32,
    pub(crate) born_timestamp: i64,
    pub(crate) reconsume_times: i32,
    pub(crate) born_host: SocketAddr,
    pub(crate) body: &'a [u8],
    pub(crate) properties: &'a [u8],
}

/// Decodes a stored record; `None` if it is malformed (never for what [`encode`] wrote).
pub(crate) fn decode(record: &[u8]) -> Option<Decoded<'_>> {
    let mut b = record;
    if b.remaining() < 25 {
        return None;
    }
    let flag = b.get_i32();
    let sys_flag = b.get_i32();
    let born_timestamp = b.get_i64();
    let reconsume_times = b.get_i32();
    let _crc = b.get_i32();
    let kind = b.get_u8();
    let ip = match kind {
        4 if b.remaining() >= 4 => {
            let mut o = [0u8; 4];
            b.copy_to_slice(&mut o);
            IpAddr::V4(Ipv4Addr::from(o))
        }
        16 if b.remaining() >= 16 => {
            let mut o = [0u8; 16];
            b.copy_to_slice(&mut o);
            IpAddr::V6(Ipv6Addr::from(o))
        }
        _ => return None,
    };
    if b.remaining() < 8 {
        return None;
    }
    let port = b.get_i32();
    let body_len = b.get_u32() as usize;
    if b.remaining() < body_len + 2 {
        return None;
    }
    let (body, rest) = b.split_at(body_len);
    let mut rest = rest;
    let props_len = rest.get_u16() as usize;
    let properties = rest.get(..props_len)?;
    Some(Decoded {
        flag,
        sys_flag,
        born_timestamp,
        reconsume_times,
        born_host: SocketAddr::new(ip, u16::try_from(port).unwrap_or(0)),
        body,
        properties,
    })
}

/// Where a record sits, for writing it out.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Placement<'a> {
    pub(crate) topic: &'a str,
    pub(crate) topic_uid: u32,
    pub(crate) queue: u32,
    pub(crate) offset: u64,
    pub(crate) store_timestamp: u64,
    pub(crate) store_host: SocketAddr,
}

/// Appends the RocketMQ stored-message layout of `record` to `out` (a pull body, a view, a
/// query answer). `extra_properties` are appended to the stored ones (the broker adds
/// `CLUSTER`). Returns the bytes written; `Ok(0)` for a malformed record (skipped).
pub(crate) fn write_out(
    record: &[u8],
    at: &Placement<'_>,
    extra_properties: &[u8],
    out: &mut BytesMut,
) -> Result<usize, MessageError> {
    write_out_redelivered(record, at, extra_properties, 0, out)
}

/// [`write_out`] of a message delivered again: its reconsume count is the stored one plus
/// `redeliveries` (POP redelivers from the same queue instead of copying into a retry topic).
pub(crate) fn write_out_redelivered(
    record: &[u8],
    at: &Placement<'_>,
    extra_properties: &[u8],
    redeliveries: i32,
    out: &mut BytesMut,
) -> Result<usize, MessageError> {
    let Some(d) = decode(record) else { return Ok(0) };
    // Keep the CLUSTER addition only when it fits the 32767-byte properties limit.
    let extra = if d.properties.len() + extra_properties.len() <= i16::MAX as usize {
        extra_properties
    } else {
        &[]
    };
    encode_record(
        &StoredRecord {
            queue_id: at.queue as i32,
            flag: d.flag,
            queue_offset: at.offset as i64,
            physical_offset: physical_offset(at.topic_uid, at.queue, at.offset),
            sys_flag: d.sys_flag,
            born_timestamp: d.born_timestamp,
            born_host: d.born_host,
            store_timestamp: at.store_timestamp as i64,
            store_host: at.store_host,
            reconsume_times: d.reconsume_times.saturating_add(redeliveries),
            prepared_tx_offset: 0,
            body: d.body,
            topic: at.topic,
            properties: d.properties,
            extra_properties: extra,
        },
        out,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::remoting::message::decode_records;

    #[test]
    fn given_offsets_when_packing_physical_offsets_should_round_trip_and_stay_positive() {
        for (t, q, o) in [(1, 0, 0), (131_071, 1023, (1 << 36) - 1), (7, 3, 123_456)] {
            let p = physical_offset(t, q, o);
            assert!(p >= 0, "commit-log offsets are positive");
            assert_eq!(split_physical_offset(p), Some((t, q, o)));
        }
        assert_eq!(split_physical_offset(-1), None);
    }

    #[test]
    fn given_record_when_written_out_should_decode_as_a_rocketmq_stored_message() {
        let host: SocketAddr = "10.1.2.3:4567".parse().unwrap();
        let store_host: SocketAddr = "127.0.0.1:10911".parse().unwrap();
        let props = b"TAGS\x01A\x02UNIQ_KEY\x01ABC\x02";
        let r = encode(
            &NewRecord {
                flag: 7,
                sys_flag: 0,
                born_timestamp: 1_700_000_000_000,
                born_host: host,
                reconsume_times: 2,
                body: b"hello",
                properties: props,
            },
            0,
        )
        .unwrap();
        let mut out = BytesMut::new();
        let at = Placement {
            topic: "T",
            topic_uid: 3,
            queue: 1,
            offset: 42,
            store_timestamp: 1_700_000_000_001,
            store_host,
        };
        write_out(&r, &at, b"CLUSTER\x01C\x02", &mut out).unwrap();
        let msgs = decode_records(&out.freeze()).unwrap();
        let m = &msgs[0];
        assert_eq!((m.queue_id, m.queue_offset, m.flag, m.reconsume_times), (1, 42, 7, 2));
        assert_eq!((m.born_host, m.store_host), (host, store_host));
        assert_eq!(&m.body[..], b"hello");
        assert_eq!(split_physical_offset(m.physical_offset), Some((3, 1, 42)));
        assert_eq!(&m.properties[..], &b"TAGS\x01A\x02UNIQ_KEY\x01ABC\x02CLUSTER\x01C\x02"[..]);
        assert!(m.body_crc_matches());
    }

    #[test]
    fn given_properties_that_only_fit_without_the_read_time_additions_when_encoding_should_refuse()
    {
        fn rec(props: &[u8]) -> NewRecord<'_> {
            NewRecord {
                flag: 0,
                sys_flag: 0,
                born_timestamp: 0,
                born_host: "127.0.0.1:1".parse().unwrap(),
                reconsume_times: 0,
                body: b"b",
                properties: props,
            }
        }
        let cluster = b"CLUSTER\x01DefaultCluster\x02".len();
        let fits = vec![b'x'; MAX_PROPERTIES_LEN - cluster - 1];
        assert!(encode(&rec(&fits), cluster).is_ok(), "room for a separator and CLUSTER");
        let over = vec![b'x'; MAX_PROPERTIES_LEN - cluster];
        assert_eq!(
            encode(&rec(&over), cluster),
            Err(RecordError::PropertiesTooLong {
                len: MAX_PROPERTIES_LEN + 1,
                max: MAX_PROPERTIES_LEN
            }),
            "the separator put in before CLUSTER counts"
        );
        let mut ends_with_separator = over.clone();
        ends_with_separator[MAX_PROPERTIES_LEN - cluster - 1] = properties::PROPERTY_SEPARATOR;
        assert!(encode(&rec(&ends_with_separator), cluster).is_ok(), "no separator needed");
        assert!(encode(&rec(&vec![b'x'; 70_000]), 0).is_err(), "never a silently cut length");
    }

    #[test]
    fn given_java_properties_without_trailing_separator_when_stored_should_be_canonical() {
        let r = encode(
            &NewRecord {
                flag: 0,
                sys_flag: 0,
                born_timestamp: 0,
                born_host: "10.1.2.3:4567".parse().unwrap(),
                reconsume_times: 0,
                body: b"b",
                properties: b"UNIQ_KEY\x01ABC\x02TAGS\x01TagA",
            },
            0,
        )
        .unwrap();
        assert_eq!(decode(&r).unwrap().properties, b"UNIQ_KEY\x01ABC\x02TAGS\x01TagA\x02");
        let mut out = BytesMut::new();
        let at = Placement {
            topic: "T",
            topic_uid: 1,
            queue: 0,
            offset: 0,
            store_timestamp: 1,
            store_host: "127.0.0.1:10911".parse().unwrap(),
        };
        write_out(&r, &at, b"CLUSTER\x01C\x02", &mut out).unwrap();
        let m = &decode_records(&out.freeze()).unwrap()[0];
        assert_eq!(&m.properties[..], &b"UNIQ_KEY\x01ABC\x02TAGS\x01TagA\x02CLUSTER\x01C\x02"[..]);
    }

    #[test]
    fn given_truncated_record_when_decoding_should_return_none() {
        let r = encode(
            &NewRecord {
                flag: 0,
                sys_flag: 0,
                born_timestamp: 0,
                born_host: "[::1]:1".parse().unwrap(),
                reconsume_times: 0,
                body: b"abc",
                properties: b"",
            },
            0,
        )
        .unwrap();
        for cut in 0..r.len() - 1 {
            assert!(decode(&r[..cut]).is_none() || cut >= r.len() - 2, "cut at {cut}");
        }
        assert!(decode(&r).is_some());
    }
}
