//! Request/reply as the Java and Go clients speak it: a replier sends `SEND_REPLY_MESSAGE_V2`
//! (325, Java) or `SEND_REPLY_MESSAGE` (324, Go) to `<cluster>_REPLY_TOPIC` with the request's
//! `CORRELATION_ID` and `REPLY_TO_CLIENT` (the requester's client id); the broker pushes it with
//! `PUSH_REPLY_MESSAGE_TO_CLIENT` (326, `ReplyMessageRequestHeader`) over the connection the
//! requester's producer heartbeat came on, waits for the requester's answer, and answers the
//! replier (RocketMQ's `ReplyMessageProcessor`).

use super::*;

const REPLY_TOPIC: &str = "DefaultCluster_REPLY_TOPIC";
const REQUESTER: &str = "127.0.0.1@requester";

/// A heartbeat that makes `client_id` a producer of `group` on the connection it is sent on.
fn producer_heartbeat(client_id: &str, group: &str) -> RemotingCommand {
    let body = format!(
        r#"{{"clientID":"{client_id}","producerDataSet":[{{"groupName":"{group}"}}],"consumerDataSet":[]}}"#
    );
    request(rc::HEART_BEAT, ExtFields::new()).with_body(body.into_bytes())
}

/// A reply to `to` (none: no `REPLY_TO_CLIENT`) for correlation id `correlation`, as
/// `createReplyMessage` makes it, sent with request code `code` (324: V1 header, 325: V2).
fn reply_request(code: i32, to: Option<&str>, correlation: &str, body: &str) -> RemotingCommand {
    let mut props =
        format!("CORRELATION_ID\u{1}{correlation}\u{2}MSG_TYPE\u{1}reply\u{2}TTL\u{1}6\u{2}");
    if let Some(to) = to {
        props.push_str(&format!("REPLY_TO_CLIENT\u{1}{to}\u{2}"));
    }
    let version =
        if code == rc::SEND_REPLY_MESSAGE { SendHeaderVersion::V1 } else { SendHeaderVersion::V2 };
    let mut cmd = common::raw::send(
        version,
        ("replier_group", REPLY_TOPIC, 0, 1),
        &props,
        body.as_bytes().to_vec(),
    );
    cmd.code = code;
    cmd
}

/// A broker and a requester connection that has sent its producer heartbeat.
async fn broker_and_requester() -> (RunningBroker, Conn) {
    let broker = start_broker(|_| {}).await;
    let mut requester = Conn::open(broker_addr(&broker)).await;
    let r = requester.call(producer_heartbeat(REQUESTER, "requester_group")).await;
    assert_eq!(r.code, code::SUCCESS, "the heartbeat is taken: {r:?}");
    (broker, requester)
}

/// The next frame `conn` gets, which must be a broker → client request.
async fn pushed(conn: &mut Conn) -> RemotingCommand {
    let (_, push) = conn.read_frame(PATIENCE).await.expect("the reply is pushed to the requester");
    assert!(!push.is_response(), "a request of the broker's: {push:?}");
    push
}

#[tokio::test]
async fn given_a_reply_naming_a_requester_when_sent_should_push_326_on_its_connection_only() {
    for code_sent in [rc::SEND_REPLY_MESSAGE_V2, rc::SEND_REPLY_MESSAGE] {
        let (broker, mut requester) = broker_and_requester().await;
        let mut bystander = Conn::open(broker_addr(&broker)).await;
        let r = bystander.call(producer_heartbeat("127.0.0.1@bystander", "other_group")).await;
        assert_eq!(r.code, code::SUCCESS, "{r:?}");
        let mut replier = Conn::open(broker_addr(&broker)).await;
        let replier_addr = replier.stream.local_addr().expect("the replier's address");
        let mut reply = reply_request(code_sent, Some(REQUESTER), "corr-1", "the reply");
        reply.opaque = replier.opaque();
        replier.write(&reply).await;

        let push = pushed(&mut requester).await;
        assert_eq!(push.code, rc::PUSH_REPLY_MESSAGE_TO_CLIENT, "code 326: {push:?}");
        let f = &push.ext_fields;
        for field in [
            "producerGroup",
            "topic",
            "defaultTopic",
            "defaultTopicQueueNums",
            "queueId",
            "sysFlag",
            "bornTimestamp",
            "flag",
            "bornHost",
            "storeHost",
            "storeTimestamp",
        ] {
            assert!(f.get(field).is_some(), "ReplyMessageRequestHeader requires {field}: {push:?}");
        }
        assert_eq!(f.get("topic"), Some(REPLY_TOPIC));
        assert_eq!(f.get("producerGroup"), Some("replier_group"));
        assert_eq!(f.get("bornHost"), Some(replier_addr.to_string().as_str()), "the replier");
        assert_eq!(f.get("storeHost"), Some(broker_addr(&broker).to_string().as_str()));
        let props = f.get("properties").expect("the reply's properties");
        for pair in ["CORRELATION_ID\u{1}corr-1", "MSG_TYPE\u{1}reply", "PUSH_REPLY_TIME\u{1}"] {
            assert!(props.contains(pair), "the pushed properties carry {pair:?}: {props:?}");
        }
        assert_eq!(&push.body[..], b"the reply", "the reply's body");

        // Until the requester answers, the replier waits; then it is told SUCCESS.
        requester.write(&RemotingCommand::response_to(&push, code::SUCCESS, None)).await;
        let (_, r) =
            replier.response(reply.opaque, PATIENCE).await.expect("the replier is answered");
        assert_eq!(r.code, code::SUCCESS, "the requester took the reply: {r:?}");
        assert_eq!(r.ext_fields.get("queueId"), Some("0"), "{r:?}");
        assert!(r.ext_fields.get("msgId").is_some(), "a send answer's header: {r:?}");

        // The bystander was pushed nothing: the first frame it gets answers its own request.
        let mut probe = max_offset_request(REPLY_TOPIC, 0);
        probe.opaque = bystander.opaque();
        bystander.write(&probe).await;
        let (_, first) = bystander.read_frame(PATIENCE).await.expect("an answer");
        assert!(first.is_response() && first.opaque == probe.opaque, "no push: {first:?}");
        assert_eq!(first.ext_fields.get("offset"), Some("1"), "the reply is stored too: {first:?}");
        broker.shutdown().await;
    }
}

