//! What the Java (4.9.x, 5.x) and Go RocketMQ clients put on the wire, written byte for byte as
//! they write it, and what they need back (the team's `client-wire-facts.md`, taken from the
//! clients' source: apache/rocketmq 4.9.x/5.x and rocketmq-client-go v2; each test names its
//! row). Neither client can run here, so every frame is built by hand: header JSON
//! text exactly as fastjson (Java) or jsoniter (Go) prints it, bodies as the clients encode
//! them. Responses are read as raw JSON, so a test sees what a strict client decoder sees.

#[path = "common/mod.rs"]
mod common;
mod support;

use std::net::SocketAddr;
use std::time::Duration;

use baiji::broker::RunningBroker;
use baiji::remoting::code::{request_code as rc, response_code as code};
use baiji::remoting::message::{decode_records, DecodedMessage};
use baiji::remoting::properties;
use bytes::Bytes;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use support::{start_broker, unique, PATIENCE};

/// Which client writes the frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Client {
    /// Java 4.9.x (fastjson, version 405, no `extFields` key without a custom header).
    Java49,
    /// Java 5.x (fastjson, version 475, `"extFields":{}` without a custom header).
    Java5,
    /// Go v2.1 (jsoniter, version 317, no `serializeTypeCurrentRPC`, opaque from 1, never the
    /// one-way flag).
    Go,
}

/// One frame as the broker sent it.
#[derive(Debug)]
struct Frame {
    header: Value,
    body: Bytes,
}

impl Frame {
    fn code(&self) -> i32 {
        let code = self.header["code"].as_i64().expect("an integer code");
        i32::try_from(code).expect("an int code")
    }

    fn ext(&self, key: &str) -> Option<&str> {
        self.header.get("extFields").and_then(|e| e.get(key)).and_then(Value::as_str)
    }

    fn is_response(&self) -> bool {
        self.header["flag"].as_i64().unwrap_or(0) & 1 == 1
    }

    fn records(&self) -> Vec<DecodedMessage> {
        decode_records(&self.body).expect("a pull body of stored records")
    }

    /// Asserts what Go's strict decoder needs (row 4): `code` and `version` fit an int16,
    /// `opaque` and `flag` an int32, and every `extFields` value is a JSON string.
    fn assert_go_decodes(&self) {
        let h = &self.header;
        let fits = |v: &Value, lo: i64, hi: i64| v.as_i64().is_some_and(|n| (lo..=hi).contains(&n));
        assert!(fits(&h["code"], i16::MIN.into(), i16::MAX.into()), "int16 code: {h}");
        if let Some(v) = h.get("version") {
            assert!(fits(v, i16::MIN.into(), i16::MAX.into()), "int16 version: {h}");
        }
        assert!(fits(&h["opaque"], i32::MIN.into(), i32::MAX.into()), "int32 opaque: {h}");
        assert!(fits(&h["flag"], i32::MIN.into(), i32::MAX.into()), "int32 flag: {h}");
        match h.get("extFields") {
            None | Some(Value::Null) => {}
            Some(Value::Object(m)) => {
                for (k, v) in m {
                    assert!(v.is_string(), "extFields[{k}] must be a JSON string for Go: {h}");
                }
            }
            Some(other) => panic!("extFields must be an object for Go, got {other}"),
        }
    }
}

/// One raw connection speaking as `client`.
struct Wire {
    stream: TcpStream,
    buf: Vec<u8>,
    next_opaque: i32,
    client: Client,
}

/// A JSON string literal as fastjson and jsoniter print it (control characters as `\u00XX`).
fn js(s: &str) -> String {
    serde_json::to_string(s).expect("a string serialises")
}

impl Wire {
    async fn open(addr: SocketAddr, client: Client) -> Wire {
        let stream = TcpStream::connect(addr).await.expect("the broker accepts connections");
        // Java's opaque counter starts at 0, Go's at 1 (row 3, row 4).
        let next_opaque = if client == Client::Go { 1 } else { 0 };
        Wire { stream, buf: Vec::new(), next_opaque, client }
    }

    /// The header text the client writes. `ext` is `None` for a request without a custom
    /// header (Java 4.9 then writes no `extFields` key at all).
    fn header(&self, code: i32, opaque: i32, flag: i32, ext: Option<&[(&str, String)]>) -> String {
        let fields = ext.map(|ext| {
            let pairs: Vec<String> =
                ext.iter().map(|(k, v)| format!("{}:{}", js(k), js(v))).collect();
            format!("{{{}}}", pairs.join(","))
        });
        match self.client {
            Client::Java49 | Client::Java5 => {
                let version = if self.client == Client::Java49 { 405 } else { 475 };
                let ext = match (fields, self.client) {
                    (Some(f), _) => format!("\"extFields\":{f},"),
                    (None, Client::Java49) => String::new(),
                    (None, _) => "\"extFields\":{},".to_string(),
                };
                format!(
                    "{{\"code\":{code},{ext}\"flag\":{flag},\"language\":\"JAVA\",\"opaque\":{opaque},\"serializeTypeCurrentRPC\":\"JSON\",\"version\":{version}}}"
                )
            }
            Client::Go => {
                let ext = fields.unwrap_or_else(|| "{}".to_string());
                format!(
                    "{{\"code\":{code},\"language\":\"GO\",\"version\":317,\"opaque\":{opaque},\"flag\":{flag},\"remark\":\"\",\"extFields\":{ext}}}"
                )
            }
        }
    }

    /// Writes one request; returns its opaque.
    async fn send(
        &mut self,
        code: i32,
        ext: Option<&[(&str, String)]>,
        body: &[u8],
        oneway: bool,
    ) -> i32 {
        let opaque = self.next_opaque;
        self.next_opaque = self.next_opaque.wrapping_add(1) & i32::MAX;
        // Go never sets the one-way bit (row 5).
        let flag = if oneway && self.client != Client::Go { 2 } else { 0 };
        let header = self.header(code, opaque, flag, ext);
        let len = 4 + header.len() + body.len();
        let mut frame = Vec::with_capacity(4 + len);
        frame.extend_from_slice(&(len as i32).to_be_bytes());
        frame.extend_from_slice(&(header.len() as i32).to_be_bytes());
        frame.extend_from_slice(header.as_bytes());
        frame.extend_from_slice(body);
        self.stream.write_all(&frame).await.expect("the write succeeds");
        opaque
    }

    /// The next frame, or `None` if nothing arrives within `within`.
    async fn read_frame(&mut self, within: Duration) -> Option<Frame> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            if self.buf.len() >= 8 {
                let len = i32::from_be_bytes(self.buf[..4].try_into().unwrap()) as usize;
                if self.buf.len() >= 4 + len {
                    let mark = u32::from_be_bytes(self.buf[4..8].try_into().unwrap());
                    assert_eq!(mark >> 24, 0, "a JSON-header client gets JSON headers");
                    let hlen = (mark & 0x00FF_FFFF) as usize;
                    let header: Value = serde_json::from_slice(&self.buf[8..8 + hlen])
                        .expect("the header is valid JSON");
                    let body = Bytes::copy_from_slice(&self.buf[8 + hlen..4 + len]);
                    self.buf.drain(..4 + len);
                    return Some(Frame { header, body });
                }
            }
            self.buf.reserve(64 * 1024);
            match tokio::time::timeout_at(deadline, self.stream.read_buf(&mut self.buf)).await {
                Err(_) => return None,
                Ok(Ok(0)) => panic!("the broker closed a connection it must keep open"),
                Ok(Ok(_)) => {}
                Ok(Err(e)) => panic!("reading from the broker failed: {e}"),
            }
        }
    }

    /// The response to `opaque`, skipping requests the broker sends on its own.
    async fn response(&mut self, opaque: i32, within: Duration) -> Option<Frame> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let f = self.read_frame(left).await?;
            if f.is_response() {
                assert_eq!(f.header["opaque"].as_i64(), Some(i64::from(opaque)), "{}", f.header);
                if self.client == Client::Go {
                    f.assert_go_decodes();
                }
                return Some(f);
            }
        }
    }

    /// Sends a request and returns its response.
    async fn call(&mut self, code: i32, ext: Option<&[(&str, String)]>, body: &[u8]) -> Frame {
        let opaque = self.send(code, ext, body, false).await;
        self.response(opaque, PATIENCE)
            .await
            .unwrap_or_else(|| panic!("request {code} must be answered"))
    }
}

