//! SQL92 filters over raw frames: `CHECK_CLIENT_CONFIG` accepts valid expressions and refuses
//! invalid ones with `SUBSCRIPTION_PARSE_FAILED`; pulls (with their own subscription or the
//! heartbeat's) deliver only the messages whose properties match, step past the others, and a
//! held pull is not answered for messages that do not match.

use super::*;

/// A `CHECK_CLIENT_CONFIG` as the Java client writes it: no header fields, a fastjson body with
/// sorted keys. `expr` must not need JSON escaping.
fn check_client_config(expression_type: &str, expr: &str) -> RemotingCommand {
    let body = format!(
        r#"{{"clientId":"127.0.0.1@sql","group":"sql_group","subscriptionData":{{"classFilterMode":false,"codeSet":[],"expressionType":"{expression_type}","subString":"{expr}","subVersion":1700000000000,"tagsSet":[],"topic":"RawTopic"}}}}"#
    );
    request(rc::CHECK_CLIENT_CONFIG, ExtFields::new()).with_body(body.into_bytes())
}

/// A SEND_MESSAGE of `body` to queue 0 with these properties, after `TAGS` `TagA` unless they
/// name a tag themselves.
fn send_with(topic: &str, body: &str, props: &[(&str, &str)]) -> RemotingCommand {
    let tagged = props.iter().any(|(k, _)| *k == "TAGS");
    let mut properties = String::from(if tagged { "" } else { "TAGS\u{1}TagA\u{2}" });
    for (k, v) in props {
        properties.push_str(&format!("{k}\u{1}{v}\u{2}"));
    }
    let to = ("raw_producer", topic, 0, 4);
    crate::common::raw::send(SendHeaderVersion::V1, to, &properties, body.as_bytes().to_vec())
}

/// A pull of queue 0 from `offset` carrying the SQL92 subscription `expr`.
fn sql_pull(expr: &str, offset: i64, suspend_ms: i64) -> RemotingCommand {
    let mut pull = pull_request("sql_group", "RawTopic", 0, offset, suspend_ms, SUB_AND_SUSPEND);
    pull.ext_fields.insert("subscription", expr);
    pull.ext_fields.insert("expressionType", "SQL92");
    pull
}

/// The six messages of the pull tests, on queue 0 (offsets 0..6).
async fn send_six(conn: &mut Conn) {
    let messages: [(&str, &[(&str, &str)]); 6] = [
        ("m0", &[("a", "1")]),
        ("m1", &[("a", "7")]),
        ("m2", &[("region", "east")]),
        ("m3", &[("a", "9"), ("region", "west")]),
        ("m4", &[("a", "abc")]),
        ("m5", &[("a", "6")]),
    ];
    for (body, props) in messages {
        let r = conn.call(send_with("RawTopic", body, props)).await;
        assert_eq!(r.code, code::SUCCESS, "sending succeeds: {r:?}");
    }
}

/// A Java consumer's heartbeat: `sql_group` subscribes to `RawTopic` with SQL92 `expr`.
fn sql_heartbeat(expr: &str) -> RemotingCommand {
    let body = format!(
        r#"{{"clientID":"127.0.0.1@sql","consumerDataSet":[{{"consumeFromWhere":"CONSUME_FROM_FIRST_OFFSET","consumeType":"CONSUME_PASSIVELY","groupName":"sql_group","messageModel":"CLUSTERING","subscriptionDataSet":[{{"classFilterMode":false,"codeSet":[],"expressionType":"SQL92","subString":"{expr}","subVersion":1700000000000,"tagsSet":[],"topic":"RawTopic"}}],"unitMode":false}}],"heartbeatFingerprint":0,"producerDataSet":[],"withoutSub":false}}"#
    );
    request(rc::HEART_BEAT, ExtFields::new()).with_body(body.into_bytes())
}

fn bodies(r: &RemotingCommand) -> Vec<String> {
    decode_records(&r.body)
        .expect("a valid pull body")
        .iter()
        .map(|m| String::from_utf8_lossy(&m.body).into_owned())
        .collect()
}

#[tokio::test]
async fn given_sql92_subscriptions_when_checking_client_config_should_accept_valid_and_refuse_invalid(
) {
    let (broker, mut conn) = broker_with_topic("RawTopic").await;
    for expr in ["a > 5 AND region IN ('east', 'west')", "a IS NULL OR b BETWEEN 1 AND 3", "TRUE"] {
        let r = conn.call(check_client_config("SQL92", expr)).await;
        assert_eq!(r.code, code::SUCCESS, "{expr:?} compiles: {r:?}");
    }
    for (expr, names) in [
        ("a > 'x'", "cannot be compared"),
        ("a >", "Encountered <EOF>"),
        ("a = 'open", "closing quote"),
        ("", "Encountered <EOF>"),
    ] {
        let r = conn.call(check_client_config("SQL92", expr)).await;
        assert_eq!(r.code, code::SUBSCRIPTION_PARSE_FAILED, "{expr:?} is refused: {r:?}");
        let remark = r.remark.unwrap_or_default();
        assert!(
            remark.starts_with("Invalid MessageSelector. ") && remark.contains(names),
            "the remark names the error of {expr:?}: {remark}"
        );
    }
    let r = conn.call(check_client_config("TAG", "TagA || TagB")).await;
    assert_eq!(r.code, code::SUCCESS, "tag subscriptions always pass: {r:?}");
    assert_still_served(&mut conn, "RawTopic").await;
    broker.shutdown().await;
}

