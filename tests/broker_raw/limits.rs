//! Decoding limits (review §1.1): a header over `MAX_HEADER_BYTES` or with more than
//! `MAX_EXT_FIELDS` fields is answered with an error carrying its opaque, promptly, and the
//! connection and the broker stay usable.

use baiji::remoting::{MAX_EXT_FIELDS, MAX_HEADER_BYTES};
use bytes::BufMut;

use super::*;

/// A frame (no body) around `header` of serialize type `kind`.
fn frame(kind: u8, header: &[u8]) -> Vec<u8> {
    let mut b = Vec::with_capacity(8 + header.len());
    b.put_i32(i32::try_from(4 + header.len()).expect("a frame below 2 GiB"));
    b.put_i32((i32::from(kind) << 24) | i32::try_from(header.len()).expect("a 24-bit header"));
    b.put_slice(header);
    b
}

/// A GET_MAX_OFFSET header as Java's fastjson writes it (sorted keys, `opaque` after
/// `extFields`) with `fields` extra ext fields of `"k0000001":""` shape.
fn java_header(opaque: i32, fields: usize, flag: i32) -> Vec<u8> {
    let mut h = String::from(r#"{"code":30,"extFields":{"queueId":"0","topic":"LimitTopic""#);
    for i in 0..fields {
        h.push_str(&format!(r#","k{i:07}":"""#));
    }
    h.push_str(&format!(
        r#"}},"flag":{flag},"language":"JAVA","opaque":{opaque},"serializeTypeCurrentRPC":"JSON","version":405}}"#
    ));
    h.into_bytes()
}

fn assert_refused(resp: &RemotingCommand, what: &str) {
    assert_eq!(resp.code, code::SYSTEM_ERROR, "{what} is answered with SYSTEM_ERROR: {resp:?}");
    let remark = resp.remark.as_deref().unwrap_or_default();
    assert!(remark.contains("header"), "the remark says the header was refused: {remark}");
    assert!(remark.len() < 256, "the remark is short: {} bytes", remark.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_4_mib_json_header_with_300000_ext_fields_should_answer_an_error_and_stay_usable() {
    let (broker, mut conn) = broker_with_topic("LimitTopic").await;
    let header = java_header(4242, 300_000, 0);
    assert!(header.len() > 4 * 1024 * 1024, "a 4 MiB header: {} bytes", header.len());
    conn.write_raw(&frame(0, &header)).await;
    let (kind, resp) =
        conn.response(4242, PATIENCE).await.expect("the refused request is answered promptly");
    assert_eq!(kind, 0, "answered in JSON, like the request");
    assert_refused(&resp, "a 4 MiB header");
    assert_still_served(&mut conn, "LimitTopic").await;
    let mut other = Conn::open(broker_addr(&broker)).await;
    assert_still_served(&mut other, "LimitTopic").await;
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_more_ext_fields_than_the_limit_in_a_short_header_should_answer_an_error_with_its_opaque(
) {
    let (broker, mut conn) = broker_with_topic("LimitTopic").await;
    let header = java_header(77, MAX_EXT_FIELDS, 0);
    assert!(header.len() < MAX_HEADER_BYTES, "within the byte limit");
    conn.write_raw(&frame(0, &header)).await;
    let (_, resp) = conn.response(77, PATIENCE).await.expect("answered");
    assert_refused(&resp, "too many fields");
    assert!(resp.remark.unwrap_or_default().contains("extFields"), "the remark names the cause");

    // At the limit (the two real fields plus MAX_EXT_FIELDS - 2 others) it is served.
    let header = java_header(78, MAX_EXT_FIELDS - 2, 0);
    conn.write_raw(&frame(0, &header)).await;
    let (_, resp) = conn.response(78, PATIENCE).await.expect("answered");
    assert_eq!(resp.code, code::SUCCESS, "a header at the limit is served: {resp:?}");
    assert_eq!(broker.bad_frames(), 1, "the refused header is counted, the served one is not");
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_binary_header_over_the_limits_should_answer_an_error_in_the_binary_header() {
    let (broker, mut conn) = broker_with_topic("LimitTopic").await;
    for (opaque, fields, pad) in [(91, MAX_EXT_FIELDS + 1, 0), (92, 1, MAX_HEADER_BYTES)] {
        let mut ext = Vec::new();
        for i in 0..fields {
            let key = format!("k{i}");
            ext.put_i16(i16::try_from(key.len()).expect("short"));
            ext.put_slice(key.as_bytes());
            ext.put_i32(i32::try_from(pad).expect("small"));
            ext.put_bytes(b'v', pad);
        }
        let mut h = Vec::new();
        h.put_i16(30); // GET_MAX_OFFSET
        h.put_u8(0); // JAVA
        h.put_i16(405);
        h.put_i32(opaque);
        h.put_i32(0);
        h.put_i32(0); // no remark
        h.put_i32(i32::try_from(ext.len()).expect("small"));
        h.put_slice(&ext);
        conn.write_raw(&frame(1, &h)).await;
        let (kind, resp) = conn.response(opaque, PATIENCE).await.expect("answered");
        assert_eq!(kind, 1, "answered in the binary header, like the request");
        assert_refused(&resp, "a binary header over a limit");
    }
    assert_still_served(&mut conn, "LimitTopic").await;
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_one_way_request_with_a_refused_header_should_not_answer_and_stay_open() {
    let (broker, mut conn) = broker_with_topic("LimitTopic").await;
    conn.write_raw(&frame(0, &java_header(55, MAX_EXT_FIELDS + 1, 2))).await;
    // The next request's answer is the first frame to arrive: nothing was sent for the first.
    assert_still_served(&mut conn, "LimitTopic").await;
    broker.shutdown().await;
}

/// Requests naming a group or topic of `len` bytes that the broker must refuse: pull of an
/// unknown topic, pull of a known topic by a group without heartbeat, offset query of an
/// unknown topic, consumer list of an unknown group, topic creation of a system-like name.
fn requests_with_names_of(len: usize) -> Vec<RemotingCommand> {
    let name = "n".repeat(len);
    let mut consumer_list = ExtFields::new();
    consumer_list.insert("consumerGroup", &name);
    let mut query_offset = ExtFields::new();
    query_offset.insert("consumerGroup", "g");
    query_offset.insert("topic", &name);
    query_offset.insert("queueId", "0");
    let mut no_sub = pull_request(&name, "LimitTopic", 0, 0, 0, 0);
    no_sub.ext_fields.remove("subscription");
    vec![
        pull_request("g", &name, 0, 0, 0, pull_sys_flag::SUBSCRIPTION),
        no_sub,
        request(rc::QUERY_CONSUMER_OFFSET, query_offset),
        request(rc::GET_CONSUMER_LIST_BY_GROUP, consumer_list),
        create_topic_request(&format!("TBW102{name}"), 4),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_huge_group_or_topic_names_when_refused_should_answer_with_a_bounded_remark() {
    let (broker, mut conn) = broker_with_topic("LimitTopic").await;
    for len in [200 * 1024, 1024 * 1024] {
        for req in requests_with_names_of(len) {
            let code = req.code;
            let resp = conn.call(req).await;
            let remark = resp.remark.as_deref().unwrap_or_default();
            assert!(
                remark.len() <= 512,
                "request {code} with a {len}-byte name: the remark quotes at most a prefix of it, \
                 got {} bytes (code {})",
                remark.len(),
                resp.code
            );
        }
    }
    assert_still_served(&mut conn, "LimitTopic").await;
    broker.shutdown().await;
}
