//! End-to-end scenarios: client bytes in, broker bytes out, checked against a strict model of
//! what rocketmq-client-rust 1.0.0 accepts.

use std::collections::HashMap;
use std::net::SocketAddr;

use bytes::{BufMut, Bytes, BytesMut};
use serde::Deserialize;

use crate::remoting::body::{HeartbeatData, JsonBody, TopicRouteData};
use crate::remoting::code::{request_code, response_code};
use crate::remoting::frame::peek_prefix;
use crate::remoting::header::{
    FromExtFields, PullMessageRequestHeader, PullMessageResponseHeader, SendHeaderVersion,
    SendMessageRequestHeader, SendMessageResponseHeader, ToExtFields,
};
use crate::remoting::message::{decode_records, encode_record, StoredRecord};
use crate::remoting::msgid::decode_offset_msg_id;
use crate::remoting::properties;
use crate::remoting::subscription::TagMatcher;
use crate::remoting::{RemotingCommand, SerializeType, BROKER_VERSION};

/// The 14 language names the Rust client's serde derive accepts, and nothing else.
#[derive(Debug, Deserialize)]
enum StrictLanguage {
    #[serde(rename = "JAVA")]
    Java,
    #[serde(rename = "CPP")]
    Cpp,
    #[serde(rename = "DOTNET")]
    Dotnet,
    #[serde(rename = "PYTHON")]
    Python,
    #[serde(rename = "DELPHI")]
    Delphi,
    #[serde(rename = "ERLANG")]
    Erlang,
    #[serde(rename = "RUBY")]
    Ruby,
    #[serde(rename = "OTHER")]
    Other,
    #[serde(rename = "HTTP")]
    Http,
    #[serde(rename = "GO")]
    Go,
    #[serde(rename = "PHP")]
    Php,
    #[serde(rename = "OMS")]
    Oms,
    #[serde(rename = "RUST")]
    Rust,
    #[serde(rename = "NODE_JS")]
    NodeJs,
}

#[derive(Debug, Deserialize)]
enum StrictSerializeType {
    #[serde(rename = "JSON")]
    Json,
    #[serde(rename = "ROCKETMQ")]
    RocketMq,
}

/// Mirror of the Rust client's `RemotingCommand` serde derive: required fields without
/// defaults, `extFields` as a map of strings.
#[derive(Debug, Deserialize)]
struct StrictClientHeader {
    code: i32,
    language: StrictLanguage,
    version: i32,
    opaque: i32,
    flag: i32,
    remark: Option<String>,
    #[serde(rename = "extFields")]
    ext_fields: Option<HashMap<String, String>>,
    #[serde(rename = "serializeTypeCurrentRPC")]
    serialize_type: StrictSerializeType,
}

/// Splits one encoded frame the way the Rust client does and parses its header strictly.
fn client_view(frame: &[u8]) -> (StrictClientHeader, Bytes) {
    let prefix = peek_prefix(frame).expect("valid prefix").expect("complete prefix");
    assert_eq!(prefix.wire_len(), frame.len(), "one whole frame");
    let header = frame.get(8..8 + prefix.header_len).expect("header in frame");
    let body = frame.get(8 + prefix.header_len..).expect("body in frame");
    let strict: StrictClientHeader =
        serde_json::from_slice(header).expect("the Rust client must accept this header");
    (strict, Bytes::copy_from_slice(body))
}

fn frame_of(header_json: &str, body: &[u8]) -> BytesMut {
    let mut b = BytesMut::new();
    let header_len = i32::try_from(header_json.len()).expect("small header");
    let body_len = i32::try_from(body.len()).expect("small body");
    b.put_i32(4 + header_len + body_len);
    b.put_i32(header_len);
    b.put_slice(header_json.as_bytes());
    b.put_slice(body);
    b
}

