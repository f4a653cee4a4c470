//! The admin codes `rocketmq-admin-cli` sends (issue 15), in raw frames exactly as the tool's
//! client writes them (header field names of rocketmq-rust's request headers, JSON bodies of
//! its `KVTable`, `TopicStatsTable`, `ConsumeStats`, `ConsumerConnection`,
//! `ProducerConnection`, `ResetOffsetBody`, `SubscriptionGroupConfig`): every code baiji
//! answers for the tool, with real figures.

use serde_json::Value;

use super::*;

const TOPIC: &str = "AdminTopic";
const GROUP: &str = "admin_group";
const HOLDER: &str = "holder_group";

fn json(cmd: &RemotingCommand) -> Value {
    serde_json::from_slice(&cmd.body).unwrap_or_else(|e| panic!("a JSON body ({e}): {cmd:?}"))
}

/// The entry of an offset table (keyed by a queue's JSON text) for queue `queue_id` of `topic`.
fn queue_entry<'a>(table: &'a Value, topic: &str, queue_id: i64) -> &'a Value {
    let map = table.as_object().expect("an offset table is an object");
    map.iter()
        .find(|(k, _)| {
            let q: Value = serde_json::from_str(k).expect("a key is a queue's JSON text");
            q["topic"] == topic && q["queueId"] == queue_id && q["brokerName"] == "baiji-a"
        })
        .map(|(_, v)| v)
        .unwrap_or_else(|| panic!("queue {topic}/{queue_id} is in the table: {table}"))
}

fn commit_request(group: &str, topic: &str, queue: i32, offset: u64) -> RemotingCommand {
    let mut ext = ExtFields::new();
    ext.insert("consumerGroup", group);
    ext.insert("topic", topic);
    ext.insert_i64("queueId", i64::from(queue));
    ext.insert_i64("commitOffset", offset as i64);
    request(rc::UPDATE_CONSUMER_OFFSET, ext)
}

fn committed_offset_request(group: &str, topic: &str, queue: i32) -> RemotingCommand {
    let mut ext = ExtFields::new();
    ext.insert("consumerGroup", group);
    ext.insert("topic", topic);
    ext.insert_i64("queueId", i64::from(queue));
    request(rc::QUERY_CONSUMER_OFFSET, ext)
}

fn one_field(code: i32, key: &str, value: &str) -> RemotingCommand {
    let mut ext = ExtFields::new();
    ext.insert(key, value);
    request(code, ext)
}

/// A broker with `TOPIC` (4 queues), 3 messages in queue 0, `GROUP` subscribed by a heartbeat
/// on the returned connection and its offset of queue 0 committed at 1, and `HOLDER` (which
/// never commits) subscribed too, so that no message is reclaimed while the test looks.
async fn broker_with_progress() -> (RunningBroker, Conn) {
    let (broker, mut conn) = broker_with_topic(TOPIC).await;
    let hb = conn.call(heartbeat_request("127.0.0.1@admin", GROUP, TOPIC)).await;
    assert_eq!(hb.code, code::SUCCESS, "the heartbeat is accepted: {hb:?}");
    let hb = conn.call(heartbeat_request("127.0.0.1@holder", HOLDER, TOPIC)).await;
    assert_eq!(hb.code, code::SUCCESS, "the heartbeat is accepted: {hb:?}");
    for i in 0..3 {
        let r = conn.call(send_request(TOPIC, 0, format!("m{i}").into_bytes())).await;
        assert_eq!(r.code, code::SUCCESS, "sending succeeds: {r:?}");
    }
    let r = conn.call(commit_request(GROUP, TOPIC, 0, 1)).await;
    assert_eq!(r.code, code::SUCCESS, "the commit is stored: {r:?}");
    (broker, conn)
}

