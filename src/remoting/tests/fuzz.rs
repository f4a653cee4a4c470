//! Property tests: nothing derived from peer bytes may panic or over-allocate, and every
//! encoder's output decodes back to its input.
//!
//! Case counts are kept small enough for the whole file to run in a few seconds in a debug build.

use std::net::SocketAddr;

use bytes::{BufMut, Bytes, BytesMut};
use proptest::collection::vec;
use proptest::prelude::*;

use crate::remoting::code::request_code;
use crate::remoting::ext::ExtFields;
use crate::remoting::frame::{decode_frame, RESERVE_CHUNK};
use crate::remoting::header::{FromExtFields, SendHeaderVersion, SendMessageRequestHeader};
use crate::remoting::header_codec::{binary, json};
use crate::remoting::message::{
    decode_batch, decode_records, encode_batch_entry, encode_record, StoredRecord,
};
use crate::remoting::msgid::{decode_offset_msg_id, encode_offset_msg_id};
use crate::remoting::properties;
use crate::remoting::{LanguageCode, RemotingCommand, SerializeType};

fn config() -> ProptestConfig {
    ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() }
}

/// Bytes that are either fully random or start with a plausible frame prefix, so the fuzzer
/// reaches the header decoders and not only the length checks.
fn frame_like_bytes() -> impl Strategy<Value = Vec<u8>> {
    let random = vec(any::<u8>(), 0..512);
    let prefixed = (0i32..600, 0u8..3, 0i32..600, vec(any::<u8>(), 0..600)).prop_map(
        |(length, kind, header_len, rest)| {
            let mut b = Vec::with_capacity(8 + rest.len());
            b.extend_from_slice(&length.to_be_bytes());
            b.extend_from_slice(&((i32::from(kind) << 24) | header_len).to_be_bytes());
            b.extend_from_slice(&rest);
            b
        },
    );
    let json = (0i32..400, vec(any::<u8>(), 0..64)).prop_map(|(pad, tail)| {
        let header = br#"{"code":10,"opaque":1,"extFields":{"a":"x","e":0}}"#;
        let mut b = Vec::new();
        b.extend_from_slice(&(4 + header.len() as i32 + pad).to_be_bytes());
        b.extend_from_slice(&(header.len() as i32).to_be_bytes());
        b.extend_from_slice(header);
        b.extend_from_slice(&tail);
        b
    });
    prop_oneof![random, prefixed, json]
}

/// Decodes commands until the buffer needs more bytes or fails; returns how many decoded.
fn drain(buf: &mut BytesMut) -> usize {
    let mut n = 0;
    while let Ok(Some(cmd)) = RemotingCommand::decode(buf) {
        n += 1;
        // Exercise the typed decoders on whatever arrived; errors are fine, panics are not.
        if let Some(version) = SendHeaderVersion::for_request_code(cmd.code) {
            let _ = SendMessageRequestHeader::decode(&cmd.ext_fields, version);
        }
        let _ = SendMessageRequestHeader::from_ext_fields(&cmd.ext_fields);
        let _ = decode_batch(&cmd.body);
        let _ = decode_records(&cmd.body);
    }
    n
}

fn send_command(serialize_type: SerializeType) -> RemotingCommand {
    let header = SendMessageRequestHeader {
        producer_group: "PG",
        topic: "TopicTest",
        default_topic: "TBW102",
        default_topic_queue_nums: 4,
        queue_id: 1,
        sys_flag: 0,
        born_timestamp: 1_700_000_000_000,
        flag: 0,
        properties: "TAGS\u{1}TagA\u{2}UNIQ_KEY\u{1}ABC\u{2}",
        reconsume_times: 0,
        unit_mode: false,
        max_reconsume_times: None,
        batch: true,
        broker_name: None,
    };
    let mut ext = ExtFields::new();
    header.write_ext_fields_as(&mut ext, SendHeaderVersion::V2);
    let mut body = BytesMut::new();
    let _ = encode_batch_entry(&mut body, 0, b"one", b"UNIQ_KEY\x01A\x02");
    let _ = encode_batch_entry(&mut body, 0, b"two", b"");
    RemotingCommand {
        code: request_code::SEND_BATCH_MESSAGE,
        language: LanguageCode::Java,
        version: 475,
        opaque: 9,
        flag: 0,
        remark: None,
        ext_fields: ext,
        serialize_type,
        body: body.freeze(),
    }
}

