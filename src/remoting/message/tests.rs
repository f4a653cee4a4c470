use super::*;
use crate::remoting::properties;

fn sample<'a>(topic: &'a str, props: &'a [u8], extra: &'a [u8]) -> StoredRecord<'a> {
    StoredRecord {
        queue_id: 3,
        flag: 7,
        queue_offset: 42,
        physical_offset: 1_000_000,
        sys_flag: sys_flag::BORNHOST_V6,
        born_timestamp: 1_700_000_000_000,
        born_host: "10.0.0.2:50000".parse().unwrap_or_else(|_| SocketAddr::from(([0; 4], 0))),
        store_timestamp: 1_700_000_000_005,
        store_host: "[::1]:10911".parse().unwrap_or_else(|_| SocketAddr::from(([0; 4], 0))),
        reconsume_times: 1,
        prepared_tx_offset: 0,
        body: b"hello body",
        topic,
        properties: props,
        extra_properties: extra,
    }
}

#[test]
fn given_java_properties_without_trailing_separator_when_encoding_should_write_canonical_pairs() {
    let rec = sample("T", b"TAGS\x01TagA", b"CLUSTER\x01C\x02");
    let mut buf = BytesMut::new();
    let len = encode_record(&rec, &mut buf).expect("encodable");
    assert_eq!(len, buf.len(), "the length counts the inserted separator");
    let decoded = decode_records(&buf.freeze()).expect("decodable");
    let m = decoded.first().expect("one record");
    assert_eq!(&m.properties[..], &b"TAGS\x01TagA\x02CLUSTER\x01C\x02"[..]);
    let alone = sample("T", b"TAGS\x01TagA", b"");
    let mut buf = BytesMut::new();
    encode_record(&alone, &mut buf).expect("encodable");
    let decoded = decode_records(&buf.freeze()).expect("decodable");
    let m = decoded.first().expect("one record");
    assert_eq!(&m.properties[..], &b"TAGS\x01TagA\x02"[..], "canonical even with no extra");
}

#[test]
fn given_record_when_encoding_then_decoding_should_round_trip() {
    let props = properties::encode([(properties::TAGS, "TagA")]).unwrap_or_default();
    let extra = properties::encode([(properties::CLUSTER, "DefaultCluster")]).unwrap_or_default();
    let rec = sample("TopicTest", &props, &extra);
    let mut buf = BytesMut::new();
    let len = encode_record(&rec, &mut buf).expect("encodable");
    assert_eq!(len, buf.len());
    let bytes = buf.freeze();
    let decoded = decode_records(&bytes).expect("decodable");
    let [m] = decoded.as_slice() else {
        panic!("expected exactly one record, got {}", decoded.len());
    };
    assert_eq!(m.magic, MAGIC_V1);
    assert_eq!(m.sys_flag, sys_flag::STOREHOST_V6, "v6 bits follow the address kinds");
    assert_eq!((m.queue_id, m.flag, m.queue_offset, m.physical_offset), (3, 7, 42, 1_000_000));
    assert_eq!(m.born_host, rec.born_host);
    assert_eq!(m.store_host, rec.store_host);
    assert_eq!(&m.body[..], rec.body);
    assert!(m.body_crc_matches());
    assert_eq!(m.topic, "TopicTest");
    assert_eq!(properties::find(&m.properties, properties::TAGS), Some("TagA"));
    assert_eq!(
        properties::find(&m.properties, properties::CLUSTER),
        Some("DefaultCluster"),
        "extra properties are part of the record's properties"
    );
    assert_eq!(m.offset_msg_id(), rec.offset_msg_id());
}

#[test]
fn given_ipv4_hosts_when_encoding_should_match_java_size_formula() {
    let mut rec = sample("T", b"k\x01v\x02", b"");
    rec.born_host = "1.2.3.4:5".parse().unwrap_or_else(|_| SocketAddr::from(([0; 4], 0)));
    rec.store_host = rec.born_host;
    let mut buf = BytesMut::new();
    let len = encode_record(&rec, &mut buf).expect("encodable");
    assert_eq!(len, 84 + 4 + 10 + 1 + 1 + 2 + 4, "84 + 4 + body + 1 + topic + 2 + props");
    assert_eq!(&buf[4..8], &MAGIC_V1.to_be_bytes());
    let decoded = decode_records(&buf.freeze()).expect("decodable");
    assert_eq!(decoded.first().map(|m| m.sys_flag), Some(0), "stale v6 bits are cleared");
}