#[tokio::test]
async fn given_messages_when_asking_topic_stats_should_answer_each_queues_offsets_and_last_time() {
    let (broker, mut conn) = broker_with_progress().await;
    let r = conn.call(one_field(rc::GET_TOPIC_STATS_INFO, "topic", TOPIC)).await;
    assert_eq!(r.code, code::SUCCESS, "topic stats are answered: {r:?}");
    let body = json(&r);
    let table = &body["offsetTable"];
    assert_eq!(table.as_object().map(|m| m.len()), Some(4), "one entry per queue: {body}");
    let q0 = queue_entry(table, TOPIC, 0);
    assert_eq!((q0["minOffset"].as_i64(), q0["maxOffset"].as_i64()), (Some(0), Some(3)), "{q0}");
    assert!(q0["lastUpdateTimestamp"].as_i64() > Some(0), "queue 0 has a last store time: {q0}");
    let q1 = queue_entry(table, TOPIC, 1);
    assert_eq!(q1["maxOffset"].as_i64(), Some(0), "queue 1 is empty: {q1}");
    assert!(body["topicPutTps"].is_number(), "topicPutTps is present (the tool needs it): {body}");
    let r = conn.call(one_field(rc::GET_TOPIC_STATS_INFO, "topic", "NoSuchTopic")).await;
    assert_eq!(r.code, code::SYSTEM_ERROR, "an unknown topic is refused as RocketMQ does: {r:?}");
    assert!(r.remark.as_deref().is_some_and(|m| m.contains("not exist")), "{r:?}");
    broker.shutdown().await;
}

/// RocketMQ's statistics keep a queue's last store time and a group's last consumed time when
/// the messages are gone from memory (its commit log still has them): baiji keeps them too,
/// so mqadmin's `brokerConsumeStats` (which skips a row whose `lastTimestamp` is 0) lists a
/// group that has consumed everything.
#[tokio::test]
async fn given_a_drained_queue_when_asking_stats_should_keep_the_last_store_times() {
    const DRAINED: &str = "DrainedTopic";
    let (broker, mut conn) = broker_with_topic(DRAINED).await;
    let hb = conn.call(heartbeat_request("127.0.0.1@drained", GROUP, DRAINED)).await;
    assert_eq!(hb.code, code::SUCCESS, "the heartbeat is accepted: {hb:?}");
    let before = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("a clock after 1970")
        .as_millis() as i64;
    for i in 0..3 {
        let r = conn.call(send_request(DRAINED, 0, format!("m{i}").into_bytes())).await;
        assert_eq!(r.code, code::SUCCESS, "sending succeeds: {r:?}");
    }
    let r = conn.call(commit_request(GROUP, DRAINED, 0, 3)).await;
    assert_eq!(r.code, code::SUCCESS, "the commit is stored: {r:?}");
    // Wait for the reaper to free what the only group has consumed.
    let deadline = Instant::now() + PATIENCE;
    loop {
        let r = conn.call(one_field(rc::GET_TOPIC_STATS_INFO, "topic", DRAINED)).await;
        let q0 = queue_entry(&json(&r)["offsetTable"], DRAINED, 0).clone();
        if q0["minOffset"].as_i64() == Some(3) {
            let last = q0["lastUpdateTimestamp"].as_i64().expect("lastUpdateTimestamp");
            assert!(last >= before, "the last message's store time outlives it: {q0}");
            break;
        }
        assert!(Instant::now() < deadline, "the consumed messages are freed: {q0}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let r = conn.call(one_field(rc::GET_CONSUME_STATS, "consumerGroup", GROUP)).await;
    let q0 = queue_entry(&json(&r)["offsetTable"], DRAINED, 0).clone();
    assert_eq!(q0["consumerOffset"].as_i64(), Some(3), "{q0}");
    assert!(q0["lastTimestamp"].as_i64() >= Some(before), "the last consumed message's time: {q0}");
    let mut ext = ExtFields::new();
    ext.insert_bool("isOrder", false);
    ext.insert_i64("timeoutMillis", 3000);
    let r = conn.call(request(rc::GET_BROKER_CONSUME_STATS, ext)).await;
    let body = json(&r);
    let stats = body["consumeStatsList"]
        .as_array()
        .and_then(|l| l.iter().find_map(|m| m.get(GROUP)))
        .and_then(|e| e.as_array())
        .unwrap_or_else(|| panic!("{GROUP} is listed: {body}"));
    let q0 = stats
        .iter()
        .find_map(|s| queue_entry_in(&s["offsetTable"], DRAINED, 0))
        .unwrap_or_else(|| panic!("queue 0 of {DRAINED} is listed: {body}"));
    assert!(q0["lastTimestamp"].as_i64() >= Some(before), "317 answers it too: {q0}");
    let mut ext = ExtFields::new();
    ext.insert("topic", DRAINED);
    ext.insert("group", GROUP);
    let r = conn.call(request(rc::QUERY_CONSUME_TIME_SPAN, ext)).await;
    assert_eq!(r.code, code::SUCCESS, "the time span is answered: {r:?}");
    let spans = json(&r);
    let span = spans["consumeTimeSpanSet"]
        .as_array()
        .and_then(|l| l.iter().find(|s| s["messageQueue"]["queueId"] == 0))
        .unwrap_or_else(|| panic!("queue 0 has a span: {spans}"))
        .clone();
    assert!(span["maxTimeStamp"].as_i64() >= Some(before), "{span}");
    assert!(span["consumeTimeStamp"].as_i64() >= Some(before), "{span}");
    broker.shutdown().await;
}

/// Like [`queue_entry`], `None` when the queue is not in the table.
fn queue_entry_in<'a>(table: &'a Value, topic: &str, queue_id: i64) -> Option<&'a Value> {
    table.as_object()?.iter().find_map(|(k, v)| {
        let q: Value = serde_json::from_str(k).ok()?;
        (q["topic"] == topic && q["queueId"] == queue_id).then_some(v)
    })
}

