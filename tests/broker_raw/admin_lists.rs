//! The admin codes of issue 25 that mqadmin and the RocketMQ Dashboard send, in raw frames with
//! the field names of their sources (Java `MQClientAPIImpl` and the request/response header
//! and body classes of `org.apache.rocketmq.remoting.protocol`): the name server's system topic
//! list (304), topics by cluster (224) and the graceful-drain pair (205 / 327); the broker's
//! system topics (305), one topic's config (351), the list forms of topic and group creation
//! (18, 225), the batch topic deletion (5002), the stored request modes (402) and the consume
//! time span (303).

use serde_json::{json, Value};

use super::*;

const TOPIC: &str = "ListsTopic";

fn json_body(cmd: &RemotingCommand) -> Value {
    serde_json::from_slice(&cmd.body).unwrap_or_else(|e| panic!("a JSON body ({e}): {cmd:?}"))
}

fn one_field(code: i32, key: &str, value: &str) -> RemotingCommand {
    let mut ext = ExtFields::new();
    ext.insert(key, value);
    request(code, ext)
}

fn names(list: &Value) -> Vec<String> {
    list["topicList"]
        .as_array()
        .unwrap_or_else(|| panic!("a topicList array: {list}"))
        .iter()
        .map(|v| v.as_str().expect("topic names are strings").to_owned())
        .collect()
}

/// The `perm` of the (only) queue data of `topic`'s route, as a producer asks for it.
async fn route_perm(ns: &mut Conn, topic: &str) -> i64 {
    let r = ns.call(one_field(rc::GET_ROUTEINFO_BY_TOPIC, "topic", topic)).await;
    assert_eq!(r.code, code::SUCCESS, "{topic} is routed: {r:?}");
    let route = json_body(&r);
    route["queueDatas"][0]["perm"].as_i64().unwrap_or_else(|| panic!("a perm: {route}"))
}

#[tokio::test]
async fn given_a_broker_when_wiping_its_write_perm_should_route_its_topics_read_only_until_added_back(
) {
    let (broker, mut conn) = broker_with_topic(TOPIC).await;
    let mut ns = Conn::open(broker.namesrv_addr().expect("a name server")).await;
    assert_eq!(route_perm(&mut ns, TOPIC).await, 6, "read-write before the drain");
    let all = ns.call(request(rc::GET_ALL_TOPIC_LIST_FROM_NAMESERVER, ExtFields::new())).await;
    let topics = names(&json_body(&all)).len();

    let r = ns.call(one_field(rc::WIPE_WRITE_PERM_OF_BROKER, "brokerName", "baiji-a")).await;
    assert_eq!(r.code, code::SUCCESS, "the wipe is answered: {r:?}");
    assert_eq!(
        r.ext_fields.get("wipeTopicCount"),
        Some(topics.to_string().as_str()),
        "every topic of the broker is counted: {r:?}"
    );
    assert_eq!(route_perm(&mut ns, TOPIC).await, 4, "a producer's route has no write permission");
    // The broker publishing its table again (a topic created meanwhile) does not undo it.
    let r = conn.call(create_topic_request("ListsLater", 2)).await;
    assert_eq!(r.code, code::SUCCESS, "{r:?}");
    assert_eq!(route_perm(&mut ns, TOPIC).await, 4, "still read-only after a re-registration");
    assert_eq!(route_perm(&mut ns, "ListsLater").await, 6, "a new topic has its own permission");
    let r = ns.call(one_field(rc::WIPE_WRITE_PERM_OF_BROKER, "brokerName", "nobody")).await;
    assert_eq!(r.ext_fields.get("wipeTopicCount"), Some("0"), "an unknown broker has none: {r:?}");

    let r = ns.call(one_field(rc::ADD_WRITE_PERM_OF_BROKER, "brokerName", "baiji-a")).await;
    assert_eq!(r.code, code::SUCCESS, "the add is answered: {r:?}");
    assert_eq!(r.ext_fields.get("addTopicCount"), Some((topics + 1).to_string().as_str()), "{r:?}");
    assert_eq!(route_perm(&mut ns, TOPIC).await, 6, "writable again");
    let r = conn.call(send_request(TOPIC, 0, &b"after the drain"[..])).await;
    assert_eq!(r.code, code::SUCCESS, "and sends go through: {r:?}");
    let r = ns.call(request(rc::WIPE_WRITE_PERM_OF_BROKER, ExtFields::new())).await;
    assert_eq!(r.code, code::SYSTEM_ERROR, "brokerName is required: {r:?}");
    broker.shutdown().await;
}