#[tokio::test]
async fn given_a_pull_carrying_an_sql92_subscription_should_deliver_only_matching_messages() {
    let (broker, mut conn) = broker_with_topic("RawTopic").await;
    send_six(&mut conn).await;
    let r = conn.call(sql_pull("a > 5", 0, 300)).await;
    assert_eq!(r.code, code::SUCCESS, "matching messages are found: {r:?}");
    assert_eq!(bodies(&r), ["m1", "m3", "m5"], "missing and non-numeric `a` never match");
    assert_eq!(r.ext_fields.get("nextBeginOffset"), Some("6"), "past all six: {r:?}");

    let r = conn.call(sql_pull("a IS NULL OR region = 'west'", 0, 300)).await;
    assert_eq!(bodies(&r), ["m2", "m3"], "IS NULL selects the message without `a`");

    let r = conn.call(sql_pull("a > 100", 0, 300)).await;
    assert_eq!(r.code, code::PULL_RETRY_IMMEDIATELY, "none matches: {r:?}");
    assert_eq!(r.ext_fields.get("nextBeginOffset"), Some("6"), "stepped past them: {r:?}");

    let r = conn.call(sql_pull("a >", 0, 300)).await;
    assert_eq!(r.code, code::SUBSCRIPTION_PARSE_FAILED, "an invalid expression: {r:?}");
    assert!(
        r.remark.unwrap_or_default().starts_with("parse the consumer's subscription failed"),
        "RocketMQ's remark"
    );
    assert_still_served(&mut conn, "RawTopic").await;
    broker.shutdown().await;
}

#[tokio::test]
async fn given_a_heartbeat_sql92_subscription_should_filter_pulls_without_their_own() {
    let (broker, mut conn) = broker_with_topic("RawTopic").await;
    send_six(&mut conn).await;
    let r = conn.call(sql_heartbeat("a >= 7")).await;
    assert_eq!(r.code, code::SUCCESS, "the heartbeat is accepted: {r:?}");
    // A push consumer's pull: no subscription flag, the heartbeat's expression type.
    let mut pull = pull_request("sql_group", "RawTopic", 0, 0, 300, pull_sys_flag::SUSPEND);
    pull.ext_fields.insert("expressionType", "SQL92");
    let r = conn.call(pull.clone()).await;
    assert_eq!(r.code, code::SUCCESS, "the heartbeat's filter applies: {r:?}");
    assert_eq!(bodies(&r), ["m1", "m3"]);

    let r = conn.call(sql_heartbeat("a >")).await;
    assert_eq!(r.code, code::SUCCESS, "heartbeats are answered whatever they carry: {r:?}");
    let r = conn.call(pull).await;
    assert_eq!(r.code, code::FILTER_DATA_NOT_EXIST, "an invalid expression has no filter: {r:?}");
    broker.shutdown().await;
}

#[tokio::test]
async fn given_a_held_sql92_pull_when_a_non_matching_message_arrives_should_keep_holding() {
    let (broker, mut conn) = broker_with_topic("RawTopic").await;
    let mut pull = sql_pull("a > 5", 0, 20_000);
    pull.opaque = 700;
    conn.write(&pull).await;
    let mut producer = Conn::open(broker_addr(&broker)).await;
    let r = producer.call(send_with("RawTopic", "miss", &[("a", "1")])).await;
    assert_eq!(r.code, code::SUCCESS, "sending succeeds: {r:?}");
    let r = producer.call(send_with("RawTopic", "hit", &[("a", "8")])).await;
    assert_eq!(r.code, code::SUCCESS, "sending succeeds: {r:?}");
    let (_, r) = conn
        .response(700, PATIENCE)
        .await
        .expect("the matching append wakes the held pull well before its 20 s hold expires");
    assert_eq!(r.code, code::SUCCESS, "the pull waits for a matching message: {r:?}");
    assert_eq!(bodies(&r), ["hit"], "the message that does not match never crosses the wire");
    assert_eq!(r.ext_fields.get("nextBeginOffset"), Some("2"), "{r:?}");
    broker.shutdown().await;
}

#[tokio::test]
async fn given_a_held_tag_pull_when_a_message_of_another_tag_arrives_should_keep_holding() {
    let (broker, mut conn) = broker_with_topic("RawTopic").await;
    let mut pull = pull_request("tag_group", "RawTopic", 0, 0, 20_000, SUB_AND_SUSPEND);
    pull.ext_fields.insert("subscription", "TagB");
    pull.opaque = 800;
    conn.write(&pull).await;
    let mut producer = Conn::open(broker_addr(&broker)).await;
    // `send_request` tags its message TagA.
    let r = producer.call(send_request("RawTopic", 0, &b"tag-a"[..])).await;
    assert_eq!(r.code, code::SUCCESS, "sending succeeds: {r:?}");
    let r = producer.call(send_with("RawTopic", "tag-b", &[("TAGS", "TagB")])).await;
    assert_eq!(r.code, code::SUCCESS, "sending succeeds: {r:?}");
    let (_, r) = conn
        .response(800, PATIENCE)
        .await
        .expect("the matching append wakes the held pull well before its 20 s hold expires");
    assert_eq!(r.code, code::SUCCESS, "the pull waits for a message of its tag: {r:?}");
    assert_eq!(bodies(&r), ["tag-b"], "only the TagB message is delivered");
    broker.shutdown().await;
}