#[tokio::test]
async fn given_a_committed_offset_when_asking_consume_stats_should_answer_progress_per_queue() {
    let (broker, mut conn) = broker_with_progress().await;
    let r = conn.call(one_field(rc::GET_CONSUME_STATS, "consumerGroup", GROUP)).await;
    assert_eq!(r.code, code::SUCCESS, "consume stats are answered: {r:?}");
    let body = json(&r);
    let q0 = queue_entry(&body["offsetTable"], TOPIC, 0);
    assert_eq!(q0["brokerOffset"].as_i64(), Some(3), "the broker offset is the max offset: {q0}");
    assert_eq!(q0["consumerOffset"].as_i64(), Some(1), "the consumer offset is the commit: {q0}");
    assert!(q0["lastTimestamp"].as_i64() > Some(0), "the last consumed message's time: {q0}");
    assert!(body["consumeTps"].is_number(), "consumeTps is present (the tool needs it): {body}");
    assert!(
        body["heldBytes"].as_u64() > Some(0),
        "baiji adds the memory the group holds (2 unconsumed messages): {body}"
    );
    let mut ext = ExtFields::new();
    ext.insert("consumerGroup", GROUP);
    ext.insert("topic", TOPIC);
    let r = conn.call(request(rc::GET_CONSUME_STATS, ext)).await;
    assert_eq!(r.code, code::SUCCESS, "consume stats of one topic are answered: {r:?}");
    let r = conn.call(one_field(rc::GET_CONSUME_STATS, "consumerGroup", "nobody")).await;
    assert_eq!(r.code, code::SUBSCRIPTION_GROUP_NOT_EXIST, "an unknown group is refused: {r:?}");
    let r = conn.call(one_field(rc::QUERY_TOPIC_CONSUME_BY_WHO, "topic", TOPIC)).await;
    assert_eq!(r.code, code::SUCCESS, "the topic's groups are answered: {r:?}");
    assert_eq!(json(&r)["groupList"], serde_json::json!([GROUP, HOLDER]), "the subscribed groups");
    broker.shutdown().await;
}