fn s(v: impl ToString) -> String {
    v.to_string()
}

/// A properties string as Java 4.9.1–5.1.4 writes it (row 1): `k\x01v` pairs joined by
/// `\x02`, **no** `\x02` after the last pair.
fn java_props(pairs: &[(&str, &str)]) -> String {
    pairs.iter().map(|(k, v)| format!("{k}\u{1}{v}")).collect::<Vec<_>>().join("\u{2}")
}

/// The canonical form baiji must emit: every pair, the last included, ends in `\x02`.
fn assert_canonical(props: &[u8]) {
    assert_eq!(
        props.last(),
        Some(&0x02),
        "the properties end in 0x02: {:?}",
        String::from_utf8_lossy(props)
    );
    for pair in props.split(|b| *b == 0x02).filter(|p| !p.is_empty()) {
        assert_eq!(
            pair.iter().filter(|b| **b == 0x01).count(),
            1,
            "one name/value separator per pair in {:?}",
            String::from_utf8_lossy(props)
        );
    }
}

fn prop<'a>(m: &'a DecodedMessage, key: &str) -> Option<&'a str> {
    properties::find(&m.properties, key)
}

/// A Java-style client id and a unique key as Java's `MessageClientIDSetter` makes them
/// (32 upper-case hex digits).
fn java_uniq_key(n: u32) -> String {
    format!("7F0000010B2C18B4AAC2{n:012X}")
}

async fn broker() -> (RunningBroker, SocketAddr) {
    let b = start_broker(|_| {}).await;
    let addr = b.broker_addr().expect("a broker address");
    (b, addr)
}

/// UPDATE_AND_CREATE_TOPIC as Java's admin writes it.
async fn create_topic(w: &mut Wire, topic: &str, queues: u32) {
    let ext = [
        ("topic", s(topic)),
        ("defaultTopic", s("TBW102")),
        ("readQueueNums", s(queues)),
        ("writeQueueNums", s(queues)),
        ("perm", s(6)),
        ("topicFilterType", s("SINGLE_TAG")),
        ("topicSysFlag", s(0)),
        ("order", s(false)),
    ];
    let r = w.call(rc::UPDATE_AND_CREATE_TOPIC, Some(&ext), b"").await;
    assert_eq!(r.code(), code::SUCCESS, "creating {topic}: {}", r.header);
}

/// SEND_MESSAGE (10) with the V1 header as Java (`sendSmartMsg=false`) writes it.
fn java_send_v1(topic: &str, queue: i32, props: &str) -> Vec<(&'static str, String)> {
    vec![
        ("batch", s(false)),
        ("bornTimestamp", s(1_700_000_000_000_i64)),
        ("defaultTopic", s("TBW102")),
        ("defaultTopicQueueNums", s(4)),
        ("flag", s(0)),
        ("producerGroup", s("java_pg")),
        ("properties", s(props)),
        ("queueId", s(queue)),
        ("reconsumeTimes", s(0)),
        ("sysFlag", s(0)),
        ("topic", s(topic)),
        ("unitMode", s(false)),
    ]
}

/// SEND_MESSAGE_V2 (310) as Java 4.9.5+ writes it (row 8).
fn java_send_v2(
    topic: &str,
    queue: i32,
    sys_flag: i32,
    props: &str,
) -> Vec<(&'static str, String)> {
    vec![
        ("a", s("java_pg")),
        ("b", s(topic)),
        ("c", s("TBW102")),
        ("d", s(4)),
        ("e", s(queue)),
        ("f", s(sys_flag)),
        ("g", s(1_700_000_000_000_i64)),
        ("h", s(0)),
        ("i", s(props)),
        ("j", s(0)),
        ("k", s(false)),
        ("m", s(false)),
        ("n", s("broker-a")),
    ]
}