#[tokio::test]
async fn given_a_reply_to_an_unknown_client_when_sent_should_answer_system_error() {
    let (broker, _requester) = broker_and_requester().await;
    let mut replier = Conn::open(broker_addr(&broker)).await;
    let reply = reply_request(rc::SEND_REPLY_MESSAGE_V2, Some("127.0.0.1@nobody"), "c", "x");
    let r = replier.call(reply).await;
    assert_eq!(r.code, code::SYSTEM_ERROR, "RocketMQ's code for a requester it has no channel of");
    let remark = r.remark.unwrap_or_default();
    assert!(
        remark.contains("127.0.0.1@nobody") && remark.contains("not found"),
        "the remark names the client: {remark}"
    );
    let reply = reply_request(rc::SEND_REPLY_MESSAGE, None, "c", "x");
    let r = replier.call(reply).await;
    assert_eq!(r.code, code::SYSTEM_ERROR, "a reply without REPLY_TO_CLIENT: {r:?}");
    assert!(r.remark.unwrap_or_default().contains("REPLY_TO_CLIENT"), "the remark says which");
    broker.shutdown().await;
}

#[tokio::test]
async fn given_a_requester_that_refuses_or_leaves_when_a_reply_is_pushed_should_answer_system_error(
) {
    let (broker, mut requester) = broker_and_requester().await;
    let mut replier = Conn::open(broker_addr(&broker)).await;
    let mut reply = reply_request(rc::SEND_REPLY_MESSAGE_V2, Some(REQUESTER), "c1", "x");
    reply.opaque = replier.opaque();
    replier.write(&reply).await;
    let push = pushed(&mut requester).await;
    let refusal = RemotingCommand::response_to(&push, code::SYSTEM_ERROR, Some("no".into()));
    requester.write(&refusal).await;
    let (_, r) = replier.response(reply.opaque, PATIENCE).await.expect("the replier is answered");
    assert_eq!(r.code, code::SYSTEM_ERROR, "the requester refused the reply: {r:?}");

    // A requester whose connection closes before it answers.
    let mut reply = reply_request(rc::SEND_REPLY_MESSAGE_V2, Some(REQUESTER), "c2", "y");
    reply.opaque = replier.opaque();
    replier.write(&reply).await;
    let _ = pushed(&mut requester).await;
    drop(requester);
    let (_, r) = replier.response(reply.opaque, PATIENCE).await.expect("the replier is answered");
    assert_eq!(r.code, code::SYSTEM_ERROR, "nobody took the reply: {r:?}");
    broker.shutdown().await;
}

#[tokio::test]
async fn given_a_requester_without_a_heartbeat_when_its_request_was_sent_should_push_the_reply_there(
) {
    // The Go client v2.1.2 sends no heartbeat before its first Request to an existing topic:
    // the request message itself says which client is on its connection.
    let broker = start_broker(|_| {}).await;
    let mut requester = Conn::open(broker_addr(&broker)).await;
    let r = requester.call(create_topic_request("RequestTopic", 1)).await;
    assert_eq!(r.code, code::SUCCESS, "{r:?}");
    let props = format!(
        "CORRELATION_ID\u{1}corr-go\u{2}REPLY_TO_CLIENT\u{1}{REQUESTER}\u{2}TTL\u{1}6\u{2}"
    );
    let to = ("requester_group", "RequestTopic", 0, 1);
    let r = requester.call(common::raw::send(SendHeaderVersion::V1, to, &props, &b"req"[..])).await;
    assert_eq!(r.code, code::SUCCESS, "the request message is stored: {r:?}");
    let mut replier = Conn::open(broker_addr(&broker)).await;
    let mut reply = reply_request(rc::SEND_REPLY_MESSAGE, Some(REQUESTER), "corr-go", "go reply");
    reply.opaque = replier.opaque();
    replier.write(&reply).await;
    let push = pushed(&mut requester).await;
    assert_eq!(push.code, rc::PUSH_REPLY_MESSAGE_TO_CLIENT, "{push:?}");
    assert_eq!(&push.body[..], b"go reply");
    requester.write(&RemotingCommand::response_to(&push, code::SUCCESS, None)).await;
    let (_, r) = replier.response(reply.opaque, PATIENCE).await.expect("the replier is answered");
    assert_eq!(r.code, code::SUCCESS, "{r:?}");
    broker.shutdown().await;
}
