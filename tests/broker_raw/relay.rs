//! The consumer relays of mqadmin and the dashboard, as `DefaultMQAdminExtImpl` sends them and
//! RocketMQ's `AdminBrokerProcessor.callConsumer` serves them: `GET_CONSUMER_RUNNING_INFO` (307,
//! `GetConsumerRunningInfoRequestHeader`) and `CONSUME_MESSAGE_DIRECTLY` (309,
//! `ConsumeMessageDirectlyResultRequestHeader`) go to the consumer's connection with the
//! admin's header (309: `brokerName` added, the message encoded in the body), and the consumer's
//! answer comes back to the admin as it was; a consumer not connected, too old, or a message id
//! the broker does not hold is refused with `SYSTEM_ERROR`.

use super::*;

const TOPIC: &str = "RelayTopic";
const GROUP: &str = "relay_group";
const CLIENT: &str = "127.0.0.1@relay-consumer";

/// A broker, a consumer connection that sent its heartbeat (with request `version`), and an
/// admin connection.
async fn broker_consumer_admin(version: i32) -> (RunningBroker, Conn, Conn) {
    let (broker, admin) = broker_with_topic(TOPIC).await;
    let mut consumer = Conn::open(broker_addr(&broker)).await;
    let mut hb = heartbeat_request(CLIENT, GROUP, TOPIC);
    hb.version = version;
    let r = consumer.call(hb).await;
    assert_eq!(r.code, code::SUCCESS, "the heartbeat is taken: {r:?}");
    (broker, consumer, admin)
}

/// The next request with `code` the broker sends `conn` (skipping its notifications).
async fn relayed(conn: &mut Conn, code: i32) -> RemotingCommand {
    loop {
        let (_, cmd) = conn.read_frame(PATIENCE).await.expect("the broker relays the request");
        if !cmd.is_response() && cmd.code == code {
            return cmd;
        }
    }
}

fn running_info_request(client: &str) -> RemotingCommand {
    let mut ext = ExtFields::new();
    ext.insert("consumerGroup", GROUP);
    ext.insert("clientId", client);
    ext.insert_bool("jstackEnable", true);
    request(rc::GET_CONSUMER_RUNNING_INFO, ext)
}

fn consume_directly_request(client: &str, msg_id: &str) -> RemotingCommand {
    let mut ext = ExtFields::new();
    ext.insert("consumerGroup", GROUP);
    ext.insert("clientId", client);
    ext.insert("msgId", msg_id);
    ext.insert("topic", TOPIC);
    request(rc::CONSUME_MESSAGE_DIRECTLY, ext)
}

/// Sends one message to queue 1 of [`TOPIC`]; its offset msgId.
async fn stored_message(conn: &mut Conn, body: &str) -> String {
    let r = conn.call(send_request(TOPIC, 1, body.as_bytes().to_vec())).await;
    assert_eq!(r.code, code::SUCCESS, "the message is stored: {r:?}");
    r.ext_fields.get("msgId").expect("a send answer's msgId").to_string()
}

#[tokio::test]
async fn given_a_connected_consumer_when_307_is_sent_should_relay_it_and_return_its_answer_as_is() {
    let (broker, mut consumer, mut admin) = broker_consumer_admin(475).await;
    let mut req = running_info_request(CLIENT);
    req.opaque = admin.opaque();
    admin.write(&req).await;

    let asked = relayed(&mut consumer, rc::GET_CONSUMER_RUNNING_INFO).await;
    for (k, v) in [("consumerGroup", GROUP), ("clientId", CLIENT), ("jstackEnable", "true")] {
        assert_eq!(asked.ext_fields.get(k), Some(v), "the admin's header goes to the client");
    }
    let info =
        br#"{"properties":{"PROP_CONSUME_TYPE":"CONSUME_PASSIVELY"},"jstack":"main TID: 1"}"#;
    let mut answer =
        RemotingCommand::response_to(&asked, code::SUCCESS, Some("from the client".into()))
            .with_body(info.to_vec());
    answer.ext_fields.insert("x", "y");
    consumer.write(&answer).await;

    let (_, r) = admin.response(req.opaque, PATIENCE).await.expect("the admin is answered");
    assert_eq!(r.code, code::SUCCESS, "{r:?}");
    assert_eq!(&r.body[..], &info[..], "the client's ConsumerRunningInfo, unchanged");
    assert_eq!(r.remark.as_deref(), Some("from the client"), "its remark too");
    assert_eq!(r.ext_fields.get("x"), Some("y"), "and its header fields");
    broker.shutdown().await;
}