#[test]
fn given_rust_client_send_when_broker_replies_should_satisfy_the_strict_client() {
    let request_json = r#"{"code":10,"language":"RUST","version":474,"opaque":7,"flag":0,"remark":null,"extFields":{"batch":"false","bornTimestamp":"1700000000000","defaultTopic":"TBW102","defaultTopicQueueNums":"4","flag":"0","producerGroup":"PG","properties":"TAGS\u0001TagA\u0002WAIT\u0001true\u0002","queueId":"2","reconsumeTimes":"0","sysFlag":"0","topic":"TopicTest","unitMode":"false"},"serializeTypeCurrentRPC":"JSON"}"#;
    let mut wire = frame_of(request_json, b"payload");
    let request = RemotingCommand::decode(&mut wire).expect("valid frame").expect("complete frame");
    let version = SendHeaderVersion::for_request_code(request.code).expect("a send code");
    let send =
        SendMessageRequestHeader::decode(&request.ext_fields, version).expect("valid header");
    assert_eq!((send.topic, send.queue_id), ("TopicTest", 2));
    assert_eq!(properties::find(send.properties.as_bytes(), properties::TAGS), Some("TagA"));
    assert_eq!(&request.body[..], b"payload");

    let store_host: SocketAddr = "127.0.0.1:10911".parse().expect("addr");
    let response_header = SendMessageResponseHeader {
        msg_id: crate::remoting::msgid::encode_offset_msg_id(store_host, 4096),
        queue_id: send.queue_id,
        queue_offset: 0,
        transaction_id: None,
        batch_uniq_id: None,
        recall_handle: None,
    };
    let response = RemotingCommand::response_to(&request, response_code::SUCCESS, None)
        .with_ext_fields(response_header.to_ext_fields());
    let mut out = BytesMut::new();
    response.encode(&mut out).expect("encodable");

    let (strict, body) = client_view(&out);
    assert_eq!(strict.code, 0);
    assert!(matches!(strict.language, StrictLanguage::Java));
    assert_eq!(strict.version, BROKER_VERSION);
    assert_eq!(strict.opaque, 7, "response echoes the opaque");
    assert_eq!(strict.flag, 1, "response flag");
    assert_eq!(strict.remark, None);
    assert!(matches!(strict.serialize_type, StrictSerializeType::Json));
    assert!(body.is_empty());
    let ext = strict.ext_fields.expect("extFields present");
    assert_eq!(ext.get("queueId").map(String::as_str), Some("2"));
    assert_eq!(ext.get("queueOffset").map(String::as_str), Some("0"));
    let msg_id = ext.get("msgId").expect("msgId");
    let decoded = decode_offset_msg_id(msg_id).expect("clients decode the msgId");
    assert_eq!((decoded.store_host, decoded.commit_log_offset), (store_host, 4096));
}

/// Issue 23: a SEND_MESSAGE_V2 as a client that prints JSON with spaces after `:` and `,`
/// (Python's `json.dumps` defaults, Jackson's pretty printer) and raw numbers and booleans (as
/// ali-ons does) writes it. RocketMQ's fastjson reads it; so must baiji, field for field.
#[test]
fn given_spaced_json_send_frame_with_raw_booleans_when_decoding_should_accept_every_field() {
    let request_json =
        "{\"code\": 310, \"language\": \"PYTHON\", \"version\": 475, \"opaque\": 9, \
        \"flag\": 0, \"remark\": null, \"extFields\": {\"a\": \"PG\", \"b\": \"TopicTest\", \
        \"c\": \"TBW102\", \"d\": 4, \"e\": 2, \"f\": 0, \"g\": 1700000000000, \"h\": 0, \
        \"i\": \"TAGS\\u0001TagA\\u0002\", \"j\": 0, \"k\": false, \"l\": 16, \"m\": false}, \
        \"serializeTypeCurrentRPC\": \"JSON\"}";
    let mut wire = frame_of(request_json, b"payload");
    let request = RemotingCommand::decode(&mut wire).expect("valid frame").expect("complete frame");
    assert_eq!((request.code, request.opaque), (request_code::SEND_MESSAGE_V2, 9));
    let version = SendHeaderVersion::for_request_code(request.code).expect("a send code");
    let send = SendMessageRequestHeader::decode(&request.ext_fields, version)
        .expect("a spaced header with raw booleans is a valid send");
    assert_eq!((send.producer_group, send.topic, send.queue_id), ("PG", "TopicTest", 2));
    assert_eq!((send.default_topic_queue_nums, send.born_timestamp), (4, 1_700_000_000_000));
    assert!(!send.unit_mode && !send.batch, "raw `false` after a space reads as false");
    assert_eq!(send.max_reconsume_times, Some(16));
    assert_eq!(properties::find(send.properties.as_bytes(), properties::TAGS), Some("TagA"));
}

#[test]
fn given_ali_ons_heartbeat_frame_when_decoding_should_accept_raw_values_and_defaults() {
    let request_json = r#"{"code":34,"language":"JAVA","opaque":3,"flag":0,"version":121,"extFields":{"unitMode":false,"queueId":0,"ratio":0.5}}"#;
    let body = br#"{"clientID":"10.0.0.5@4242","consumerDataSet":[{"groupName":"CG","consumeType":"CONSUME_PASSIVELY","messageModel":"CLUSTERING","consumeFromWhere":"CONSUME_FROM_LAST_OFFSET","subscriptionDataSet":[{"topic":"T","subString":"TagA||TagB","classFilterMode":false,"tagsSet":["TagA","TagB"],"codeSet":[2598919,2598920],"subVersion":1700000000000}],"unitMode":false}],"producerDataSet":[{"groupName":"PG"}]}"#;
    let mut wire = frame_of(request_json, body);
    let request = RemotingCommand::decode(&mut wire).expect("valid frame").expect("complete frame");
    assert_eq!(request.code, request_code::HEART_BEAT);
    assert_eq!(request.serialize_type, SerializeType::Json, "type comes from the frame");
    assert_eq!(request.ext_fields.get("unitMode"), Some("false"));
    assert_eq!(request.ext_fields.get("queueId"), Some("0"));
    assert_eq!(request.ext_fields.get("ratio"), Some("0.5"));

    let heartbeat = HeartbeatData::from_json_slice(&request.body).expect("ali-ons heartbeat");
    let sub = heartbeat
        .consumer_data_set
        .first()
        .and_then(|c| c.subscription_data_set.first())
        .expect("subscription");
    let matcher = TagMatcher::for_subscription(sub);
    assert!(matcher.matches_tag(Some("TagB")));
    assert!(!matcher.matches_tag(Some("TagC")));

    let response = RemotingCommand::response_to(&request, response_code::SUCCESS, None);
    let mut out = BytesMut::new();
    response.encode(&mut out).expect("encodable");
    let (strict, _) = client_view(&out);
    assert_eq!(strict.version, BROKER_VERSION, "clients learn the broker version here");
    assert_eq!(
        strict.ext_fields.map(|e| e.is_empty()),
        Some(true),
        "empty extFields are written as {{}}"
    );
}