#[tokio::test]
async fn given_the_dashboards_topic_page_when_listing_system_topics_should_answer_the_name_server_then_the_broker(
) {
    let (broker, _conn) = broker_with_topic(TOPIC).await;
    let mut ns = Conn::open(broker.namesrv_addr().expect("a name server")).await;
    let r = ns.call(request(rc::GET_SYSTEM_TOPIC_LIST_FROM_NS, ExtFields::new())).await;
    assert_eq!(r.code, code::SUCCESS, "the name server answers 304: {r:?}");
    let list = json_body(&r);
    assert_eq!(names(&list), ["DefaultCluster", "baiji-a"], "clusters and brokers: {list}");
    let addr = broker_addr(&broker).to_string();
    assert_eq!(list["brokerAddr"], json!(addr), "where to ask next: {list}");

    // `MQClientAPIImpl.getSystemTopicList` then asks that broker (305).
    let mut b = Conn::open(broker_addr(&broker)).await;
    let r = b.call(request(rc::GET_SYSTEM_TOPIC_LIST_FROM_BROKER, ExtFields::new())).await;
    assert_eq!(r.code, code::SUCCESS, "the broker answers 305: {r:?}");
    let topics = names(&json_body(&r));
    for t in ["SCHEDULE_TOPIC_XXXX", "RMQ_SYS_TRANS_HALF_TOPIC", "TBW102", "rmq_sys_wheel_timer"] {
        assert!(topics.iter().any(|n| n == t), "{t} is a system topic: {topics:?}");
    }
    assert!(!topics.iter().any(|n| n == TOPIC), "a user topic is not: {topics:?}");

    let r = ns.call(one_field(rc::GET_TOPICS_BY_CLUSTER, "cluster", "DefaultCluster")).await;
    assert_eq!(r.code, code::SUCCESS, "224 is answered: {r:?}");
    assert!(names(&json_body(&r)).iter().any(|n| n == TOPIC), "the cluster's topics: {r:?}");
    let r = ns.call(one_field(rc::GET_TOPICS_BY_CLUSTER, "cluster", "NoSuchCluster")).await;
    assert_eq!(names(&json_body(&r)), Vec::<String>::new(), "an unknown cluster has none");
    broker.shutdown().await;
}

#[tokio::test]
async fn given_a_topic_when_the_dashboard_reads_its_config_should_answer_topic_config_and_queue_mapping(
) {
    let (broker, mut conn) = broker_with_topic(TOPIC).await;
    // `MQClientAPIImpl.getTopicConfig`: header `topic` and `lo`.
    let mut ext = ExtFields::new();
    ext.insert("topic", TOPIC);
    ext.insert_bool("lo", false);
    let r = conn.call(request(rc::GET_TOPIC_CONFIG, ext)).await;
    assert_eq!(r.code, code::SUCCESS, "351 is answered: {r:?}");
    let c = json_body(&r);
    assert_eq!(c["topicName"], TOPIC, "{c}");
    assert_eq!(c["readQueueNums"], 4, "{c}");
    assert_eq!(c["writeQueueNums"], 4, "{c}");
    assert_eq!(c["perm"], 6, "{c}");
    assert_eq!(c["topicFilterType"], "SINGLE_TAG", "{c}");
    assert_eq!(c["order"], false, "{c}");
    let r = conn.call(one_field(rc::GET_TOPIC_CONFIG, "topic", "NoSuchTopic")).await;
    assert_eq!(r.code, code::TOPIC_NOT_EXIST, "an unknown topic: {r:?}");
    broker.shutdown().await;
}