#[tokio::test]
async fn given_a_stored_message_when_309_is_sent_should_relay_it_encoded_with_the_broker_name() {
    let (broker, mut consumer, mut admin) = broker_consumer_admin(475).await;
    let msg_id = stored_message(&mut admin, "consume me again").await;
    let mut req = consume_directly_request(CLIENT, &msg_id);
    req.opaque = admin.opaque();
    admin.write(&req).await;

    let asked = relayed(&mut consumer, rc::CONSUME_MESSAGE_DIRECTLY).await;
    assert_eq!(asked.ext_fields.get("msgId"), Some(msg_id.as_str()), "{asked:?}");
    assert_eq!(asked.ext_fields.get("consumerGroup"), Some(GROUP));
    assert!(asked.ext_fields.get("brokerName").is_some_and(|b| !b.is_empty()), "{asked:?}");
    let msgs = decode_records(&asked.body).expect("the message, encoded as VIEW_MESSAGE_BY_ID");
    assert_eq!(msgs.len(), 1, "one message");
    assert_eq!(&msgs[0].body[..], b"consume me again");
    assert_eq!(msgs[0].topic, TOPIC);
    assert_eq!(msgs[0].offset_msg_id(), msg_id, "the message the id names");
    let result =
        br#"{"order":false,"autoCommit":true,"consumeResult":"CR_SUCCESS","spentTimeMills":3}"#;
    consumer
        .write(
            &RemotingCommand::response_to(&asked, code::SUCCESS, None).with_body(result.to_vec()),
        )
        .await;

    let (_, r) = admin.response(req.opaque, PATIENCE).await.expect("the admin is answered");
    assert_eq!(r.code, code::SUCCESS, "{r:?}");
    assert_eq!(&r.body[..], &result[..], "the client's ConsumeMessageDirectlyResult, unchanged");
    broker.shutdown().await;
}

#[tokio::test]
async fn given_a_client_not_connected_when_307_or_309_is_sent_should_answer_not_online() {
    let (broker, _consumer, mut admin) = broker_consumer_admin(475).await;
    let msg_id = stored_message(&mut admin, "m").await;
    for req in [
        running_info_request("127.0.0.1@nobody"),
        consume_directly_request("127.0.0.1@nobody", &msg_id),
    ] {
        let r = admin.call(req).await;
        assert_eq!(r.code, code::SYSTEM_ERROR, "{r:?}");
        assert_eq!(
            r.remark.as_deref(),
            Some(format!("The Consumer <{GROUP}> <127.0.0.1@nobody> not online").as_str()),
            "RocketMQ's remark"
        );
    }
    // A client of another group is not a member of this one.
    let mut ext = ExtFields::new();
    ext.insert("consumerGroup", "other_group");
    ext.insert("clientId", CLIENT);
    let r = admin.call(request(rc::GET_CONSUMER_RUNNING_INFO, ext)).await;
    assert_eq!(r.code, code::SYSTEM_ERROR, "{r:?}");
    assert!(r.remark.unwrap_or_default().contains("not online"));
    broker.shutdown().await;
}

#[tokio::test]
async fn given_a_consumer_older_than_3_1_8_when_307_is_sent_should_refuse_as_rocketmq() {
    // Ordinal 10 of MQVersion is V3_0_0_BETA7.
    let (broker, mut consumer, mut admin) = broker_consumer_admin(10).await;
    let r = admin.call(running_info_request(CLIENT)).await;
    assert_eq!(r.code, code::SYSTEM_ERROR, "{r:?}");
    assert_eq!(
        r.remark.as_deref(),
        Some(
            format!(
                "The Consumer <{CLIENT}> Version <V3_0_0_BETA7> too low to finish, please \
                 upgrade it to V3_1_8_SNAPSHOT"
            )
            .as_str()
        )
    );
    // Nothing was sent to it: the next frame it gets answers its own request.
    let mut probe = max_offset_request(TOPIC, 0);
    probe.opaque = consumer.opaque();
    consumer.write(&probe).await;
    loop {
        let (_, f) = consumer.read_frame(PATIENCE).await.expect("an answer");
        assert_ne!(f.code, rc::GET_CONSUMER_RUNNING_INFO, "not relayed: {f:?}");
        if f.is_response() {
            break;
        }
    }
    broker.shutdown().await;
}

#[tokio::test]
async fn given_a_message_id_the_broker_does_not_hold_when_309_is_sent_should_refuse_it() {
    let (broker, _consumer, mut admin) = broker_consumer_admin(475).await;
    let held = stored_message(&mut admin, "m").await;
    // The same store host, an offset nothing was stored at.
    let unknown = format!("{}00000000FFFFFFFF", &held[..16]);
    for msg_id in [unknown.as_str(), "not-a-message-id"] {
        let r = admin.call(consume_directly_request(CLIENT, msg_id)).await;
        assert_eq!(r.code, code::SYSTEM_ERROR, "{msg_id}: {r:?}");
        assert!(
            r.remark
                .as_deref()
                .is_some_and(|m| m.contains("can not find message") && m.contains(msg_id)),
            "the remark names the id: {r:?}"
        );
    }
    let r = admin.call(request(rc::CONSUME_MESSAGE_DIRECTLY, ExtFields::new())).await;
    assert_eq!(r.code, code::SYSTEM_ERROR, "a header without its fields: {r:?}");
    assert!(r.remark.unwrap_or_default().contains("consumerGroup"), "names the field");
    broker.shutdown().await;
}

#[tokio::test]
async fn given_a_consumer_that_closes_when_asked_should_answer_the_admin_system_error() {
    let (broker, mut consumer, mut admin) = broker_consumer_admin(475).await;
    let mut req = running_info_request(CLIENT);
    req.opaque = admin.opaque();
    admin.write(&req).await;
    let _asked = relayed(&mut consumer, rc::GET_CONSUMER_RUNNING_INFO).await;
    drop(consumer);
    let (_, r) = admin.response(req.opaque, PATIENCE).await.expect("the admin is answered");
    assert_eq!(r.code, code::SYSTEM_ERROR, "{r:?}");
    let remark = r.remark.unwrap_or_default();
    assert!(
        remark.starts_with(&format!("invoke consumer <{GROUP}> <{CLIENT}> Exception")),
        "{remark}"
    );
    broker.shutdown().await;
}
