//! The statistics codes the RocketMQ Dashboard's collector and mqadmin send (issue 25):
//! `VIEW_BROKER_STATS_DATA` (315, the dashboard's `CollectTaskRunnble` and `statsAll`),
//! `GET_BROKER_CONSUME_STATS` (317, `brokerConsumeStats`) and `GET_ALL_PRODUCER_INFO` (328,
//! `producer`), in raw frames with the header fields of RocketMQ's request headers
//! (`statsName`/`statsKey`, `isOrder`), read by the field names of its bodies
//! (`BrokerStatsData`, `ConsumeStatsList`, `ProducerTableInfo`).

use serde_json::Value;

use super::*;

const TOPIC: &str = "StatsTopic";
const GROUP: &str = "stats_group";

fn json(cmd: &RemotingCommand) -> Value {
    serde_json::from_slice(&cmd.body).unwrap_or_else(|e| panic!("a JSON body ({e}): {cmd:?}"))
}

fn stats_request(name: &str, key: &str) -> RemotingCommand {
    let mut ext = ExtFields::new();
    ext.insert("statsName", name);
    ext.insert("statsKey", key);
    request(rc::VIEW_BROKER_STATS_DATA, ext)
}

/// A broker with `TOPIC`, `GROUP` subscribed by a heartbeat, 3 messages sent to queue 0 and
/// pulled by `GROUP` (2 of them committed).
async fn broker_with_traffic() -> (RunningBroker, Conn) {
    let (broker, mut conn) = broker_with_topic(TOPIC).await;
    let hb = conn.call(heartbeat_request("127.0.0.1@stats", GROUP, TOPIC)).await;
    assert_eq!(hb.code, code::SUCCESS, "the heartbeat is accepted: {hb:?}");
    for i in 0..3 {
        let r = conn.call(send_request(TOPIC, 0, format!("m{i}").into_bytes())).await;
        assert_eq!(r.code, code::SUCCESS, "sending succeeds: {r:?}");
    }
    let r = conn.call(pull_request(GROUP, TOPIC, 0, 0, 0, pull_sys_flag::SUBSCRIPTION)).await;
    assert_eq!(r.code, code::SUCCESS, "the pull finds the messages: {r:?}");
    let mut ext = ExtFields::new();
    ext.insert("consumerGroup", GROUP);
    ext.insert("topic", TOPIC);
    ext.insert_i64("queueId", 0);
    ext.insert_i64("commitOffset", 2);
    let r = conn.call(request(rc::UPDATE_CONSUMER_OFFSET, ext)).await;
    assert_eq!(r.code, code::SUCCESS, "the commit is stored: {r:?}");
    (broker, conn)
}

#[tokio::test]
async fn given_sends_and_pulls_when_viewing_broker_stats_should_answer_minute_hour_and_day() {
    let (broker, mut conn) = broker_with_traffic().await;
    let r = conn.call(stats_request("TOPIC_PUT_NUMS", TOPIC)).await;
    assert_eq!(r.code, code::SUCCESS, "the topic's put stats are answered: {r:?}");
    let body = json(&r);
    for window in ["statsMinute", "statsHour", "statsDay"] {
        let w = &body[window];
        assert_eq!(w["sum"].as_u64(), Some(3), "{window}: the three sends: {body}");
        assert!(w["tps"].as_f64() > Some(0.0), "{window}: a rate: {body}");
        assert_eq!(w["avgpt"].as_f64(), Some(1.0), "{window}: one message per send: {body}");
    }
    // The dashboard's and statsAll's key of a group's consumption: `topic@group`.
    let r = conn.call(stats_request("GROUP_GET_NUMS", &format!("{TOPIC}@{GROUP}"))).await;
    assert_eq!(r.code, code::SUCCESS, "the group's get stats are answered: {r:?}");
    let body = json(&r);
    assert_eq!(body["statsMinute"]["sum"].as_u64(), Some(3), "one pull of three: {body}");
    assert_eq!(body["statsDay"]["avgpt"].as_f64(), Some(3.0), "three per pull: {body}");
    let r = conn.call(stats_request("TOPIC_PUT_SIZE", TOPIC)).await;
    assert_eq!(json(&r)["statsDay"]["sum"].as_u64(), Some(6), "two bytes each: {r:?}");

    let r = conn.call(stats_request("TOPIC_PUT_NUMS", "NoSuchTopic")).await;
    assert_eq!(r.code, code::SYSTEM_ERROR, "an item that does not exist is refused: {r:?}");
    assert_eq!(r.remark.as_deref(), Some("The stats <TOPIC_PUT_NUMS> <NoSuchTopic> not exist"));
    let r = conn.call(stats_request("GROUP_GET_NUMS", &format!("{TOPIC}@nobody"))).await;
    assert_eq!(r.code, code::SYSTEM_ERROR, "a group that never got a message: {r:?}");
    let mut ext = ExtFields::new();
    ext.insert("statsName", "TOPIC_PUT_NUMS");
    let r = conn.call(request(rc::VIEW_BROKER_STATS_DATA, ext)).await;
    assert_ne!(r.code, code::SUCCESS, "statsKey is required: {r:?}");
    broker.shutdown().await;
}