fn topic_config(name: &str, read: i64, write: i64) -> Value {
    json!({"topicName": name, "readQueueNums": read, "writeQueueNums": write, "perm": 6,
           "topicFilterType": "SINGLE_TAG", "topicSysFlag": 0, "order": false, "attributes": {}})
}

fn topic_list_request(configs: Vec<Value>) -> RemotingCommand {
    let body = json!({ "topicConfigList": configs }).to_string();
    request(rc::UPDATE_AND_CREATE_TOPIC_LIST, ExtFields::new()).with_body(body.into_bytes())
}

#[tokio::test]
async fn given_a_topic_config_list_when_creating_should_create_all_or_refuse_all_as_single_creation(
) {
    let broker = start_broker(|_| {}).await;
    let mut conn = Conn::open(broker_addr(&broker)).await;
    let ok = topic_list_request(vec![topic_config("ListA", 2, 2), topic_config("ListB", 8, 8)]);
    let r = conn.call(ok).await;
    assert_eq!(r.code, code::SUCCESS, "mqadmin updateTopicList is served: {r:?}");
    for (t, n) in [("ListA", 2), ("ListB", 8)] {
        let r = conn.call(one_field(rc::GET_TOPIC_CONFIG, "topic", t)).await;
        assert_eq!(r.code, code::SUCCESS, "{t} exists: {r:?}");
        assert_eq!(json_body(&r)["writeQueueNums"], n, "{t} has its queues: {r:?}");
    }
    // Each entry is checked as code 17 checks its header; a bad one refuses the whole list.
    let bad_lists = [
        vec![topic_config("ListC", 2, 2), topic_config("TBW102", 2, 2)],
        vec![topic_config("ListC", 2, 2), topic_config("ListD", 0, 2)],
        vec![topic_config("ListC", 2, 2), topic_config("ListE", 2, 100_000)],
        vec![topic_config("ListC", 2, 2), topic_config("bad name!", 2, 2)],
    ];
    for list in bad_lists {
        let r = conn.call(topic_list_request(list.clone())).await;
        assert_eq!(r.code, code::SYSTEM_ERROR, "refused: {list:?}: {r:?}");
        let r = conn.call(one_field(rc::GET_TOPIC_CONFIG, "topic", "ListC")).await;
        assert_eq!(r.code, code::TOPIC_NOT_EXIST, "nothing of a refused list is created: {r:?}");
    }
    let r = conn.call(request(rc::UPDATE_AND_CREATE_TOPIC_LIST, ExtFields::new())).await;
    assert_eq!(r.code, code::SYSTEM_ERROR, "a list without a body: {r:?}");
    broker.shutdown().await;
}

fn delete_topic_list_request(body: &str) -> RemotingCommand {
    request(rc::DELETE_TOPIC_IN_BROKER_LIST, ExtFields::new()).with_body(body.as_bytes().to_vec())
}