#[tokio::test]
async fn given_traffic_when_asking_runtime_info_should_report_totals_and_memory() {
    let (broker, mut conn) = broker_with_progress().await;
    let deadline = Instant::now() + PATIENCE;
    let table = loop {
        let r = conn.call(request(rc::GET_BROKER_RUNTIME_INFO, ExtFields::new())).await;
        assert_eq!(r.code, code::SUCCESS, "runtime info is answered: {r:?}");
        let table = json(&r)["table"].clone();
        // The rates are sampled once a second.
        if table["msgPutTotalTodayNow"] == "3" || Instant::now() > deadline {
            break table;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(table["msgPutTotalTodayNow"], "3", "the three stored messages: {table}");
    assert_eq!(table["brokerActive"], "true", "{table}");
    assert_eq!(
        table["baijiMemoryBudget"],
        (1u64 << 30).to_string(),
        "the memory budget in force: {table}"
    );
    let used: u64 = table["baijiMemoryUsed"].as_str().and_then(|v| v.parse().ok()).unwrap_or(0);
    assert!(used > 0, "memory in use is reported: {table}");
    let capacity = table["commitLogDirCapacity"].as_str().unwrap_or_default();
    assert!(
        capacity.starts_with("Total : 1.0 GiB, Free : "),
        "the commit log's capacity is the memory budget: {table}"
    );
    for key in ["putTps", "getTransferredTps", "earliestMessageTimeStamp", "commitLogDiskRatio"] {
        assert!(table[key].is_string(), "{key} is reported: {table}");
    }
    broker.shutdown().await;
}

#[tokio::test]
async fn given_clients_when_asking_connections_should_list_them_with_their_subscriptions() {
    let (broker, mut conn) = broker_with_progress().await;
    let body = r#"{"clientID":"127.0.0.1@prod","producerDataSet":[{"groupName":"admin_producers"}],"consumerDataSet":[]}"#;
    let r = conn
        .call(request(rc::HEART_BEAT, ExtFields::new()).with_body(body.as_bytes().to_vec()))
        .await;
    assert_eq!(r.code, code::SUCCESS, "the producer heartbeat is accepted: {r:?}");

    let r = conn.call(one_field(rc::GET_CONSUMER_CONNECTION_LIST, "consumerGroup", GROUP)).await;
    assert_eq!(r.code, code::SUCCESS, "the group's connections are answered: {r:?}");
    let body = json(&r);
    let conns = body["connectionSet"].as_array().expect("a connection set");
    assert_eq!(conns.len(), 1, "one client: {body}");
    assert_eq!(conns[0]["clientId"], "127.0.0.1@admin", "{body}");
    assert_eq!(conns[0]["language"], "JAVA", "the heartbeat's language: {body}");
    assert!(conns[0]["clientAddr"].as_str().is_some_and(|a| a.starts_with("127.0.0.1:")), "{body}");
    assert_eq!(body["subscriptionTable"][TOPIC]["subString"], "*", "the subscription: {body}");
    assert_eq!(body["messageModel"], "CLUSTERING", "{body}");
    assert_eq!(body["consumeType"], "CONSUME_PASSIVELY", "{body}");
    assert_eq!(body["consumeFromWhere"], "CONSUME_FROM_FIRST_OFFSET", "{body}");
    let r = conn.call(one_field(rc::GET_CONSUMER_CONNECTION_LIST, "consumerGroup", "gone")).await;
    assert_eq!(r.code, code::CONSUMER_NOT_ONLINE, "a group without clients is not online: {r:?}");

    let r = conn
        .call(one_field(rc::GET_PRODUCER_CONNECTION_LIST, "producerGroup", "admin_producers"))
        .await;
    assert_eq!(r.code, code::SUCCESS, "the producer group's connections are answered: {r:?}");
    let body = json(&r);
    assert_eq!(body["connectionSet"][0]["clientId"], "127.0.0.1@prod", "{body}");
    let r = conn.call(one_field(rc::GET_PRODUCER_CONNECTION_LIST, "producerGroup", "none")).await;
    assert_eq!(r.code, code::SYSTEM_ERROR, "an unknown producer group is refused: {r:?}");
    broker.shutdown().await;
}

#[tokio::test]
async fn given_a_subscription_group_when_created_read_and_deleted_should_follow_each_step() {
    let (broker, mut conn) = broker_with_topic(TOPIC).await;
    let config = r#"{"groupName":"sub_group","consumeEnable":true,"consumeBroadcastEnable":true,"retryQueueNums":1,"retryMaxTimes":16,"brokerId":0,"whichBrokerWhenConsumeSlowly":1,"notifyConsumerIdsChangedEnable":true,"groupSysFlag":0,"consumeMessageOrderly":false}"#;
    let r = conn
        .call(
            request(rc::UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, ExtFields::new())
                .with_body(config.as_bytes().to_vec()),
        )
        .await;
    assert_eq!(r.code, code::SUCCESS, "the group is created: {r:?}");
    let r = conn.call(one_field(rc::GET_SUBSCRIPTIONGROUP_CONFIG, "group", "sub_group")).await;
    assert_eq!(r.code, code::SUCCESS, "the group's config is answered: {r:?}");
    assert_eq!(json(&r)["retryMaxTimes"], 16, "the config as it was sent");
    let r = conn.call(request(rc::GET_ALL_SUBSCRIPTIONGROUP_CONFIG, ExtFields::new())).await;
    assert_eq!(r.code, code::SUCCESS, "every group's config is answered: {r:?}");
    assert_eq!(json(&r)["subscriptionGroupTable"]["sub_group"]["groupName"], "sub_group");
    let mut ext = ExtFields::new();
    ext.insert("groupName", "sub_group");
    ext.insert_bool("cleanOffset", true);
    let r = conn.call(request(rc::DELETE_SUBSCRIPTIONGROUP, ext)).await;
    assert_eq!(r.code, code::SUCCESS, "the group is deleted: {r:?}");
    let r = conn.call(one_field(rc::GET_SUBSCRIPTIONGROUP_CONFIG, "group", "sub_group")).await;
    assert_eq!(r.code, code::SUBSCRIPTION_GROUP_NOT_EXIST, "a deleted group is gone: {r:?}");
    // rocketmq-admin-cli's deleteSubGroup sends the list form.
    let create = request(rc::UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, ExtFields::new())
        .with_body(config.as_bytes().to_vec());
    assert_eq!(conn.call(create).await.code, code::SUCCESS, "the group is created again");
    let list = request(rc::DELETE_SUBSCRIPTIONGROUP_LIST, ExtFields::new())
        .with_body(br#"{"groupNameList":["sub_group"],"cleanOffset":false}"#.to_vec());
    let r = conn.call(list).await;
    assert_eq!(r.code, code::SUCCESS, "the list of groups is deleted: {r:?}");
    let r = conn.call(one_field(rc::GET_SUBSCRIPTIONGROUP_CONFIG, "group", "sub_group")).await;
    assert_eq!(
        r.code,
        code::SUBSCRIPTION_GROUP_NOT_EXIST,
        "a group deleted by list is gone: {r:?}"
    );
    let r = conn
        .call(
            request(rc::UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, ExtFields::new())
                .with_body(b"{}".to_vec()),
        )
        .await;
    assert_eq!(r.code, code::SYSTEM_ERROR, "a config without groupName is refused: {r:?}");
    broker.shutdown().await;
}

fn reset_request(group: &str, topic: &str, timestamp: i64) -> RemotingCommand {
    let mut ext = ExtFields::new();
    ext.insert("topic", topic);
    ext.insert("group", group);
    ext.insert_i64("timestamp", timestamp);
    ext.insert_bool("isForce", true);
    request(rc::INVOKE_BROKER_TO_RESET_OFFSET, ext)
}

#[tokio::test]
async fn given_a_running_consumer_when_resetting_offsets_should_commit_them_and_tell_the_client() {
    let (broker, mut admin) = broker_with_progress().await;
    // The consumer's own connection: the reset reaches it.
    let mut consumer = Conn::open(broker_addr(&broker)).await;
    let hb = consumer.call(heartbeat_request("127.0.0.1@running", GROUP, TOPIC)).await;
    assert_eq!(hb.code, code::SUCCESS, "the heartbeat is accepted: {hb:?}");
    // A time after every message: each queue moves to its end (queue 0 from 1 to 3). (A time
    // before them would give the first retained offset, which the reaper may have moved.)
    let later = 4_102_444_800_000; // 2100-01-01
    let r = admin.call(reset_request(GROUP, TOPIC, later)).await;
    assert_eq!(r.code, code::SUCCESS, "the reset is done: {r:?}");
    let q0 = queue_entry(&json(&r)["offsetTable"], TOPIC, 0).clone();
    assert_eq!(q0.as_i64(), Some(3), "a time after every message resets queue 0 to its end: {r:?}");

    let deadline = tokio::time::Instant::now() + PATIENCE;
    let told = loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        let (_, cmd) = consumer.read_frame(left).await.expect("the client is told within patience");
        if cmd.code == rc::RESET_CONSUMER_CLIENT_OFFSET && !cmd.is_response() {
            break cmd;
        }
    };
    assert!(told.is_oneway(), "RESET_CONSUMER_CLIENT_OFFSET is one-way, as RocketMQ sends it");
    assert_eq!(told.ext_fields.get("group"), Some(GROUP), "{told:?}");
    assert_eq!(told.ext_fields.get("topic"), Some(TOPIC), "{told:?}");
    assert_eq!(queue_entry(&json(&told)["offsetTable"], TOPIC, 0).as_i64(), Some(3), "{told:?}");

    let r = admin.call(committed_offset_request(GROUP, TOPIC, 0)).await;
    assert_eq!(r.ext_fields.get("offset"), Some("3"), "the broker's committed offset moved: {r:?}");

    let r = admin.call(reset_request("offline_group", TOPIC, 0)).await;
    assert_eq!(r.code, code::CONSUMER_NOT_ONLINE, "a group without clients is not online: {r:?}");
    broker.shutdown().await;
}

#[tokio::test]
async fn given_broker_config_when_updating_live_settings_should_take_effect_and_refuse_the_rest() {
    let (broker, mut conn) = broker_with_topic(TOPIC).await;
    let r = conn.call(request(rc::GET_BROKER_CONFIG, ExtFields::new())).await;
    assert_eq!(r.code, code::SUCCESS, "the config is answered: {r:?}");
    let text = String::from_utf8(r.body.to_vec()).expect("a UTF-8 properties text");
    assert!(text.contains("memoryBudget=1073741824\n"), "the budget in force: {text}");
    assert!(text.contains("brokerName=baiji-a\n"), "RocketMQ's names: {text}");

    let update = |body: &str| {
        request(rc::UPDATE_BROKER_CONFIG, ExtFields::new()).with_body(body.as_bytes().to_vec())
    };
    let r = conn.call(update("memoryBudget=4096\nretentionSecs=5\n")).await;
    assert_eq!(r.code, code::SUCCESS, "live settings change: {r:?}");
    let r = conn.call(request(rc::GET_BROKER_CONFIG, ExtFields::new())).await;
    let text = String::from_utf8(r.body.to_vec()).expect("a UTF-8 properties text");
    assert!(text.contains("memoryBudget=4096\n"), "the new budget: {text}");
    assert!(text.contains("retentionSecs=5\n"), "the new retention: {text}");
    let r = conn.call(send_request(TOPIC, 0, vec![b'x'; 8192])).await;
    assert_eq!(r.code, code::SYSTEM_BUSY, "a message over the new budget is refused: {r:?}");

    let r = conn.call(update("listenPort=1\n")).await;
    assert_eq!(r.code, code::NO_PERMISSION, "a setting that cannot change live is refused: {r:?}");
    assert!(
        r.remark.as_deref().is_some_and(|m| m.contains("listenPort") && m.contains("restart")),
        "the remark names the setting and says what to do: {r:?}"
    );
    let r = conn.call(update("memoryPolicy=block\n")).await;
    assert_eq!(r.code, code::NO_PERMISSION, "block is not a broker policy: {r:?}");
    broker.shutdown().await;
}

#[tokio::test]
async fn given_subscription_group_configs_when_large_or_with_foreign_fields_should_bound_what_is_kept(
) {
    // Review M9: the body was stored as sent, up to 16 MiB per group; RocketMQ deserialises it
    // into its typed SubscriptionGroupConfig, so only its fields, of their types, are kept.
    let (broker, mut conn) = broker_with_topic(TOPIC).await;
    let create = |body: String| {
        request(rc::UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, ExtFields::new())
            .with_body(body.into_bytes())
    };
    let junk = vec!["1"; 4_000].join(",");
    let r = conn
        .call(create(format!(r#"{{"groupName":"g_foreign","retryMaxTimes":3,"junk":[{junk}]}}"#)))
        .await;
    assert_eq!(r.code, code::SUCCESS, "a config with a foreign field is taken: {r:?}");
    let r = conn.call(one_field(rc::GET_SUBSCRIPTIONGROUP_CONFIG, "group", "g_foreign")).await;
    let kept = json(&r);
    assert_eq!(kept["retryMaxTimes"], 3, "RocketMQ's fields are kept: {kept}");
    assert!(kept.get("junk").is_none(), "a foreign field is not: {kept}");
    let big = vec!["1"; 10_000].join(",");
    let r = conn
        .call(create(format!(r#"{{"groupName":"g_big","attributes":{{}},"junk":[{big}]}}"#)))
        .await;
    assert_eq!(r.code, code::SYSTEM_ERROR, "a body over 16 KiB is refused: {r:?}");
    assert!(r.remark.as_deref().is_some_and(|m| m.contains("16384")), "saying why: {r:?}");
    let r = conn.call(create(r#"{"groupName":"g_typed","retryMaxTimes":"x"}"#.into())).await;
    assert_eq!(r.code, code::SYSTEM_ERROR, "a field of the wrong type is refused: {r:?}");
    for g in ["g_big", "g_typed"] {
        let r = conn.call(one_field(rc::GET_SUBSCRIPTIONGROUP_CONFIG, "group", g)).await;
        assert_eq!(r.code, code::SUBSCRIPTION_GROUP_NOT_EXIST, "{g} was not stored: {r:?}");
    }
    broker.shutdown().await;
}