#[test]
fn given_pull_request_when_broker_answers_with_records_should_round_trip_through_the_wire() {
    let request_json = r#"{"code":11,"language":"RUST","version":474,"opaque":11,"flag":0,"remark":null,"extFields":{"commitOffset":"0","consumerGroup":"CG","expressionType":"TAG","maxMsgBytes":"262144","maxMsgNums":"32","queueId":"0","queueOffset":"0","subVersion":"1700000000000","subscription":"","suspendTimeoutMillis":"15000","sysFlag":"2","topic":"T"},"serializeTypeCurrentRPC":"JSON"}"#;
    let mut wire = frame_of(request_json, b"");
    let request = RemotingCommand::decode(&mut wire).expect("valid frame").expect("complete frame");
    let pull = PullMessageRequestHeader::from_ext_fields(&request.ext_fields).expect("valid pull");
    assert!(pull.has_suspend() && !pull.has_commit_offset());

    let store_host: SocketAddr = "127.0.0.1:10911".parse().expect("addr");
    let mut body = BytesMut::new();
    for offset in 0..3i64 {
        let props = properties::encode([(properties::TAGS, "TagA")]).expect("encodable");
        let record = StoredRecord {
            queue_id: pull.queue_id,
            flag: 0,
            queue_offset: offset,
            physical_offset: 100 + offset,
            sys_flag: 0,
            born_timestamp: 1,
            born_host: "10.0.0.9:5000".parse().expect("addr"),
            store_timestamp: 2,
            store_host,
            reconsume_times: 0,
            prepared_tx_offset: 0,
            body: b"m",
            topic: pull.topic,
            properties: &props,
            extra_properties: b"CLUSTER\x01DefaultCluster\x02",
        };
        encode_record(&record, &mut body).expect("encodable");
    }
    let header = PullMessageResponseHeader {
        next_begin_offset: 3,
        max_offset: 3,
        ..PullMessageResponseHeader::default()
    };
    let response = RemotingCommand::response_to(&request, response_code::SUCCESS, None)
        .with_ext_fields(header.to_ext_fields())
        .with_body(body.freeze());
    let mut out = BytesMut::new();
    response.encode(&mut out).expect("encodable");

    let (strict, body) = client_view(&out);
    let ext = strict.ext_fields.expect("extFields");
    for key in ["suggestWhichBrokerId", "nextBeginOffset", "minOffset", "maxOffset"] {
        let value = ext.get(key).expect("required pull response field");
        assert!(value.parse::<u64>().is_ok(), "{key}={value} must be a non-negative decimal");
    }
    let messages = decode_records(&body).expect("client decodes the pull body");
    assert_eq!(messages.len(), 3);
    assert!(messages.iter().all(|m| m.topic == "T" && m.body_crc_matches()));
    assert_eq!(messages.last().map(|m| m.queue_offset), Some(2));
}

#[test]
fn given_binary_request_when_broker_replies_should_use_the_binary_type() {
    let mut request = RemotingCommand::request(request_code::GET_ROUTEINFO_BY_TOPIC, 21);
    request.serialize_type = SerializeType::RocketMq;
    request.ext_fields.insert("topic", "T");
    let mut wire = BytesMut::new();
    request.encode(&mut wire).expect("encodable");
    let decoded = RemotingCommand::decode(&mut wire).expect("valid").expect("complete");
    let route = TopicRouteData::default();
    let response = RemotingCommand::response_to(&decoded, response_code::SUCCESS, None)
        .with_body(route.to_json_bytes().expect("serialisable"));
    let mut out = BytesMut::new();
    response.encode(&mut out).expect("encodable");
    let prefix = peek_prefix(&out).expect("valid").expect("complete");
    assert_eq!(prefix.serialize_type, SerializeType::RocketMq, "reply in the request's type");
    let back = RemotingCommand::decode(&mut out).expect("valid").expect("complete");
    assert_eq!(back.opaque, 21);
    assert!(back.is_response());
    assert_eq!(TopicRouteData::from_json_slice(&back.body).expect("route body"), route);
}