#[tokio::test]
async fn given_a_topic_list_when_deleting_by_list_should_delete_all_or_refuse_all_as_single_deletion(
) {
    let broker = start_broker(|_| {}).await;
    let mut conn = Conn::open(broker_addr(&broker)).await;
    let make = topic_list_request(vec![
        topic_config("DelA", 2, 2),
        topic_config("DelB", 2, 2),
        topic_config("DelC", 2, 2),
    ]);
    assert_eq!(conn.call(make).await.code, code::SUCCESS, "three topics are created");
    // The body of RocketMQ's DeleteTopicListRequestBody, as rocketmq-admin-cli's deleteTopic
    // sends it (code 5002, no header fields).
    let r = conn.call(delete_topic_list_request(r#"{"topicList":["DelA","DelB"]}"#)).await;
    assert_eq!(r.code, code::SUCCESS, "the list is deleted: {r:?}");
    for t in ["DelA", "DelB"] {
        let r = conn.call(one_field(rc::GET_TOPIC_CONFIG, "topic", t)).await;
        assert_eq!(r.code, code::TOPIC_NOT_EXIST, "{t} is gone: {r:?}");
    }
    // A list naming a system topic, an empty list and a body that is not the class's JSON
    // delete nothing.
    for body in [r#"{"topicList":["DelC","TBW102"]}"#, r#"{"topicList":[]}"#, "not json", ""] {
        let r = conn.call(delete_topic_list_request(body)).await;
        assert_eq!(r.code, code::SYSTEM_ERROR, "refused: {body:?}: {r:?}");
        let r = conn.call(one_field(rc::GET_TOPIC_CONFIG, "topic", "DelC")).await;
        assert_eq!(r.code, code::SUCCESS, "nothing of a refused list is deleted: {r:?}");
    }
    broker.shutdown().await;
}

fn group_list_request(configs: Vec<Value>) -> RemotingCommand {
    let body = json!({ "groupConfigList": configs }).to_string();
    request(rc::UPDATE_AND_CREATE_SUBSCRIPTIONGROUP_LIST, ExtFields::new())
        .with_body(body.into_bytes())
}

#[tokio::test]
async fn given_a_group_config_list_when_creating_should_store_all_or_refuse_all_as_single_creation()
{
    let broker = start_broker(|_| {}).await;
    let mut conn = Conn::open(broker_addr(&broker)).await;
    let list = vec![
        json!({"groupName": "list_g1", "consumeEnable": true, "retryMaxTimes": 3}),
        json!({"groupName": "list_g2", "consumeMessageOrderly": true, "retryMaxTimes": 5}),
    ];
    let r = conn.call(group_list_request(list)).await;
    assert_eq!(r.code, code::SUCCESS, "mqadmin updateSubGroupList is served: {r:?}");
    for (g, retries) in [("list_g1", 3), ("list_g2", 5)] {
        let r = conn.call(one_field(rc::GET_SUBSCRIPTIONGROUP_CONFIG, "group", g)).await;
        assert_eq!(r.code, code::SUCCESS, "{g} is stored: {r:?}");
        assert_eq!(json_body(&r)["retryMaxTimes"], retries, "{g} as sent: {r:?}");
    }
    // Each entry is checked as code 200 checks its body.
    let long = "g".repeat(256);
    let bad_lists = [
        vec![json!({"groupName": "list_g3"}), json!({"retryMaxTimes": 1})],
        vec![json!({"groupName": "list_g3"}), json!({"groupName": ""})],
        vec![json!({"groupName": "list_g3"}), json!({"groupName": long})],
        vec![json!({"groupName": "list_g3"}), json!({"groupName": "x", "retryMaxTimes": "3"})],
    ];
    for list in bad_lists {
        let r = conn.call(group_list_request(list.clone())).await;
        assert_eq!(r.code, code::SYSTEM_ERROR, "refused: {list:?}: {r:?}");
        let r = conn.call(one_field(rc::GET_SUBSCRIPTIONGROUP_CONFIG, "group", "list_g3")).await;
        assert_eq!(r.code, code::SUBSCRIPTION_GROUP_NOT_EXIST, "none stored: {r:?}");
    }
    broker.shutdown().await;
}

#[tokio::test]
async fn given_request_modes_set_when_a_slave_asks_all_should_answer_the_message_request_mode_manager(
) {
    let broker = start_broker(|_| {}).await;
    let mut conn = Conn::open(broker_addr(&broker)).await;
    let r = conn.call(request(rc::GET_ALL_MESSAGE_REQUEST_MODE, ExtFields::new())).await;
    assert_eq!(r.code, code::SUCCESS, "402 is answered: {r:?}");
    assert_eq!(json_body(&r), json!({"messageRequestModeMap": {}}), "nothing set yet");
    let set = json!({"topic": TOPIC, "consumerGroup": "mode_g", "mode": "POP",
                     "popShareQueueNum": 2});
    let req = request(rc::SET_MESSAGE_REQUEST_MODE, ExtFields::new())
        .with_body(set.to_string().into_bytes());
    let r = conn.call(req).await;
    assert_eq!(r.code, code::SUCCESS, "{r:?}");
    let r = conn.call(request(rc::GET_ALL_MESSAGE_REQUEST_MODE, ExtFields::new())).await;
    assert_eq!(r.code, code::SUCCESS, "{r:?}");
    let body = json_body(&r);
    assert_eq!(body["messageRequestModeMap"][TOPIC]["mode_g"], set, "what 401 stored: {body}");
    broker.shutdown().await;
}

#[tokio::test]
async fn given_messages_and_a_commit_when_querying_consume_time_span_should_answer_each_queues_times(
) {
    let (broker, mut conn) = broker_with_topic(TOPIC).await;
    // `holder` never commits, so the messages stay while the test looks.
    for (client, group) in [("127.0.0.1@span", "span_g"), ("127.0.0.1@holder", "span_holder")] {
        let r = conn.call(heartbeat_request(client, group, TOPIC)).await;
        assert_eq!(r.code, code::SUCCESS, "{r:?}");
    }
    for i in 0..3 {
        let r = conn.call(send_request(TOPIC, 0, format!("m{i}").into_bytes())).await;
        assert_eq!(r.code, code::SUCCESS, "{r:?}");
    }
    let mut ext = ExtFields::new();
    ext.insert("consumerGroup", "span_g");
    ext.insert("topic", TOPIC);
    ext.insert_i64("queueId", 0);
    ext.insert_i64("commitOffset", 1);
    let r = conn.call(request(rc::UPDATE_CONSUMER_OFFSET, ext)).await;
    assert_eq!(r.code, code::SUCCESS, "{r:?}");

    // `MQClientAPIImpl.queryConsumeTimeSpan`: header `topic` and `group`.
    let mut ext = ExtFields::new();
    ext.insert("topic", TOPIC);
    ext.insert("group", "span_g");
    let r = conn.call(request(rc::QUERY_CONSUME_TIME_SPAN, ext)).await;
    assert_eq!(r.code, code::SUCCESS, "303 is answered: {r:?}");
    let body = json_body(&r);
    let spans = body["consumeTimeSpanSet"].as_array().expect("a consumeTimeSpanSet array");
    assert_eq!(spans.len(), 4, "one per queue: {body}");
    let q = |id: i64| {
        spans
            .iter()
            .find(|s| s["messageQueue"]["queueId"] == id)
            .unwrap_or_else(|| panic!("queue {id}: {body}"))
    };
    let q0 = q(0);
    assert_eq!(q0["messageQueue"]["topic"], TOPIC, "{q0}");
    assert_eq!(q0["messageQueue"]["brokerName"], "baiji-a", "{q0}");
    let min = q0["minTimeStamp"].as_i64().expect("minTimeStamp");
    let max = q0["maxTimeStamp"].as_i64().expect("maxTimeStamp");
    assert!(min > 1_600_000_000_000 && min <= max, "store times of the first and last: {q0}");
    assert_eq!(q0["consumeTimeStamp"], min, "the committed message (offset 0) is the first: {q0}");
    assert!(q0["delayTime"].as_i64().is_some_and(|d| d >= 0), "the next one's wait: {q0}");
    let q1 = q(1);
    assert_eq!(q1["minTimeStamp"], -1, "an empty queue has no times: {q1}");
    assert_eq!(q1["maxTimeStamp"], -1, "{q1}");
    assert_eq!(q1["delayTime"], 0, "nothing waits: {q1}");

    let mut ext = ExtFields::new();
    ext.insert("topic", "NoSuchTopic");
    ext.insert("group", "span_g");
    let r = conn.call(request(rc::QUERY_CONSUME_TIME_SPAN, ext)).await;
    assert_eq!(r.code, code::TOPIC_NOT_EXIST, "an unknown topic: {r:?}");
    broker.shutdown().await;
}
