use super::*;
use crate::remoting::{RemotingCommand, BROKER_VERSION};

fn parse(json: &str) -> Result<HeaderParts, FrameError> {
    decode(json.as_bytes())
}

#[test]
fn given_rust_client_header_when_decoding_should_read_every_field() {
    let h = parse(
        r#"{"code":10,"language":"RUST","version":474,"opaque":3,"flag":0,"remark":null,"extFields":{"topic":"T","queueId":"1"},"serializeTypeCurrentRPC":"JSON"}"#,
    )
    .expect("Rust client header");
    assert_eq!((h.code, h.version, h.opaque, h.flag), (10, 474, 3, 0));
    assert_eq!(h.language, LanguageCode::Rust);
    assert_eq!(h.remark, None);
    assert_eq!(h.ext_fields.get("queueId"), Some("1"));
}

#[test]
fn given_ali_ons_header_when_decoding_should_tolerate_raw_values_and_missing_keys() {
    let h = parse(
        r#"{"code":310,"language":"JAVA","opaque":12,"flag":0,"version":121,"extFields":{"a":"PG","e":0,"k":false,"g":1700000000000}}"#,
    )
    .expect("ali-ons header");
    assert_eq!(h.code, 310);
    assert_eq!(h.ext_fields.get("e"), Some("0"));
    assert_eq!(h.ext_fields.get("k"), Some("false"));
    assert_eq!(h.ext_fields.get("g"), Some("1700000000000"));
}

/// Issue 23: JSON allows whitespace before a value (`"k": false`, `"a": 2`), as Python's
/// `json.dumps`, Jackson's pretty printer and hand-written clients emit it; the header must
/// read as if the space were not there, whichever decoder reads it.
#[test]
fn given_raw_values_after_whitespace_when_decoding_should_read_them_as_written() {
    let text = "{\"code\": 310, \"language\": \"PYTHON\", \"opaque\":\t7, \"flag\": 0, \
                \"remark\":\n true, \"extFields\": {\"k\": false, \"a\": 2, \"m\":\r\n\ttrue, \
                \"e\": -1.5e3, \"s\": \"x\", \"n\": null}}";
    let h = parse(text).expect("legal JSON header");
    assert_eq!((h.code, h.opaque, h.flag), (310, 7, 0));
    assert_eq!(h.remark.as_deref(), Some("true"), "a raw remark keeps its text, not the space");
    assert_eq!(h.ext_fields.get("k"), Some("false"), "whitespace is not part of the value");
    assert_eq!(h.ext_fields.get("a"), Some("2"));
    assert_eq!(h.ext_fields.get("m"), Some("true"));
    assert_eq!(h.ext_fields.get("e"), Some("-1.5e3"));
    assert_eq!(h.ext_fields.get("s"), Some("x"));
    assert!(!h.ext_fields.contains_key("n"), "null values are skipped");
    assert_eq!(h.ext_fields.optional_bool("k"), Ok(Some(false)), "a boolean reads as one");
    assert_eq!(h.ext_fields.required_i32("a"), Ok(2));
    let serde = decode_with_serde(text.as_bytes()).expect("serde reads it");
    assert_eq!(serde.ext_fields, h.ext_fields, "both decoders read the same fields");
    assert_eq!(serde.remark, h.remark, "both decoders read the same remark");
}

#[test]
fn given_minimal_or_odd_header_when_decoding_should_apply_defaults() {
    let h = parse(r#"{"opaque":"7","code":34.0,"language":"KOTLIN","flag":null,"x":[1,{"y":2}]}"#)
        .expect("lenient header");
    assert_eq!((h.code, h.opaque, h.flag, h.version), (34, 7, 0, 0));
    assert_eq!(h.language, LanguageCode::Other, "unknown language is OTHER");
    assert!(h.ext_fields.is_empty());
    let h = parse(r#"{"code":1,"opaque":2,"remark":42,"extFields":null}"#).expect("lenient");
    assert_eq!(h.remark.as_deref(), Some("42"));
}

#[test]
fn given_unreadable_header_when_decoding_should_be_fatal() {
    for bad in [
        "",
        "[]",
        "{",
        r#"{"opaque":1}"#,
        r#"{"code":1}"#,
        r#"{"code":"x","opaque":1}"#,
        r#"{"code":4294967296,"opaque":1}"#,
        r#"{"code":1,"opaque":1} trailing"#,
        r#"{"code":{},"opaque":1}"#,
    ] {
        assert!(
            matches!(parse(bad), Err(FrameError::MalformedJsonHeader(_))),
            "{bad:?} must be a fatal header error"
        );
    }
}

#[test]
fn given_response_when_encoding_should_emit_every_key_the_rust_client_requires() {
    let req = RemotingCommand::request(10, 42);
    let mut resp = RemotingCommand::response_to(&req, 0, None);
    resp.ext_fields.insert("queueId", "0");
    resp.ext_fields.insert("msgId", "AB\"\\");
    let mut dst = BytesMut::new();
    encode(&resp.header_ref(), &mut dst);
    let text = std::str::from_utf8(&dst).expect("UTF-8");
    assert_eq!(
        text,
        format!(
            r#"{{"code":0,"language":"JAVA","version":{BROKER_VERSION},"opaque":42,"flag":1,"remark":null,"extFields":{{"queueId":"0","msgId":"AB\"\\"}},"serializeTypeCurrentRPC":"JSON"}}"#
        ),
        "golden response header"
    );
    let value: serde_json::Value = serde_json::from_str(text).expect("valid JSON");
    for key in [
        "code",
        "language",
        "version",
        "opaque",
        "flag",
        "remark",
        "extFields",
        "serializeTypeCurrentRPC",
    ] {
        assert!(value.get(key).is_some(), "response header must contain {key}");
    }
    let ext = value.get("extFields").and_then(serde_json::Value::as_object).expect("object");
    assert!(ext.values().all(serde_json::Value::is_string), "ext values must be JSON strings");
}

#[test]
fn given_send_header_when_decoding_should_not_grow_its_buffers() {
    let json = r#"{"code":10,"language":"RUST","version":474,"opaque":1,"flag":0,"remark":null,"extFields":{"batch":"false","bornTimestamp":"1700000000000","defaultTopic":"TBW102","defaultTopicQueueNums":"4","flag":"0","maxReconsumeTimes":"16","producerGroup":"PG","properties":"TAGS\u0001TagA\u0002UNIQ_KEY\u00017F0000010000000000000000000000\u0002WAIT\u0001true\u0002","queueId":"0","reconsumeTimes":"0","sysFlag":"0","topic":"TopicTest","unitMode":"false"},"serializeTypeCurrentRPC":"JSON"}"#;
    let h = parse(json).expect("SEND header");
    assert_eq!(h.ext_fields.len(), 13);
    assert_eq!(
        h.ext_fields.capacities(),
        (json.len(), 16),
        "a SEND header decode allocates exactly one arena and one entry list (2 allocations), \
         neither of which regrows"
    );
}