/// Java's `MessageDecoder.encodeMessages` (row 12): per message TOTALSIZE, MAGIC 0, CRC 0,
/// FLAG, BODY, short-length properties.
fn java_batch_body(entries: &[(&[u8], String)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (body, props) in entries {
        let total = 4 + 4 + 4 + 4 + 4 + body.len() + 2 + props.len();
        out.extend_from_slice(&(total as i32).to_be_bytes());
        out.extend_from_slice(&0i32.to_be_bytes());
        out.extend_from_slice(&0i32.to_be_bytes());
        out.extend_from_slice(&0i32.to_be_bytes());
        out.extend_from_slice(&(body.len() as i32).to_be_bytes());
        out.extend_from_slice(body);
        out.extend_from_slice(&(props.len() as i16).to_be_bytes());
        out.extend_from_slice(props.as_bytes());
    }
    out
}

/// A Java 4.9 pull (row 15 without a subscription key when `sub` is `None`, as the push
/// consumer sends it; with one, as the lite pull consumer does).
fn java_pull(
    group: &str,
    topic: &str,
    queue: i32,
    offset: i64,
    sub: Option<&str>,
) -> Vec<(&'static str, String)> {
    let mut ext = vec![
        ("commitOffset", s(0)),
        ("consumerGroup", s(group)),
        ("expressionType", s("TAG")),
        ("maxMsgNums", s(32)),
        ("queueId", s(queue)),
        ("queueOffset", s(offset)),
        ("subVersion", s(1_700_000_000_000_i64)),
        ("suspendTimeoutMillis", s(0)),
        ("topic", s(topic)),
    ];
    match sub {
        // Lite pull: sysFlag SUBSCRIPTION | LITE_PULL.
        Some(expr) => {
            ext.push(("subscription", s(expr)));
            ext.push(("sysFlag", s(0x14)));
        }
        // Push: the heartbeat's subscription is used (sysFlag 0: no suspend, no commit).
        None => ext.push(("sysFlag", s(0))),
    }
    ext
}

/// A Java heartbeat (row 13): sorted fields, `codeSet` as ints, `subVersion` in ms, the
/// `%RETRY%group` subscription and `CLIENT_INNER_PRODUCER`.
fn java_heartbeat(client_id: &str, group: &str, topic: &str, tag: &str) -> Vec<u8> {
    let (tags, codes) = if tag == "*" {
        (String::new(), String::new())
    } else {
        (js(tag), properties::tag_hash(tag).to_string())
    };
    format!(
        concat!(
            r#"{{"clientID":"{cid}","consumerDataSet":[{{"consumeFromWhere":"CONSUME_FROM_FIRST_OFFSET","consumeType":"CONSUME_PASSIVELY","#,
            r#""groupName":"{g}","messageModel":"CLUSTERING","subscriptionDataSet":["#,
            r#"{{"classFilterMode":false,"codeSet":[{codes}],"expressionType":"TAG","subString":{sub},"subVersion":1700000000000,"tagsSet":[{tags}],"topic":"{t}"}},"#,
            r#"{{"classFilterMode":false,"codeSet":[],"expressionType":"TAG","subString":"*","subVersion":1700000000001,"tagsSet":[],"topic":"%RETRY%{g}"}}],"#,
            r#""unitMode":false}}],"producerDataSet":[{{"groupName":"CLIENT_INNER_PRODUCER"}}]}}"#
        ),
        cid = client_id,
        g = group,
        codes = codes,
        sub = js(tag),
        tags = tags,
        t = topic,
    )
    .into_bytes()
}

/// Pulls with `ext` until a message arrives (or panics after [`PATIENCE`]); returns the response.
async fn pull_until_found(w: &mut Wire, ext: &[(&'static str, String)]) -> Frame {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let f = w.call(rc::PULL_MESSAGE, Some(ext), b"").await;
        if f.code() == code::SUCCESS {
            return f;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no message within {PATIENCE:?}: {}",
            f.header
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Message `n` as Java 4.9.1+ writes it: its properties (last pair `TAGS`, `KEYS` or
/// `UNIQ_KEY`, as HashMap order puts them), tag and keys.
fn java_message(n: u32) -> (String, String, String) {
    let uniq = java_uniq_key(n);
    let tag = format!("Tag{n}");
    let keys = format!("key{n}a key{n}b");
    let props = match n % 3 {
        0 => java_props(&[("KEYS", &keys), ("UNIQ_KEY", &uniq), ("WAIT", "true"), ("TAGS", &tag)]),
        1 => java_props(&[("UNIQ_KEY", &uniq), ("WAIT", "true"), ("TAGS", &tag), ("KEYS", &keys)]),
        _ => java_props(&[("KEYS", &keys), ("WAIT", "true"), ("TAGS", &tag), ("UNIQ_KEY", &uniq)]),
    };
    (props, tag, keys)
}

/// Asserts a pulled message kept every property the client sent, in canonical form.
fn assert_intact(m: &DecodedMessage, tag: &str, keys: &str, uniq: &str) {
    assert_canonical(&m.properties);
    assert_eq!(
        prop(m, "TAGS"),
        Some(tag),
        "tag intact: {:?}",
        String::from_utf8_lossy(&m.properties)
    );
    assert_eq!(
        prop(m, "KEYS"),
        Some(keys),
        "keys intact: {:?}",
        String::from_utf8_lossy(&m.properties)
    );
    assert_eq!(prop(m, "UNIQ_KEY"), Some(uniq), "msgId is the client's UNIQ_KEY");
    assert_eq!(prop(m, "WAIT"), Some("true"));
    assert_eq!(prop(m, "CLUSTER"), Some("DefaultCluster"), "the broker's CLUSTER property");
}

/// Row 1, row 2: a Java 4.9.1+ producer (no trailing 0x02, last pair `TAGS`, `KEYS` or
/// `UNIQ_KEY`) sending by SEND_MESSAGE and SEND_MESSAGE_V2; a consumer pulling with and without
/// a tag filter gets every property back exactly.
#[tokio::test]
async fn given_java_properties_without_trailing_separator_when_sent_and_pulled_should_come_back_intact(
) {
    let (b, addr) = broker().await;
    let mut w = Wire::open(addr, Client::Java49).await;
    let topic = unique("JavaProps");
    create_topic(&mut w, &topic, 1).await;
    let mut sent = Vec::new();
    for n in 0..6u32 {
        let (props, tag, keys) = java_message(n);
        let ext = if n % 2 == 0 {
            java_send_v1(&topic, 0, &props)
        } else {
            java_send_v2(&topic, 0, 0, &props)
        };
        let code = if n % 2 == 0 { rc::SEND_MESSAGE } else { rc::SEND_MESSAGE_V2 };
        let r = w.call(code, Some(&ext), format!("body{n}").as_bytes()).await;
        assert_eq!(r.code(), code::SUCCESS, "send {n}: {}", r.header);
        sent.push((tag, keys, java_uniq_key(n)));
    }

    // Without a filter (lite pull, subscription `*`).
    let group = unique("java_cg");
    let r = pull_until_found(&mut w, &java_pull(&group, &topic, 0, 0, Some("*"))).await;
    let got = r.records();
    assert_eq!(got.len(), sent.len(), "every message pulled");
    for (m, (tag, keys, uniq)) in got.iter().zip(&sent) {
        assert_intact(m, tag, keys, uniq);
    }

    // With a tag filter from the heartbeat (push pull, no subscription key): each tag finds
    // exactly its message, which the client's own tag re-check then keeps.
    let group = unique("java_push");
    let hb = java_heartbeat("127.0.0.1@java", &group, &topic, "Tag3");
    let r = w.call(rc::HEART_BEAT, None, &hb).await;
    assert_eq!(r.code(), code::SUCCESS, "heartbeat: {}", r.header);
    let r = pull_until_found(&mut w, &java_pull(&group, &topic, 0, 0, None)).await;
    let got = r.records();
    assert_eq!(got.len(), 1, "only the Tag3 message passes the filter");
    let (tag, keys, uniq) = &sent[3];
    assert_intact(&got[0], tag, keys, uniq);
    b.shutdown().await;
}

/// Row 12: a Java batch (320): entries without a trailing 0x02, header `i="WAIT\x01true"`,
/// `m="true"`; every entry comes back intact, its msgId (UNIQ_KEY) the client's.
#[tokio::test]
async fn given_a_java_batch_without_trailing_separators_when_pulled_should_keep_every_property() {
    let (b, addr) = broker().await;
    let mut w = Wire::open(addr, Client::Java5).await;
    let topic = unique("JavaBatch");
    create_topic(&mut w, &topic, 1).await;
    let mut entries = Vec::new();
    let mut sent = Vec::new();
    for n in 10..16u32 {
        let (props, tag, keys) = java_message(n);
        entries.push((format!("batch{n}").into_bytes(), props));
        sent.push((tag, keys, java_uniq_key(n)));
    }
    let refs: Vec<(&[u8], String)> =
        entries.iter().map(|(b, p)| (b.as_slice(), p.clone())).collect();
    let mut ext = java_send_v2(&topic, 0, 0, "WAIT\u{1}true");
    for (k, v) in &mut ext {
        if *k == "m" {
            *v = s(true);
        }
    }
    let r = w.call(rc::SEND_BATCH_MESSAGE, Some(&ext), &java_batch_body(&refs)).await;
    assert_eq!(r.code(), code::SUCCESS, "batch: {}", r.header);

    let group = unique("java_cg");
    let got = pull_until_found(&mut w, &java_pull(&group, &topic, 0, 0, Some("*"))).await.records();
    assert_eq!(got.len(), sent.len());
    for (m, (tag, keys, uniq)) in got.iter().zip(&sent) {
        assert_intact(m, tag, keys, uniq);
    }
    let tag = &sent[2].0;
    let got = pull_until_found(&mut w, &java_pull(&group, &topic, 0, 0, Some(tag))).await.records();
    assert_eq!(got.len(), 1, "the tag filter finds exactly its entry");
    assert_intact(&got[0], tag, &sent[2].1, &sent[2].2);
    b.shutdown().await;
}

/// Row 1: a Java message whose last pair is `DELAY` is delayed, then delivered with its other
/// properties intact.
#[tokio::test]
async fn given_java_properties_ending_in_delay_when_sent_should_deliver_later_with_properties_intact(
) {
    let (b, addr) = broker().await;
    let mut w = Wire::open(addr, Client::Java49).await;
    let topic = unique("JavaDelay");
    create_topic(&mut w, &topic, 1).await;
    let uniq = java_uniq_key(99);
    // Level 2 = 5 s.
    let props = java_props(&[
        ("UNIQ_KEY", &uniq),
        ("TAGS", "TagD"),
        ("KEYS", "kd"),
        ("WAIT", "true"),
        ("DELAY", "2"),
    ]);
    let r = w.call(rc::SEND_MESSAGE_V2, Some(&java_send_v2(&topic, 0, 0, &props)), b"later").await;
    assert_eq!(r.code(), code::SUCCESS, "send: {}", r.header);
    let group = unique("java_cg");
    let pull = java_pull(&group, &topic, 0, 0, Some("*"));
    let first = w.call(rc::PULL_MESSAGE, Some(&pull), b"").await;
    assert_ne!(first.code(), code::SUCCESS, "a delayed message is not delivered at once");
    let got = pull_until_found(&mut w, &pull).await.records();
    assert_eq!(got.len(), 1);
    let m = &got[0];
    assert_canonical(&m.properties);
    assert_eq!(prop(m, "TAGS"), Some("TagD"));
    assert_eq!(prop(m, "KEYS"), Some("kd"));
    assert_eq!(prop(m, "UNIQ_KEY"), Some(uniq.as_str()));
    assert_eq!(prop(m, "REAL_TOPIC"), Some(topic.as_str()));
    assert_eq!(prop(m, "DELAY"), None, "DELAY is removed on delivery, as RocketMQ does");
    assert_eq!(&m.body[..], b"later");
    b.shutdown().await;
}

/// Row 1 on the lookup paths: VIEW_MESSAGE_BY_ID and QUERY_MESSAGE (by the last pair `KEYS`)
/// answer the message with its properties intact and canonical.
#[tokio::test]
async fn given_java_properties_without_trailing_separator_when_looked_up_should_come_back_intact() {
    let (b, addr) = broker().await;
    let mut w = Wire::open(addr, Client::Java49).await;
    let topic = unique("JavaView");
    create_topic(&mut w, &topic, 1).await;
    let uniq = java_uniq_key(7);
    let props =
        java_props(&[("UNIQ_KEY", &uniq), ("WAIT", "true"), ("TAGS", "TagV"), ("KEYS", "viewkey")]);
    let r = w.call(rc::SEND_MESSAGE_V2, Some(&java_send_v2(&topic, 0, 0, &props)), b"v").await;
    assert_eq!(r.code(), code::SUCCESS, "send: {}", r.header);
    let offset_msg_id = r.ext("msgId").expect("an offset msgId").to_string();
    let phys = i64::from_str_radix(&offset_msg_id[16..], 16).expect("hex commit-log offset");

    let r = w.call(rc::VIEW_MESSAGE_BY_ID, Some(&[("offset", s(phys))]), b"").await;
    assert_eq!(r.code(), code::SUCCESS, "view: {}", r.header);
    let m = &r.records()[0];
    assert_canonical(&m.properties);
    assert_eq!(prop(m, "KEYS"), Some("viewkey"));
    assert_eq!(prop(m, "UNIQ_KEY"), Some(uniq.as_str()));

    let ext = [
        ("beginTimestamp", s(0)),
        ("endTimestamp", s(i64::MAX)),
        ("key", s("viewkey")),
        ("maxNum", s(32)),
        ("topic", s(&topic)),
    ];
    let r = w.call(rc::QUERY_MESSAGE, Some(&ext), b"").await;
    assert_eq!(r.code(), code::SUCCESS, "query by the last key: {}", r.header);
    let m = &r.records()[0];
    assert_canonical(&m.properties);
    assert_eq!(prop(m, "KEYS"), Some("viewkey"));
    assert_eq!(prop(m, "TAGS"), Some("TagV"));
    b.shutdown().await;
}

/// Row 22: CONSUMER_SEND_MSG_BACK of a Java message (no trailing 0x02) puts it in the retry
/// topic with every property intact plus the retry properties, canonical.
#[tokio::test]
async fn given_java_properties_without_trailing_separator_when_sent_back_should_retry_intact() {
    let (b, addr) = broker().await;
    let mut w = Wire::open(addr, Client::Java49).await;
    let topic = unique("JavaBack");
    create_topic(&mut w, &topic, 1).await;
    let uniq = java_uniq_key(8);
    let props =
        java_props(&[("UNIQ_KEY", &uniq), ("WAIT", "true"), ("KEYS", "bk"), ("TAGS", "TagB")]);
    let r = w.call(rc::SEND_MESSAGE_V2, Some(&java_send_v2(&topic, 0, 0, &props)), b"b").await;
    assert_eq!(r.code(), code::SUCCESS, "send: {}", r.header);
    let group = unique("java_cg");
    let got = pull_until_found(&mut w, &java_pull(&group, &topic, 0, 0, Some("*"))).await.records();
    let ext = [
        ("delayLevel", s(1)),
        ("group", s(&group)),
        ("maxReconsumeTimes", s(16)),
        ("offset", s(got[0].physical_offset)),
        ("originMsgId", s(&uniq)),
        ("originTopic", s(&topic)),
        ("unitMode", s(false)),
    ];
    let r = w.call(rc::CONSUMER_SEND_MSG_BACK, Some(&ext), b"").await;
    assert_eq!(r.code(), code::SUCCESS, "send back: {}", r.header);
    let retry = format!("%RETRY%{group}");
    let got = pull_until_found(&mut w, &java_pull(&group, &retry, 0, 0, Some("*"))).await.records();
    let m = &got[0];
    assert_canonical(&m.properties);
    assert_eq!(prop(m, "TAGS"), Some("TagB"));
    assert_eq!(prop(m, "KEYS"), Some("bk"));
    assert_eq!(prop(m, "UNIQ_KEY"), Some(uniq.as_str()));
    assert_eq!(prop(m, "RETRY_TOPIC"), Some(topic.as_str()));
    assert_eq!(m.reconsume_times, 1);
    b.shutdown().await;
}

/// Transactions (issue 12) as Java 5.x writes them: a half message by SEND_MESSAGE_V2 with
/// sysFlag 4 and `TRAN_MSG`/`PGROUP` among properties without a trailing 0x02 (row 1), a
/// heartbeat naming the producer group, END_TRANSACTION one-way (row 6, flag 2) with fastjson's
/// sorted fields; the broker's CHECK_TRANSACTION_STATE is one-way with every field a JSON
/// string, and its answer commits the message.
#[tokio::test]
async fn given_a_java_transaction_left_unknown_when_checked_and_committed_should_deliver_it_once() {
    let b = start_broker(|c| {
        c.core.transaction_time_out = 100;
        c.core.transaction_check_interval = 100;
    })
    .await;
    let addr = b.broker_addr().expect("a broker address");
    let mut w = Wire::open(addr, Client::Java5).await;
    let topic = unique("JavaTx");
    create_topic(&mut w, &topic, 4).await;
    let hb = br#"{"clientID":"127.0.0.1@java_tx","consumerDataSet":[],"producerDataSet":[{"groupName":"java_pg"},{"groupName":"CLIENT_INNER_PRODUCER"}]}"#;
    let r = w.call(rc::HEART_BEAT, None, hb).await;
    assert_eq!(r.code(), code::SUCCESS, "heartbeat: {}", r.header);
    let uniq = java_uniq_key(37);
    let props = java_props(&[
        ("KEYS", "tk"),
        ("TRAN_MSG", "true"),
        ("UNIQ_KEY", &uniq),
        ("WAIT", "true"),
        ("TAGS", "TagX"),
        ("PGROUP", "java_pg"),
    ]);
    let r = w.call(rc::SEND_MESSAGE_V2, Some(&java_send_v2(&topic, 1, 4, &props)), b"tx").await;
    assert_eq!(r.code(), code::SUCCESS, "a half message is stored: {}", r.header);
    assert_eq!(r.ext("transactionId"), Some(uniq.as_str()), "transactionId: {}", r.header);
    let queue_offset = r.ext("queueOffset").expect("a queueOffset").to_string();
    let id = baiji::remoting::msgid::decode_offset_msg_id(r.ext("msgId").expect("a msgId"))
        .expect("an offset msgId");
    let end = |state: i32, from_check: bool, topic: &str| {
        vec![
            ("bname", s("baiji-a")),
            ("commitLogOffset", s(id.commit_log_offset)),
            ("commitOrRollback", s(state)),
            ("fromTransactionCheck", s(from_check)),
            ("msgId", s(&uniq)),
            ("producerGroup", s("java_pg")),
            ("topic", s(topic)),
            ("tranStateTableOffset", s(&queue_offset)),
            ("transactionId", s(&uniq)),
        ]
    };
    w.send(rc::END_TRANSACTION, Some(&end(0, false, &topic)), b"", true).await;
    let check = loop {
        let f = w.read_frame(PATIENCE).await.expect("the broker checks the transaction");
        if !f.is_response() && f.code() == rc::CHECK_TRANSACTION_STATE {
            break f;
        }
    };
    assert_eq!(check.header["flag"].as_i64(), Some(2), "one-way: {}", check.header);
    for (k, v) in [
        ("topic", "RMQ_SYS_TRANS_HALF_TOPIC".to_string()),
        ("tranStateTableOffset", queue_offset.clone()),
        ("commitLogOffset", id.commit_log_offset.to_string()),
        ("msgId", uniq.clone()),
        ("transactionId", uniq.clone()),
        ("bname", "baiji-a".to_string()),
    ] {
        assert_eq!(check.ext(k), Some(v.as_str()), "{k} as a string: {}", check.header);
    }
    assert!(check.ext("offsetMsgId").is_some(), "offsetMsgId: {}", check.header);
    let m = &check.records()[0];
    assert_canonical(&m.properties);
    assert_eq!((m.topic.as_str(), m.queue_id), (topic.as_str(), 1), "real topic and queue");
    assert_eq!(prop(m, "PGROUP"), Some("java_pg"), "the last Java pair is intact");
    assert_eq!(prop(m, "TRANSACTION_CHECK_TIMES"), Some("1"));
    w.send(rc::END_TRANSACTION, Some(&end(8, true, "RMQ_SYS_TRANS_HALF_TOPIC")), b"", true).await;
    let got = pull_until_found(&mut w, &java_pull("java_tx_cg", &topic, 1, 0, Some("*"))).await;
    let got = got.records();
    assert_eq!(got.len(), 1, "delivered once");
    let m = &got[0];
    assert_canonical(&m.properties);
    assert_eq!(m.sys_flag & 0xC, 8, "TRANSACTION_COMMIT_TYPE");
    assert_eq!(prop(m, "TRAN_MSG"), None);
    assert_eq!(prop(m, "TAGS"), Some("TagX"));
    assert_eq!(prop(m, "UNIQ_KEY"), Some(uniq.as_str()));
    b.shutdown().await;
}

/// A unique key as Go's `primitive.CreateUniqID` makes it (row 10): upper-case prefix,
/// lower-case time/counter half.
fn go_uniq_key(n: u32) -> String {
    format!("0A0000070C8818B4{n:016x}")
}

/// A properties string as Go's `MarshallProperties` writes it: every pair ends in 0x02.
fn go_props(pairs: &[(&str, &str)]) -> String {
    pairs.iter().map(|(k, v)| format!("{k}\u{1}{v}\u{2}")).collect()
}

/// SEND_MESSAGE (10) with the V1 header as Go writes it for a single message (row 9).
fn go_send(topic: &str, queue: i32, props: &str) -> Vec<(&'static str, String)> {
    vec![
        ("producerGroup", s("go_pg")),
        ("topic", s(topic)),
        ("queueId", s(queue)),
        ("sysFlag", s(0)),
        ("bornTimestamp", s(1_700_000_000_000_i64)),
        ("flag", s(0)),
        ("properties", s(props)),
        ("reconsumeTimes", s(0)),
        ("unitMode", s(false)),
        ("maxReconsumeTimes", s(0)),
        ("defaultTopic", s("TBW102")),
        ("defaultTopicQueueNums", s(4)),
        ("batch", s(false)),
        ("bname", s("broker-a")),
    ]
}

/// A Go push-consumer pull (row 17): `subscription:""`, `subVersion:"0"`, 20 s suspend,
/// `bname`, no `maxMsgBytes`; sysFlag 2 (suspend).
fn go_pull(group: &str, topic: &str, queue: i32, offset: i64) -> Vec<(&'static str, String)> {
    vec![
        ("consumerGroup", s(group)),
        ("topic", s(topic)),
        ("queueId", s(queue)),
        ("queueOffset", s(offset)),
        ("maxMsgNums", s(32)),
        ("sysFlag", s(2)),
        ("commitOffset", s(0)),
        ("suspendTimeoutMillis", s(20_000)),
        ("subscription", s("")),
        ("subVersion", s(0)),
        ("expressionType", s("TAG")),
        ("bname", s("broker-a")),
    ]
}

/// A Go heartbeat (row 14): `codeSet` as JSON strings, `subVersion` in nanoseconds, the raw
/// `subString` with the tags trimmed into `tagsSet`; Go's client hard-codes `consumeType:"PUSH"`
/// (not a Java enum name), `CLUSTERING` and `CONSUME_FROM_FIRST_OFFSET`.
fn go_heartbeat(client_id: &str, group: &str, topic: &str, expr: &str) -> Vec<u8> {
    let tags: Vec<&str> =
        if expr == "*" { Vec::new() } else { expr.split("||").map(str::trim).collect() };
    let tags_set: Vec<String> = tags.iter().map(|t| js(t)).collect();
    let code_set: Vec<String> =
        tags.iter().map(|t| js(&properties::tag_hash(t).to_string())).collect();
    format!(
        concat!(
            r#"{{"clientID":"{cid}","producerDataSet":[{{"groupName":"go_pg"}}],"consumerDataSet":[{{"groupName":"{g}","consumeType":"PUSH","#,
            r#""messageModel":"CLUSTERING","consumeFromWhere":"CONSUME_FROM_FIRST_OFFSET","subscriptionDataSet":["#,
            r#"{{"classFilterMode":false,"topic":"{t}","subString":{sub},"tagsSet":[{tags}],"codeSet":[{codes}],"subVersion":1700000000123456789,"expressionType":"TAG"}},"#,
            r#"{{"classFilterMode":false,"topic":"%RETRY%{g}","subString":"*","tagsSet":[],"codeSet":[],"subVersion":1700000000123456790,"expressionType":"TAG"}}],"#,
            r#""unitMode":false}}]}}"#
        ),
        cid = client_id,
        g = group,
        t = topic,
        sub = js(expr),
        tags = tags_set.join(","),
        codes = code_set.join(","),
    )
    .into_bytes()
}

/// Rows 9, 14, 17: a Go producer sends tagged messages with code 10; a Go push consumer whose
/// heartbeat carries `codeSet` as strings pulls with `subscription:""` and gets exactly its
/// tag's messages, every response decodable by Go's strict decoder.
#[tokio::test]
async fn given_a_go_consumer_with_a_tag_subscription_when_pulling_should_get_its_tagged_messages() {
    let (b, addr) = broker().await;
    let mut w = Wire::open(addr, Client::Go).await;
    let topic = unique("GoTags");
    create_topic(&mut w, &topic, 1).await;
    for (n, tag) in ["TagA", "TagB", "TagA", "TagC"].iter().enumerate() {
        let uniq = go_uniq_key(n as u32);
        let props =
            go_props(&[("TAGS", tag), ("KEYS", "gk"), ("UNIQ_KEY", &uniq), ("WAIT", "true")]);
        let r = w.call(rc::SEND_MESSAGE, Some(&go_send(&topic, 0, &props)), b"go").await;
        assert_eq!(r.code(), code::SUCCESS, "go send {n}: {}", r.header);
        assert!(r.ext("msgId").is_some() && r.ext("queueOffset").is_some(), "{}", r.header);
    }
    let group = unique("go_cg");
    let hb = go_heartbeat("10.0.0.7@4242#1700000000000000000", &group, &topic, "TagA || TagC");
    let r = w.call(rc::HEART_BEAT, Some(&[]), &hb).await;
    assert_eq!(r.code(), code::SUCCESS, "a Go heartbeat is accepted: {}", r.header);

    let r = pull_until_found(&mut w, &go_pull(&group, &topic, 0, 0)).await;
    let got = r.records();
    let tags: Vec<_> = got.iter().map(|m| prop(m, "TAGS").unwrap_or("?").to_string()).collect();
    assert_eq!(tags, ["TagA", "TagA", "TagC"], "the Go subscription filters on the broker");
    for (m, n) in got.iter().zip([0u32, 2, 3]) {
        assert_canonical(&m.properties);
        assert_eq!(prop(m, "UNIQ_KEY"), Some(go_uniq_key(n).as_str()));
    }
    b.shutdown().await;
}

/// Asserts the four `@CFNotNull` fields of Java's `PullMessageResponseHeader` (row 18) are
/// present as integers.
fn assert_java_pull_header(f: &Frame, what: &str) {
    for key in ["suggestWhichBrokerId", "nextBeginOffset", "minOffset", "maxOffset"] {
        let v = f.ext(key).unwrap_or_else(|| panic!("{what}: {key} missing: {}", f.header));
        assert!(v.parse::<i64>().is_ok(), "{what}: {key}={v:?} is not a long: {}", f.header);
    }
}

/// Row 18: every pull status a Java consumer decodes (found, not found, not found after a
/// suspended pull's hold, retry immediately, offset moved) carries `suggestWhichBrokerId`,
/// `nextBeginOffset`, `minOffset` and `maxOffset`.
#[tokio::test]
async fn given_java_pulls_of_every_status_should_answer_the_four_mandatory_fields() {
    let (b, addr) = broker().await;
    let mut w = Wire::open(addr, Client::Java5).await;
    let topic = unique("JavaPullStatus");
    create_topic(&mut w, &topic, 2).await;
    let props = java_props(&[("UNIQ_KEY", &java_uniq_key(1)), ("TAGS", "TagA")]);
    let r = w.call(rc::SEND_MESSAGE_V2, Some(&java_send_v2(&topic, 0, 0, &props)), b"m").await;
    assert_eq!(r.code(), code::SUCCESS, "{}", r.header);
    let group = unique("java_cg");

    let found = pull_until_found(&mut w, &java_pull(&group, &topic, 0, 0, Some("*"))).await;
    assert_java_pull_header(&found, "found");

    let r = w.call(rc::PULL_MESSAGE, Some(&java_pull(&group, &topic, 1, 0, Some("*"))), b"").await;
    assert_eq!(r.code(), code::PULL_NOT_FOUND, "{}", r.header);
    assert_java_pull_header(&r, "not found");

    let mut held = java_pull(&group, &topic, 1, 0, Some("*"));
    for (k, v) in &mut held {
        match *k {
            "sysFlag" => *v = s(0x14 | 0x2),
            "suspendTimeoutMillis" => *v = s(200),
            _ => {}
        }
    }
    let r = w.call(rc::PULL_MESSAGE, Some(&held), b"").await;
    assert_eq!(r.code(), code::PULL_NOT_FOUND, "after the hold: {}", r.header);
    assert_java_pull_header(&r, "not found after a suspended pull's hold");

    let r =
        w.call(rc::PULL_MESSAGE, Some(&java_pull(&group, &topic, 0, 0, Some("TagZ"))), b"").await;
    assert_eq!(r.code(), code::PULL_RETRY_IMMEDIATELY, "{}", r.header);
    assert_java_pull_header(&r, "retry immediately");

    let r = w.call(rc::PULL_MESSAGE, Some(&java_pull(&group, &topic, 0, 99, Some("*"))), b"").await;
    assert_eq!(r.code(), code::PULL_OFFSET_MOVED, "{}", r.header);
    assert_java_pull_header(&r, "offset moved");
    b.shutdown().await;
}

/// Row 11: Java 5.x compresses bodies over 4 KiB with `sysFlag = 1 | type << 8` (0x301 zlib,
/// 0x101 LZ4, 0x201 ZSTD); the consumer picks its decompressor from those bits, so the pulled
/// record carries the same sysFlag and the body bytes as sent.
#[tokio::test]
async fn given_java5_compressed_bodies_when_pulled_should_keep_sys_flag_and_bytes() {
    let (b, addr) = broker().await;
    let mut w = Wire::open(addr, Client::Java5).await;
    let topic = unique("JavaCompressed");
    create_topic(&mut w, &topic, 1).await;
    let flags = [0x301, 0x101, 0x201, 0x1];
    let bodies: Vec<Vec<u8>> = flags
        .iter()
        .map(|f| (0..600u32).map(|i| ((i * 7 + *f as u32) % 251) as u8).collect())
        .collect();
    for (n, (flag, body)) in flags.iter().zip(&bodies).enumerate() {
        let props = java_props(&[("UNIQ_KEY", &java_uniq_key(n as u32)), ("TAGS", "TagZ")]);
        let r =
            w.call(rc::SEND_MESSAGE_V2, Some(&java_send_v2(&topic, 0, *flag, &props)), body).await;
        assert_eq!(r.code(), code::SUCCESS, "{}", r.header);
    }
    let group = unique("java_cg");
    let got =
        pull_until_found(&mut w, &java_pull(&group, &topic, 0, 0, Some("TagZ"))).await.records();
    assert_eq!(got.len(), flags.len());
    for ((m, flag), body) in got.iter().zip(flags).zip(&bodies) {
        assert_eq!(m.sys_flag, flag, "the compression bits come back as sent");
        assert_eq!(&m.body[..], &body[..], "the compressed bytes come back as sent");
        assert!(m.body_crc_matches());
    }
    b.shutdown().await;
}

/// Row 13: a Java 5.x heartbeat (with `heartbeatFingerprint` and `withoutSub`) is accepted, and
/// its answer does not advertise heartbeat V2. baiji keeps no per-client fingerprint, and a V2
/// client that believed it would stop sending subscriptions, which baiji's broker-side tag
/// filter and group membership are built from; so V2 stays off (`IS_SUPPORT_HEART_BEAT_V2`
/// absent or `"false"`, which Java's `Boolean.parseBoolean` reads as false).
#[tokio::test]
async fn given_a_java5_heartbeat_should_be_accepted_without_advertising_heartbeat_v2() {
    let (b, addr) = broker().await;
    let mut w = Wire::open(addr, Client::Java5).await;
    let topic = unique("JavaHb5");
    create_topic(&mut w, &topic, 1).await;
    let group = unique("java5_cg");
    let mut hb =
        String::from_utf8(java_heartbeat("127.0.0.1@java5", &group, &topic, "TagA")).unwrap();
    hb.insert_str(1, "\"heartbeatFingerprint\":0,");
    hb.pop();
    hb.push_str(",\"withoutSub\":false}");
    let r = w.call(rc::HEART_BEAT, None, hb.as_bytes()).await;
    assert_eq!(r.code(), code::SUCCESS, "{}", r.header);
    assert!(
        !r.ext("IS_SUPPORT_HEART_BEAT_V2").is_some_and(|v| v.eq_ignore_ascii_case("true")),
        "heartbeat V2 is not advertised: {}",
        r.header
    );
    let r =
        w.call(rc::GET_CONSUMER_LIST_BY_GROUP, Some(&[("consumerGroup", s(&group))]), b"").await;
    assert_eq!(r.code(), code::SUCCESS, "{}", r.header);
    let body: Value = serde_json::from_slice(&r.body).expect("a JSON body");
    assert_eq!(body["consumerIdList"], serde_json::json!(["127.0.0.1@java5"]), "row 21");
    b.shutdown().await;
}

/// Row 3: Java 4.9 writes no `extFields` key at all for requests without a custom header
/// (HEART_BEAT above; LOCK/UNLOCK here, 106 and 206 at the name server).
#[tokio::test]
async fn given_java49_requests_without_an_ext_fields_key_should_be_served() {
    let (b, addr) = broker().await;
    let mut w = Wire::open(addr, Client::Java49).await;
    let topic = unique("JavaLock");
    create_topic(&mut w, &topic, 2).await;
    let group = unique("java_cg");
    let lock = format!(
        r#"{{"clientId":"127.0.0.1@java","consumerGroup":"{group}","mqSet":[{{"brokerName":"baiji-a","queueId":0,"topic":"{topic}"}},{{"brokerName":"baiji-a","queueId":1,"topic":"{topic}"}}]}}"#
    );
    let r = w.call(rc::LOCK_BATCH_MQ, None, lock.as_bytes()).await;
    assert_eq!(r.code(), code::SUCCESS, "LOCK_BATCH_MQ: {}", r.header);
    let body: Value = serde_json::from_slice(&r.body).expect("a JSON body");
    let locked = body["lockOKMQSet"].as_array().expect("lockOKMQSet (row 21)");
    assert_eq!(locked.len(), 2, "{body}");
    for mq in locked {
        assert!(mq["queueId"].is_i64(), "queueId is an int: {mq}");
        assert!(mq["topic"].is_string() && mq["brokerName"].is_string(), "{mq}");
    }
    let r = w.call(rc::UNLOCK_BATCH_MQ, None, lock.as_bytes()).await;
    assert_eq!(r.code(), code::SUCCESS, "UNLOCK_BATCH_MQ: {}", r.header);

    let ns = b.namesrv_addr().expect("an embedded name server");
    let mut n = Wire::open(ns, Client::Java49).await;
    let r = n.call(rc::GET_BROKER_CLUSTER_INFO, None, b"").await;
    assert_eq!(r.code(), code::SUCCESS, "106: {}", r.header);
    let r = n.call(rc::GET_ALL_TOPIC_LIST_FROM_NAMESERVER, None, b"").await;
    assert_eq!(r.code(), code::SUCCESS, "206: {}", r.header);
    b.shutdown().await;
}

/// What Go's `DecodeMessage` reads from a pull body (row 19): field by field, never skipping by
/// TOTALSIZE, a 1-byte topic length whatever the magic, host widths from sysFlag 0x10/0x20.
/// Returns (topic, properties, body) per record; panics where Go would misread.
fn go_decode(mut b: &[u8]) -> Vec<(String, Vec<u8>, Vec<u8>)> {
    fn take<'a>(b: &mut &'a [u8], n: usize) -> &'a [u8] {
        assert!(b.len() >= n, "Go would read past the body");
        let (head, rest) = b.split_at(n);
        *b = rest;
        head
    }
    fn int(b: &mut &[u8]) -> i32 {
        i32::from_be_bytes(take(b, 4).try_into().unwrap())
    }
    let mut out = Vec::new();
    while !b.is_empty() {
        let start = b.len();
        let total = int(&mut b) as usize;
        let _magic = int(&mut b);
        take(&mut b, 4 + 4 + 4 + 8 + 8); // crc, queue, flag, queue offset, phys offset
        let sys_flag = int(&mut b);
        take(&mut b, 8); // born timestamp
        take(&mut b, if sys_flag & 0x10 != 0 { 20 } else { 8 });
        take(&mut b, 8); // store timestamp
        take(&mut b, if sys_flag & 0x20 != 0 { 20 } else { 8 });
        take(&mut b, 4 + 8); // reconsume times, prepared tx offset
        let body_len = int(&mut b) as usize;
        let body = take(&mut b, body_len).to_vec();
        let topic_len = take(&mut b, 1)[0] as usize;
        let topic = String::from_utf8(take(&mut b, topic_len).to_vec()).expect("a UTF-8 topic");
        let props_len = u16::from_be_bytes(take(&mut b, 2).try_into().unwrap()) as usize;
        let props = take(&mut b, props_len).to_vec();
        assert_eq!(start - b.len(), total, "field-by-field reading ends exactly at TOTALSIZE");
        out.push((topic, props, body));
    }
    out
}

/// Rows 4, 5, 10, 19, 20, 22: a Go client's batch (320, entries without UNIQ_KEY, `i=""`,
/// `l="0"`), its field-by-field body decoding, its offsets (QUERY answered 22 for an unknown
/// offset, UPDATE_CONSUMER_OFFSET sent without the one-way flag and answered), and its
/// send-back; every answer decodable by Go's strict header decoder.
#[tokio::test]
async fn given_a_go_client_when_batching_committing_and_sending_back_should_decode_every_answer() {
    let (b, addr) = broker().await;
    let mut w = Wire::open(addr, Client::Go).await;
    let topic = unique("GoBatch");
    create_topic(&mut w, &topic, 2).await;
    let entries: Vec<(Vec<u8>, String)> = (0..3)
        .map(|n| {
            (
                format!("gb{n}").into_bytes(),
                go_props(&[("TAGS", "TagG"), ("KEYS", &format!("k{n}"))]),
            )
        })
        .collect();
    let refs: Vec<(&[u8], String)> =
        entries.iter().map(|(b, p)| (b.as_slice(), p.clone())).collect();
    let mut ext = java_send_v2(&topic, 0, 0, "");
    for (k, v) in &mut ext {
        match *k {
            "m" => *v = s(true),
            "a" => *v = s("go_pg"),
            _ => {}
        }
    }
    ext.push(("l", s(0)));
    let r = w.call(rc::SEND_BATCH_MESSAGE, Some(&ext), &java_batch_body(&refs)).await;
    assert_eq!(r.code(), code::SUCCESS, "go batch: {}", r.header);
    assert_eq!(r.ext("msgId").map(|ids| ids.split(',').count()), Some(3), "{}", r.header);

    let group = unique("go_cg");
    let hb = go_heartbeat("10.0.0.7@4243#1", &group, &topic, "*");
    let r = w.call(rc::HEART_BEAT, Some(&[]), &hb).await;
    assert_eq!(r.code(), code::SUCCESS, "{}", r.header);
    let r = pull_until_found(&mut w, &go_pull(&group, &topic, 0, 0)).await;
    let pulled = r.records();
    let decoded = go_decode(&r.body);
    assert_eq!(decoded.len(), 3);
    for (n, (t, props, body)) in decoded.iter().enumerate() {
        assert_eq!(t, &topic);
        assert_eq!(body, &format!("gb{n}").into_bytes());
        assert_canonical(props);
        assert_eq!(properties::find(props, "KEYS"), Some(format!("k{n}").as_str()));
        assert!(
            properties::find(props, "UNIQ_KEY").is_some(),
            "the broker gives batch entries an id"
        );
    }

    // Offsets: unknown on an empty queue answers 22; a commit without the one-way flag is
    // answered and stored.
    let q = |queue: i32| {
        vec![
            ("consumerGroup", s(&group)),
            ("topic", s(&topic)),
            ("queueId", s(queue)),
            ("bname", s("baiji-a")),
        ]
    };
    let r = w.call(rc::QUERY_CONSUMER_OFFSET, Some(&q(1)), b"").await;
    assert_eq!(r.code(), code::QUERY_NOT_FOUND, "row 20: {}", r.header);
    let mut commit = q(0);
    commit.push(("commitOffset", s(2)));
    let opaque = w.send(rc::UPDATE_CONSUMER_OFFSET, Some(&commit), b"", true).await;
    let r =
        w.response(opaque, PATIENCE).await.expect("a request without the one-way flag is answered");
    assert_eq!(r.code(), code::SUCCESS, "{}", r.header);
    let r = w.call(rc::QUERY_CONSUMER_OFFSET, Some(&q(0)), b"").await;
    assert_eq!((r.code(), r.ext("offset")), (code::SUCCESS, Some("2")), "{}", r.header);

    // Send-back (row 22), as Go's buildSendBackRequest writes it.
    // (The commit above lets the broker reclaim the first two; send back one it holds.)
    let back = [
        ("group", s(&group)),
        ("offset", s(pulled[2].physical_offset)),
        ("delayLevel", s(1)),
        ("originMsgId", s(prop(&pulled[2], "UNIQ_KEY").unwrap_or_default())),
        ("originTopic", s(&topic)),
        ("unitMode", s(false)),
        ("maxReconsumeTimes", s(16)),
        ("bname", s("baiji-a")),
    ];
    let r = w.call(rc::CONSUMER_SEND_MSG_BACK, Some(&back), b"").await;
    assert_eq!(r.code(), code::SUCCESS, "go send-back: {}", r.header);

    // Lock and consumer list as Go decodes them (row 21).
    let lock = format!(
        r#"{{"consumerGroup":"{group}","clientId":"10.0.0.7@4243#1","mqSet":[{{"topic":"{topic}","brokerName":"baiji-a","queueId":0}}]}}"#
    );
    let r = w.call(rc::LOCK_BATCH_MQ, Some(&[]), lock.as_bytes()).await;
    assert_eq!(r.code(), code::SUCCESS, "{}", r.header);
    let body: Value = serde_json::from_slice(&r.body).expect("JSON");
    assert!(body["lockOKMQSet"][0]["queueId"].is_i64(), "{body}");
    let opaque = w.send(rc::UNLOCK_BATCH_MQ, Some(&[]), lock.as_bytes(), true).await;
    let r = w.response(opaque, PATIENCE).await.expect("Go's one-way unlock is an ordinary request");
    assert_eq!(r.code(), code::SUCCESS, "{}", r.header);
    let r =
        w.call(rc::GET_CONSUMER_LIST_BY_GROUP, Some(&[("consumerGroup", s(&group))]), b"").await;
    let body: Value = serde_json::from_slice(&r.body).expect("JSON");
    assert_eq!(body["consumerIdList"], serde_json::json!(["10.0.0.7@4243#1"]));
    b.shutdown().await;
}

/// Row 24: the route a Go client (version 317) reads: it splits the raw `brokerAddrs` text on
/// `,` and the first `:` (whitespace would end up in the address) and reads `queueDatas` with
/// strict int fields.
#[tokio::test]
async fn given_a_go_route_request_should_answer_what_gos_route_parser_reads() {
    let (b, addr) = broker().await;
    let mut w = Wire::open(addr, Client::Go).await;
    let topic = unique("GoRoute");
    create_topic(&mut w, &topic, 3).await;
    let ns = b.namesrv_addr().expect("an embedded name server");
    let mut n = Wire::open(ns, Client::Go).await;
    let mut route = None;
    wait_until_route(&mut n, &topic, &mut route).await;
    let r = route.expect("a route");
    let text = std::str::from_utf8(&r.body).expect("UTF-8");
    let v: Value = serde_json::from_str(text).expect("JSON a Go gjson parse reads");
    for q in v["queueDatas"].as_array().expect("queueDatas") {
        for k in ["readQueueNums", "writeQueueNums", "perm", "topicSysFlag"] {
            assert!(q[k].is_i64(), "queueDatas.{k} is a JSON int: {q}");
        }
    }
    // Go's split of the raw brokerAddrs text.
    let start = text.find("\"brokerAddrs\":").expect("brokerAddrs") + "\"brokerAddrs\":".len();
    let end = start + text[start..].find('}').expect("end of brokerAddrs") + 1;
    let raw = &text[start..end];
    let mut addrs = Vec::new();
    for part in raw[1..raw.len() - 1].split(',') {
        let i = part.find(':').expect("id:addr");
        let id: i64 = part[..i].replace('"', "").parse().expect("a Go-parsable broker id");
        addrs.push((id, part[i + 1..].replace('"', "")));
    }
    assert_eq!(addrs, vec![(0, addr.to_string())], "raw brokerAddrs {raw:?}");
    b.shutdown().await;
}

async fn wait_until_route(n: &mut Wire, topic: &str, out: &mut Option<Frame>) {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let r = n.call(rc::GET_ROUTEINFO_BY_TOPIC, Some(&[("topic", s(topic))]), b"").await;
        if r.code() == code::SUCCESS {
            *out = Some(r);
            return;
        }
        assert!(tokio::time::Instant::now() < deadline, "no route for {topic}: {}", r.header);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Row 23: NOTIFY_CONSUMER_IDS_CHANGED reaches the other members with `consumerGroup`, as a
/// request (no answer expected), readable by Go's decoder.
#[tokio::test]
async fn given_a_go_group_when_a_member_joins_should_notify_the_others_with_the_group() {
    let (b, addr) = broker().await;
    let mut first = Wire::open(addr, Client::Go).await;
    let topic = unique("GoNotify");
    create_topic(&mut first, &topic, 1).await;
    let group = unique("go_cg");
    let r = first
        .call(rc::HEART_BEAT, Some(&[]), &go_heartbeat("10.0.0.7@1", &group, &topic, "*"))
        .await;
    assert_eq!(r.code(), code::SUCCESS);
    let mut second = Wire::open(addr, Client::Go).await;
    let r = second
        .call(rc::HEART_BEAT, Some(&[]), &go_heartbeat("10.0.0.7@2", &group, &topic, "*"))
        .await;
    assert_eq!(r.code(), code::SUCCESS);
    let notify = first.read_frame(PATIENCE).await.expect("the first member is notified");
    assert!(!notify.is_response(), "a request: {}", notify.header);
    assert_eq!(notify.code(), rc::NOTIFY_CONSUMER_IDS_CHANGED);
    assert_eq!(notify.ext("consumerGroup"), Some(group.as_str()));
    notify.assert_go_decodes();
    b.shutdown().await;
}

/// Rows 7, 25: the fields Java 5.x adds to offset and lookup headers (`boundaryType`,
/// `committed`, `topic` on VIEW_MESSAGE_BY_ID, the RPC header's `bname`) are accepted.
#[tokio::test]
async fn given_java5_offset_and_lookup_headers_with_their_new_fields_should_be_served() {
    let (b, addr) = broker().await;
    let mut w = Wire::open(addr, Client::Java5).await;
    let topic = unique("Java5Fields");
    create_topic(&mut w, &topic, 1).await;
    let props = java_props(&[("UNIQ_KEY", &java_uniq_key(5)), ("TAGS", "TagA")]);
    let r = w.call(rc::SEND_MESSAGE_V2, Some(&java_send_v2(&topic, 0, 0, &props)), b"m").await;
    assert_eq!(r.code(), code::SUCCESS, "{}", r.header);
    let phys = i64::from_str_radix(&r.ext("msgId").expect("msgId")[16..], 16).expect("hex");
    let max =
        [("bname", s("baiji-a")), ("committed", s(true)), ("queueId", s(0)), ("topic", s(&topic))];
    let r = w.call(rc::GET_MAX_OFFSET, Some(&max), b"").await;
    assert_eq!((r.code(), r.ext("offset")), (code::SUCCESS, Some("1")), "{}", r.header);
    let search = [
        ("bname", s("baiji-a")),
        ("boundaryType", s("LOWER")),
        ("queueId", s(0)),
        ("timestamp", s(0)),
        ("topic", s(&topic)),
    ];
    let r = w.call(rc::SEARCH_OFFSET_BY_TIMESTAMP, Some(&search), b"").await;
    assert_eq!((r.code(), r.ext("offset")), (code::SUCCESS, Some("0")), "{}", r.header);
    let view = [("offset", s(phys)), ("topic", s(&topic))];
    let r = w.call(rc::VIEW_MESSAGE_BY_ID, Some(&view), b"").await;
    assert_eq!(r.code(), code::SUCCESS, "{}", r.header);
    assert_eq!(prop(&r.records()[0], "UNIQ_KEY"), Some(java_uniq_key(5).as_str()));
    b.shutdown().await;
}

/// Row 6: Java's one-way UPDATE_CONSUMER_OFFSET (flag 2) is stored and not answered.
#[tokio::test]
async fn given_a_java_one_way_offset_commit_should_be_stored_without_an_answer() {
    let (b, addr) = broker().await;
    let mut w = Wire::open(addr, Client::Java49).await;
    let topic = unique("JavaOneway");
    create_topic(&mut w, &topic, 1).await;
    let group = unique("java_cg");
    // A Java consumer heartbeats before it commits: offsets are kept for known groups only.
    let hb = java_heartbeat("10.0.0.5@1", &group, &topic, "*");
    let r = w.call(rc::HEART_BEAT, None, &hb).await;
    assert_eq!(r.code(), code::SUCCESS, "{}", r.header);
    let q = vec![("consumerGroup", s(&group)), ("queueId", s(0)), ("topic", s(&topic))];
    let mut commit = q.clone();
    commit.push(("commitOffset", s(0)));
    let opaque = w.send(rc::UPDATE_CONSUMER_OFFSET, Some(&commit), b"", true).await;
    let r = w.call(rc::QUERY_CONSUMER_OFFSET, Some(&q), b"").await;
    assert_eq!((r.code(), r.ext("offset")), (code::SUCCESS, Some("0")), "{}", r.header);
    assert_ne!(
        r.header["opaque"].as_i64(),
        Some(i64::from(opaque)),
        "the one-way commit got no answer"
    );
    b.shutdown().await;
}

/// Row 8: when its send-back fails, the Java consumer sends the message itself to
/// `%RETRY%group` with SEND_MESSAGE_V2: `j` = reconsume times, `l` = max reconsume times (taken
/// from the properties, which are cleared), `DELAY` = 3 + n, no trailing 0x02. Past the maximum
/// it goes to the dead-letter queue undelayed, every other property intact.
#[tokio::test]
async fn given_a_java_retry_send_past_its_maximum_should_land_in_the_dlq_intact() {
    let (b, addr) = broker().await;
    let mut w = Wire::open(addr, Client::Java49).await;
    let group = unique("java_cg");
    let retry = format!("%RETRY%{group}");
    let uniq = java_uniq_key(17);
    let props = java_props(&[
        ("RETRY_TOPIC", "OrigTopic"),
        ("UNIQ_KEY", &uniq),
        ("WAIT", "true"),
        ("TAGS", "TagR"),
        ("DELAY", "20"),
    ]);
    let mut ext = java_send_v2(&retry, 0, 0, &props);
    for (k, v) in &mut ext {
        if *k == "j" {
            *v = s(17);
        }
    }
    ext.push(("l", s(16)));
    let r = w.call(rc::SEND_MESSAGE_V2, Some(&ext), b"r").await;
    assert_eq!(r.code(), code::SUCCESS, "{}", r.header);
    let phys = i64::from_str_radix(&r.ext("msgId").expect("msgId")[16..], 16).expect("hex");
    let r = w.call(rc::VIEW_MESSAGE_BY_ID, Some(&[("offset", s(phys))]), b"").await;
    assert_eq!(r.code(), code::SUCCESS, "{}", r.header);
    let m = &r.records()[0];
    assert_eq!(m.topic, format!("%DLQ%{group}"), "past l=16 the message is a dead letter");
    assert_eq!(m.reconsume_times, 17, "j is stored as the reconsume count");
    assert_canonical(&m.properties);
    assert_eq!(prop(m, "TAGS"), Some("TagR"));
    assert_eq!(prop(m, "UNIQ_KEY"), Some(uniq.as_str()));
    assert_eq!(prop(m, "RETRY_TOPIC"), Some("OrigTopic"));
    assert_eq!(prop(m, "DELAY"), None, "dead letters are not delayed");
    b.shutdown().await;
}