#[derive(Debug, Clone)]
enum Mutation {
    Flip(usize, u8),
    Insert(usize, u8),
    Delete(usize),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), 1u8..=255).prop_map(|(i, b)| Mutation::Flip(i, b)),
        (any::<usize>(), any::<u8>()).prop_map(|(i, b)| Mutation::Insert(i, b)),
        any::<usize>().prop_map(Mutation::Delete),
    ]
}

fn mutate(bytes: &mut Vec<u8>, mutations: &[Mutation]) {
    for m in mutations {
        let len = bytes.len();
        match *m {
            Mutation::Flip(i, b) if len > 0 => {
                if let Some(byte) = bytes.get_mut(i % len) {
                    *byte ^= b;
                }
            }
            Mutation::Insert(i, b) => bytes.insert(i % (len + 1), b),
            Mutation::Delete(i) if len > 0 => {
                bytes.remove(i % len);
            }
            _ => {}
        }
    }
}

fn socket_addr() -> impl Strategy<Value = SocketAddr> {
    prop_oneof![
        (any::<[u8; 4]>(), any::<u16>()).prop_map(|(ip, port)| SocketAddr::from((ip, port))),
        (any::<[u8; 16]>(), any::<u16>()).prop_map(|(ip, port)| SocketAddr::from((ip, port))),
    ]
}

/// Keys and values for properties: any text without the two separator characters.
fn prop_text() -> impl Strategy<Value = String> {
    "[^\u{1}\u{2}]{1,12}"
}