#[test]
fn given_long_topic_when_encoding_should_switch_to_v2_and_refuse_beyond_limit() {
    let topic = "t".repeat(200);
    let mut buf = BytesMut::new();
    encode_record(&sample(&topic, b"", b""), &mut buf).expect("V2 topic");
    assert_eq!(&buf[4..8], &MAGIC_V2.to_be_bytes());
    let decoded = decode_records(&buf.freeze()).expect("V2 decodes");
    assert_eq!(decoded.first().map(|m| m.topic.len()), Some(200));
    let huge = "t".repeat(MAX_TOPIC_LEN + 1);
    assert!(matches!(
        encode_record(&sample(&huge, b"", b""), &mut BytesMut::new()),
        Err(MessageError::TopicTooLong { .. })
    ));
}

#[test]
fn given_properties_over_limit_when_encoding_should_refuse() {
    let mut props = vec![b'a'; MAX_PROPERTIES_LEN - 1];
    props.push(properties::PROPERTY_SEPARATOR);
    let mut buf = BytesMut::new();
    encode_record(&sample("T", &props, b""), &mut buf).expect("exactly at the limit");
    let at_limit = vec![b'a'; MAX_PROPERTIES_LEN];
    let mut alone = BytesMut::new();
    encode_record(&sample("T", &at_limit, b""), &mut alone).expect("written as sent");
    let decoded = decode_records(&alone.freeze()).expect("decodable");
    assert_eq!(decoded.first().map(|m| m.properties.len()), Some(MAX_PROPERTIES_LEN));
    assert!(
        encode_record(&sample("T", &at_limit, b"x\x01y\x02"), &mut buf).is_err(),
        "an unterminated string is never run into an extra pair"
    );
    let err = encode_record(&sample("T", &props, b"x"), &mut buf);
    assert_eq!(
        err,
        Err(MessageError::PropertiesTooLong {
            len: MAX_PROPERTIES_LEN + 1,
            max: MAX_PROPERTIES_LEN
        }),
        "stored plus extra properties share one 16-bit length"
    );
}

#[test]
fn given_several_records_when_one_is_corrupt_should_stop_there() {
    let mut buf = BytesMut::new();
    encode_record(&sample("A", b"", b""), &mut buf).expect("encodable");
    encode_record(&sample("B", b"", b""), &mut buf).expect("encodable");
    let first_len = buf.len() / 2;
    buf[first_len + 4] ^= 0xff;
    let bytes = buf.freeze();
    let results: Vec<_> = records(&bytes).collect();
    assert_eq!(results.len(), 2, "one good record, then one error, then the iterator ends");
    assert!(results.first().is_some_and(Result::is_ok));
    assert!(matches!(results.get(1), Some(Err(MessageError::UnknownMagic(_)))));
    assert!(decode_records(&bytes).is_err());
}

#[test]
fn given_truncated_or_inconsistent_record_should_report_without_panicking() {
    let mut buf = BytesMut::new();
    encode_record(&sample("T", b"", b""), &mut buf).expect("encodable");
    let full = buf.freeze();
    for cut in 1..full.len() {
        assert!(decode_records(&full.slice(..cut)).is_err(), "cut at {cut} must fail");
    }
    let mut wrong_size = BytesMut::from(&full[..]);
    wrong_size[3] ^= 1;
    assert!(matches!(decode_records(&wrong_size.freeze()), Err(MessageError::SizeMismatch { .. })));
}

#[test]
fn given_batch_body_when_decoding_should_slice_each_entry_zero_copy() {
    let mut buf = BytesMut::new();
    encode_batch_entry(&mut buf, 1, b"first", b"UNIQ_KEY\x01A\x02").expect("encodable");
    encode_batch_entry(&mut buf, 2, b"", b"").expect("encodable");
    let bytes = buf.freeze();
    let entries = decode_batch(&bytes).expect("decodable");
    assert_eq!(entries.len(), 2);
    let first = entries.first().expect("first entry");
    assert_eq!(first.flag, 1);
    assert_eq!(&first.body[..], b"first");
    assert_eq!(first.properties_str(), Ok("UNIQ_KEY\u{1}A\u{2}"));
    assert_eq!(first.total_size, 20 + 5 + 2 + 11);
    let base = bytes.as_ptr() as usize;
    assert_eq!(first.body.as_ptr() as usize, base + 20, "body is a view of the request");
    for cut in 1..bytes.len() {
        let truncated = bytes.slice(..cut);
        let _ = decode_batch(&truncated);
    }
    let mut neg = BytesMut::new();
    neg.put_slice(&[0; 16]);
    neg.put_i32(-1);
    assert_eq!(
        decode_batch(&neg.freeze()),
        Err(MessageError::NegativeLength { field: "BODY length", len: -1 })
    );
}