#[tokio::test]
async fn given_a_consuming_group_when_asking_broker_consume_stats_should_list_it_with_its_lag() {
    let (broker, mut conn) = broker_with_traffic().await;
    let mut ext = ExtFields::new();
    ext.insert("isOrder", "false");
    let r = conn.call(request(rc::GET_BROKER_CONSUME_STATS, ext)).await;
    assert_eq!(r.code, code::SUCCESS, "the broker's consume stats are answered: {r:?}");
    let body = json(&r);
    assert!(body["brokerAddr"].as_str().is_some_and(|a| a.starts_with("127.0.0.1:")), "{body}");
    assert_eq!(body["totalDiff"].as_i64(), Some(1), "three stored, two committed: {body}");
    assert_eq!(body["totalInflightDiff"].as_i64(), Some(1), "pulled past the commit: {body}");
    let list = body["consumeStatsList"].as_array().expect("a list of single-group maps");
    let entry = list
        .iter()
        .find_map(|m| m.get(GROUP))
        .unwrap_or_else(|| panic!("{GROUP} is listed: {body}"));
    let stats = entry.as_array().expect("one ConsumeStats per topic");
    assert_eq!(stats.len(), 1, "{body}");
    let table = stats[0]["offsetTable"].as_object().expect("an offset table");
    assert_eq!(table.len(), 4, "one entry per queue: {body}");
    let q0 =
        table.iter().find(|(k, _)| k.contains("\"queueId\":0")).map(|(_, v)| v).expect("queue 0");
    assert_eq!((q0["brokerOffset"].as_i64(), q0["consumerOffset"].as_i64()), (Some(3), Some(2)));
    assert!(stats[0]["consumeTps"].is_number(), "{body}");

    let mut ext = ExtFields::new();
    ext.insert("isOrder", "true");
    let r = conn.call(request(rc::GET_BROKER_CONSUME_STATS, ext)).await;
    let body = json(&r);
    let entry =
        body["consumeStatsList"].as_array().and_then(|l| l.iter().find_map(|m| m.get(GROUP)));
    assert_eq!(entry, Some(&serde_json::json!([])), "no ordered topic: {body}");
    broker.shutdown().await;
}

#[tokio::test]
async fn given_a_producer_heartbeat_when_asking_all_producer_info_should_list_it_by_group() {
    let (broker, mut conn) = broker_with_topic(TOPIC).await;
    let body = r#"{"clientID":"127.0.0.1@prod","producerDataSet":[{"groupName":"stats_producers"}],"consumerDataSet":[]}"#;
    let r = conn
        .call(request(rc::HEART_BEAT, ExtFields::new()).with_body(body.as_bytes().to_vec()))
        .await;
    assert_eq!(r.code, code::SUCCESS, "the producer heartbeat is accepted: {r:?}");
    let r = conn.call(request(rc::GET_ALL_PRODUCER_INFO, ExtFields::new())).await;
    assert_eq!(r.code, code::SUCCESS, "the producer table is answered: {r:?}");
    let body = json(&r);
    let infos = body["data"]["stats_producers"].as_array().expect("the group's producers");
    assert_eq!(infos.len(), 1, "{body}");
    let p = &infos[0];
    assert_eq!(p["clientId"], "127.0.0.1@prod", "{body}");
    assert!(p["remoteIP"].as_str().is_some_and(|a| a.starts_with("/127.0.0.1:")), "{body}");
    assert_eq!(p["language"], "JAVA", "{body}");
    assert!(p["version"].is_number(), "{body}");
    assert!(p["lastUpdateTimestamp"].as_i64() > Some(0), "{body}");
    broker.shutdown().await;
}