proptest! {
    #![proptest_config(config())]

    /// (a) One decode call over arbitrary bytes: no panic, and the buffer never grows beyond
    /// what arrived plus one reserve chunk (doubling included), whatever length was announced.
    #[test]
    fn given_arbitrary_bytes_when_decoding_frames_should_not_panic_or_overreserve(bytes in frame_like_bytes()) {
        let mut buf = BytesMut::from(&bytes[..]);
        let arrived = buf.len();
        let result = decode_frame(&mut buf);
        prop_assert!(
            buf.capacity() <= 2 * arrived + RESERVE_CHUNK,
            "capacity {} after {} bytes arrived ({:?})", buf.capacity(), arrived, result
        );
        let mut buf = BytesMut::from(&bytes[..]);
        drain(&mut buf);
    }

    /// (a) The same bytes fed in arbitrary chunks: no panic, and the frames decoded never
    /// consume more bytes than arrived.
    #[test]
    fn given_arbitrary_chunks_when_streaming_should_not_panic(bytes in frame_like_bytes(), chunk in 1usize..64) {
        let mut buf = BytesMut::new();
        let mut fed = 0;
        for piece in bytes.chunks(chunk) {
            buf.extend_from_slice(piece);
            fed += piece.len();
            match RemotingCommand::decode(&mut buf) {
                Ok(_) => prop_assert!(buf.len() <= fed),
                Err(_) => break,
            }
            prop_assert!(buf.capacity() <= 4 * buf.len().max(1) + 2 * RESERVE_CHUNK + 64);
        }
    }

    /// (b) Mutated valid SEND frames (JSON and binary headers) never panic any decoder.
    #[test]
    fn given_mutated_send_frames_when_decoding_should_not_panic(
        binary in any::<bool>(),
        mutations in vec(mutation(), 1..8),
    ) {
        let st = if binary { SerializeType::RocketMq } else { SerializeType::Json };
        let mut encoded = BytesMut::new();
        prop_assert!(send_command(st).encode(&mut encoded).is_ok());
        let mut bytes = encoded.to_vec();
        mutate(&mut bytes, &mutations);
        let mut buf = BytesMut::from(&bytes[..]);
        drain(&mut buf);
    }

    /// (b) Headers alone, mutated, through both header decoders.
    #[test]
    fn given_mutated_headers_when_decoding_should_not_panic(mutations in vec(mutation(), 1..8)) {
        for st in [SerializeType::Json, SerializeType::RocketMq] {
            let mut encoded = BytesMut::new();
            prop_assert!(send_command(st).encode_head(&mut encoded).is_ok());
            let mut header = encoded.get(8..).unwrap_or_default().to_vec();
            mutate(&mut header, &mutations);
            let _ = json::decode(&header);
            let _ = binary::decode(&header);
        }
    }

    /// (c) Arbitrary bytes into every other decoder of peer data.
    #[test]
    fn given_arbitrary_bytes_when_decoding_bodies_should_not_panic(bytes in vec(any::<u8>(), 0..700)) {
        let body = Bytes::from(bytes);
        let _ = decode_records(&body);
        let _ = decode_batch(&body);
        let _ = properties::parse(&body);
        let _ = properties::find(&body, properties::TAGS);
        let _ = properties::tags_code(&body);
        let _ = binary::decode(&body);
        let _ = json::decode(&body);
        let _ = decode_offset_msg_id(&String::from_utf8_lossy(&body));
    }

    /// (c) Message ids: arbitrary text and arbitrary hex of the right lengths.
    #[test]
    fn given_arbitrary_msg_ids_when_decoding_should_not_panic(
        text in ".{0,60}",
        hex in prop_oneof!["[0-9a-fA-F]{32}", "[0-9a-fA-F]{56}"],
    ) {
        let _ = decode_offset_msg_id(&text);
        if let Ok(id) = decode_offset_msg_id(&hex) {
            prop_assert_eq!(encode_offset_msg_id(id.store_host, id.commit_log_offset), hex.to_uppercase());
        }
    }

    /// (c) Mutated valid stored records: errors, never panics.
    #[test]
    fn given_mutated_records_when_decoding_should_not_panic(mutations in vec(mutation(), 1..6)) {
        let record = StoredRecord {
            queue_id: 0, flag: 0, queue_offset: 1, physical_offset: 2, sys_flag: 0,
            born_timestamp: 3, born_host: SocketAddr::from(([127, 0, 0, 1], 1)),
            store_timestamp: 4, store_host: SocketAddr::from(([0u8; 16], 10911)),
            reconsume_times: 0, prepared_tx_offset: 0,
            body: b"body", topic: "T", properties: b"TAGS\x01a\x02", extra_properties: b"",
        };
        let mut buf = BytesMut::new();
        prop_assert!(encode_record(&record, &mut buf).is_ok());
        prop_assert!(encode_record(&record, &mut buf).is_ok());
        let mut bytes = buf.to_vec();
        mutate(&mut bytes, &mutations);
        let _ = decode_records(&Bytes::from(bytes));
    }

    /// Round trip: any command with arbitrary text survives both header encodings.
    #[test]
    fn given_arbitrary_command_when_round_tripping_should_be_identical(
        code in any::<i16>(),
        version in any::<i16>(),
        opaque in any::<i32>(),
        flag in any::<i32>(),
        remark in proptest::option::of(".{1,20}"),
        fields in vec((".{1,10}", ".{0,20}"), 0..6),
        body in vec(any::<u8>(), 0..64),
        binary in any::<bool>(),
    ) {
        let cmd = RemotingCommand {
            code: i32::from(code),
            language: LanguageCode::Go,
            version: i32::from(version),
            opaque,
            flag,
            remark,
            ext_fields: fields.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect(),
            serialize_type: if binary { SerializeType::RocketMq } else { SerializeType::Json },
            body: Bytes::from(body),
        };
        let mut buf = BytesMut::new();
        prop_assert!(cmd.encode(&mut buf).is_ok());
        let decoded = RemotingCommand::decode(&mut buf);
        prop_assert_eq!(decoded, Ok(Some(cmd)));
    }

    /// Round trip: stored records with arbitrary addresses and contents.
    #[test]
    fn given_arbitrary_record_when_round_tripping_should_be_identical(
        born in socket_addr(),
        store in socket_addr(),
        queue_offset in any::<i64>(),
        body in vec(any::<u8>(), 0..64),
        topic in "[a-zA-Z0-9_%-]{1,200}",
        props in vec((prop_text(), prop_text()), 0..4),
    ) {
        let props = properties::encode(props.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        prop_assert!(props.is_ok());
        let props = props.unwrap_or_default();
        let record = StoredRecord {
            queue_id: 1, flag: 2, queue_offset, physical_offset: 3, sys_flag: 0x80,
            born_timestamp: 4, born_host: born, store_timestamp: 5, store_host: store,
            reconsume_times: 6, prepared_tx_offset: 7,
            body: &body, topic: &topic, properties: &props, extra_properties: b"CLUSTER\x01c\x02",
        };
        let mut buf = BytesMut::new();
        prop_assert!(encode_record(&record, &mut buf).is_ok());
        let decoded = decode_records(&buf.freeze());
        prop_assert!(decoded.is_ok(), "{:?}", decoded);
        let decoded = decoded.unwrap_or_default();
        let m = decoded.first();
        prop_assert!(m.is_some());
        if let Some(m) = m {
            prop_assert_eq!(m.born_host, born);
            prop_assert_eq!(m.store_host, store);
            prop_assert_eq!(m.queue_offset, queue_offset);
            prop_assert_eq!(&m.body[..], &body[..]);
            prop_assert_eq!(&m.topic, &topic);
            prop_assert_eq!(m.sys_flag & 0x80, 0x80);
            prop_assert_eq!(properties::find(&m.properties, "CLUSTER"), Some("c"));
        }
    }

    /// Round trip: properties without separators parse back to the same pairs.
    #[test]
    fn given_arbitrary_properties_when_round_tripping_should_be_identical(pairs in vec((prop_text(), prop_text()), 0..8)) {
        let encoded = properties::encode(pairs.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        prop_assert!(encoded.is_ok());
        let encoded = encoded.unwrap_or_default();
        let parsed = properties::parse(&encoded);
        let expected: Vec<(&str, &str)> = pairs.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        prop_assert_eq!(parsed, expected);
    }

    /// Round trip: batch bodies.
    #[test]
    fn given_arbitrary_batch_when_round_tripping_should_be_identical(
        entries in vec((any::<i32>(), vec(any::<u8>(), 0..32), vec(any::<u8>(), 0..32)), 0..5),
    ) {
        let mut buf = BytesMut::new();
        for (flag, body, props) in &entries {
            prop_assert!(encode_batch_entry(&mut buf, *flag, body, props).is_ok());
        }
        let decoded = decode_batch(&buf.freeze());
        prop_assert!(decoded.is_ok());
        let decoded = decoded.unwrap_or_default();
        prop_assert_eq!(decoded.len(), entries.len());
        for (entry, (flag, body, props)) in decoded.iter().zip(&entries) {
            prop_assert_eq!(entry.flag, *flag);
            prop_assert_eq!(&entry.body[..], &body[..]);
            prop_assert_eq!(&entry.properties[..], &props[..]);
        }
    }
}

#[test]
fn given_capacity_bound_when_frame_announces_maximum_should_hold_across_chunks() {
    let mut buf = BytesMut::new();
    buf.put_i32(i32::try_from(crate::remoting::frame::MAX_FRAME_LEN).unwrap_or(i32::MAX));
    buf.put_i32(0);
    let mut arrived = buf.len();
    for _ in 0..64 {
        assert_eq!(RemotingCommand::decode(&mut buf), Ok(None));
        assert!(
            buf.capacity() <= 4 * arrived + 2 * RESERVE_CHUNK,
            "capacity {} must track the {} bytes that arrived, not the 16 MiB announced",
            buf.capacity(),
            arrived
        );
        buf.put_slice(&[0u8; 1000]);
        arrived += 1000;
    }
}
