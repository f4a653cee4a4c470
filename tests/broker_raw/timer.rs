//! Timer messages (RocketMQ 5) over raw `SEND_MESSAGE_V2` frames, as the Java client writes
//! them: the timer is only properties (`TIMER_DELIVER_MS`, `TIMER_DELAY_SEC`,
//! `TIMER_DELAY_MS`), so each request is the V2 send of `send_v2_request` with its `i` field
//! (properties) replaced. Delivery is checked by pulling the real topic: each message arrives
//! once, never stored there before its due time, with the properties RocketMQ sets.

use std::collections::HashMap;
use std::time::{SystemTime, UNIX_EPOCH};

use baiji::remoting::message::DecodedMessage;

use super::*;

fn epoch_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).expect("a clock after 1970").as_millis() as u64
}

/// A V2 send of `body` to `queue` of `topic` with `TAGS=TagT`, `UNIQ_KEY=<body>` and `pairs`.
fn timer_send(topic: &str, queue: i32, body: &str, pairs: &[(&str, String)]) -> RemotingCommand {
    let mut props = format!("TAGS\u{1}TagT\u{2}UNIQ_KEY\u{1}{body}\u{2}");
    for (k, v) in pairs {
        props.push_str(&format!("{k}\u{1}{v}\u{2}"));
    }
    let mut req = send_v2_request(rc::SEND_MESSAGE_V2, topic, queue, body.as_bytes().to_vec());
    req.ext_fields.insert("i", props.as_str());
    req
}

fn props_of(m: &DecodedMessage) -> HashMap<String, String> {
    String::from_utf8_lossy(&m.properties)
        .split('\u{2}')
        .filter_map(|p| p.split_once('\u{1}'))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Everything in queue `queue` of `topic` from offset 0.
async fn pull_all(conn: &mut Conn, topic: &str, queue: i32) -> Vec<DecodedMessage> {
    let mut out = Vec::new();
    let mut offset = 0i64;
    loop {
        let r = conn
            .call(pull_request(
                "timer_reader",
                topic,
                queue,
                offset,
                0,
                pull_sys_flag::SUBSCRIPTION,
            ))
            .await;
        if r.code != code::SUCCESS {
            return out;
        }
        let msgs = decode_records(&r.body).expect("a pull body decodes");
        if msgs.is_empty() {
            return out;
        }
        offset = msgs.last().map_or(offset, |m| m.queue_offset + 1);
        out.extend(msgs);
    }
}

fn max_offset(r: &RemotingCommand) -> i64 {
    r.ext_fields
        .get("offset")
        .and_then(|v| v.parse().ok())
        .expect("GET_MAX_OFFSET answers an offset")
}

#[tokio::test]
async fn given_timer_messages_sent_out_of_due_order_should_deliver_each_once_not_before_due_with_rocketmqs_properties(
) {
    let (broker, mut conn) = broker_with_topic("TimerTopic").await;
    let t0 = epoch_ms();
    let deliver_at = t0 + 1_500 + 7;
    // Sent in this order; due in the reverse order (1.0 s, 1.507 s, 2.5 s).
    let sends = [
        ("late", 2, ("TIMER_DELAY_MS", "2500".to_string()), t0 + 2_500),
        ("middle", 1, ("TIMER_DELIVER_MS", deliver_at.to_string()), deliver_at),
        ("early", 2, ("TIMER_DELAY_SEC", "1".to_string()), t0 + 1_000),
    ];
    for (body, queue, (k, v), _) in &sends {
        let r = conn.call(timer_send("TimerTopic", *queue, body, &[(k, v.clone())])).await;
        assert_eq!(r.code, code::SUCCESS, "a timer message is accepted: {r:?}");
        assert_eq!(r.ext_fields.get("queueId"), Some(queue.to_string().as_str()), "{r:?}");
    }
    let early_end = epoch_ms();
    let stats = broker.store().memory();
    if early_end < t0 + 1_000 {
        // Only meaningful while nothing can be due yet (the machine may be slow).
        for q in 0..4 {
            let r = conn.call(max_offset_request("TimerTopic", q)).await;
            assert_eq!(max_offset(&r), 0, "nothing is on the real topic before due: {r:?}");
        }
    }
    assert!(
        stats.live_messages >= 1 && stats.bytes_used > 0,
        "waiting timer messages are in the store, counted against the budget: {stats:?}"
    );

    // Eventually all three arrive; wait a moment more so a second delivery would show.
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        let n = pull_all(&mut conn, "TimerTopic", 1).await.len()
            + pull_all(&mut conn, "TimerTopic", 2).await.len();
        if n >= 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let got =
        [pull_all(&mut conn, "TimerTopic", 1).await, pull_all(&mut conn, "TimerTopic", 2).await]
            .concat();
    let mut bodies: Vec<String> =
        got.iter().map(|m| String::from_utf8_lossy(&m.body).into_owned()).collect();
    bodies.sort();
    assert_eq!(bodies, ["early", "late", "middle"], "each timer message is delivered exactly once");
    for (body, queue, _, due) in &sends {
        let m = got.iter().find(|m| &m.body[..] == body.as_bytes()).expect("delivered");
        assert_eq!(m.topic, "TimerTopic", "delivered to its real topic");
        assert_eq!(m.queue_id, *queue, "on the queue it was sent to");
        assert!(
            m.store_timestamp as u64 >= *due,
            "{body}: stored on its topic at {} ms, not before due ({due} ms)",
            m.store_timestamp
        );
        let p = props_of(m);
        let out: u64 = p["TIMER_OUT_MS"].parse().expect("TIMER_OUT_MS is epoch ms");
        assert!(out >= *due && (m.store_timestamp as u64) >= out, "{body}: TIMER_OUT_MS {out}");
        assert!(p.contains_key("TIMER_ENQUEUE_MS") && p.contains_key("TIMER_DEQUEUE_MS"), "{p:?}");
        assert!(
            !p.contains_key("REAL_TOPIC") && !p.contains_key("REAL_QID"),
            "RocketMQ removes REAL_TOPIC and REAL_QID on delivery: {p:?}"
        );
        assert_eq!(p.get("UNIQ_KEY").map(String::as_str), Some(*body), "the producer's id kept");
        assert_eq!(p.get("TAGS").map(String::as_str), Some("TagT"), "the tag kept");
    }
    assert!(
        wait_for(|| broker.store().memory().live_messages == 3).await,
        "the waiting copies are released once delivered (live: {})",
        broker.store().memory().live_messages
    );
    broker.shutdown().await;
}

async fn wait_for(mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + PATIENCE;
    while Instant::now() < deadline {
        if cond() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    cond()
}

#[tokio::test]
async fn given_timers_beyond_the_maximum_or_malformed_should_answer_message_illegal_and_store_nothing(
) {
    let broker = start_broker(|c| c.core.timer_max_delay_sec = 10).await;
    let mut conn = Conn::open(broker_addr(&broker)).await;
    let r = conn.call(create_topic_request("TimerTopic", 1)).await;
    assert_eq!(r.code, code::SUCCESS, "creating a topic succeeds: {r:?}");
    let remark = "timer message illegal, the delay time should not be bigger than the max delay \
                  10000ms; or if set del msg, the delay time should be bigger than the current time";
    let refused = [
        ("TIMER_DELAY_SEC", "11".to_string()),
        ("TIMER_DELAY_MS", "10500".to_string()),
        ("TIMER_DELIVER_MS", (epoch_ms() + 60_000).to_string()),
        ("TIMER_DELAY_SEC", "soon".to_string()),
        ("TIMER_DELIVER_MS", "1.7e12".to_string()),
    ];
    for (k, v) in &refused {
        let r = conn.call(timer_send("TimerTopic", 0, "refused", &[(k, v.clone())])).await;
        assert_eq!(r.code, code::MESSAGE_ILLEGAL, "{k}={v} is refused: {r:?}");
        assert_eq!(r.remark.as_deref(), Some(remark), "RocketMQ's remark for {k}={v}");
    }
    let r = conn.call(max_offset_request("TimerTopic", 0)).await;
    assert_eq!(max_offset(&r), 0, "nothing refused was stored: {r:?}");
    assert_eq!(broker.store().memory().live_messages, 0, "nothing waits either");
    let r =
        conn.call(timer_send("TimerTopic", 0, "within", &[("TIMER_DELAY_SEC", "9".into())])).await;
    assert_eq!(r.code, code::SUCCESS, "within the maximum is accepted: {r:?}");
    assert_eq!(broker.timers_waiting(), 1, "and waits");
    let mut to_internal = send_v2_request(rc::SEND_MESSAGE_V2, "rmq_sys_wheel_timer", 0, &b"x"[..]);
    to_internal.ext_fields.insert("i", "TAGS\u{1}T\u{2}");
    let r = conn.call(to_internal).await;
    assert_eq!(r.code, code::NO_PERMISSION, "the internal timer topic takes no sends: {r:?}");
    broker.shutdown().await;
}

#[tokio::test]
async fn given_a_timer_time_already_past_should_store_the_message_on_its_topic_at_once() {
    let (broker, mut conn) = broker_with_topic("TimerTopic").await;
    for (body, k, v) in [
        ("past", "TIMER_DELIVER_MS", "1000".to_string()),
        ("now", "TIMER_DELIVER_MS", epoch_ms().to_string()),
        ("negative", "TIMER_DELAY_SEC", "-3".to_string()),
    ] {
        let r = conn.call(timer_send("TimerTopic", 0, body, &[(k, v.clone())])).await;
        assert_eq!(r.code, code::SUCCESS, "a past time is accepted: {r:?}");
    }
    // Stored before the answers: no waiting, no timer topic.
    let r = conn.call(max_offset_request("TimerTopic", 0)).await;
    assert_eq!(max_offset(&r), 3, "stored on the real topic at once: {r:?}");
    assert_eq!(broker.timers_waiting(), 0, "none of them waits");
    let got = pull_all(&mut conn, "TimerTopic", 0).await;
    let bodies: Vec<&[u8]> = got.iter().map(|m| &m.body[..]).collect();
    assert_eq!(bodies, [&b"past"[..], b"now", b"negative"], "in send order");
    for m in &got {
        let p = props_of(m);
        assert!(!p.contains_key("TIMER_OUT_MS"), "an ordinary message, as in RocketMQ: {p:?}");
    }
    broker.shutdown().await;
}

#[tokio::test]
async fn given_waiting_timers_filling_the_memory_budget_should_refuse_the_next_send_with_system_busy(
) {
    let broker = start_broker(|c| c.core.memory_budget = 1024 * 1024).await;
    let mut conn = Conn::open(broker_addr(&broker)).await;
    let r = conn.call(create_topic_request("TimerTopic", 1)).await;
    assert_eq!(r.code, code::SUCCESS, "creating a topic succeeds: {r:?}");
    let body = "x".repeat(8 * 1024);
    let mut accepted = 0;
    let refused = loop {
        assert!(accepted < 1_000, "1 MiB cannot hold 1000 messages of 8 KiB");
        let r = conn
            .call(timer_send("TimerTopic", 0, &body, &[("TIMER_DELAY_SEC", "3600".into())]))
            .await;
        if r.code != code::SUCCESS {
            break r;
        }
        accepted += 1;
    };
    assert_eq!(refused.code, code::SYSTEM_BUSY, "a full budget refuses the send: {refused:?}");
    assert!(accepted > 10, "the budget took {accepted} timers first");
    assert_eq!(broker.timers_waiting(), accepted, "every accepted timer waits, counted");
    let stats = broker.store().memory();
    assert_eq!(stats.live_messages, accepted as u64, "in the store: {stats:?}");
    let r = conn.call(max_offset_request("TimerTopic", 0)).await;
    assert_eq!(max_offset(&r), 0, "none is on its topic an hour early: {r:?}");
    broker.shutdown().await;
}

#[tokio::test]
async fn given_no_room_on_the_real_topic_when_timers_are_due_should_deliver_each_once_when_room_returns(
) {
    let broker = start_broker(|c| c.core.memory_budget = 1024 * 1024).await;
    let mut conn = Conn::open(broker_addr(&broker)).await;
    for t in ["TimerTopic", "Filler"] {
        let r = conn.call(create_topic_request(t, 1)).await;
        assert_eq!(r.code, code::SUCCESS, "creating a topic succeeds: {r:?}");
    }
    let body = "x".repeat(8 * 1024);
    let due = epoch_ms() + 1_500;
    for i in 0..20 {
        let b = format!("{i:02}{body}");
        let r = conn
            .call(timer_send("TimerTopic", 0, &b, &[("TIMER_DELIVER_MS", due.to_string())]))
            .await;
        assert_eq!(r.code, code::SUCCESS, "timer {i} is accepted: {r:?}");
    }
    // Fill the rest of the budget with ordinary messages nobody consumes.
    let mut filled = 0;
    loop {
        assert!(filled < 1_000, "1 MiB cannot hold 1000 messages of 8 KiB");
        let r = conn.call(timer_send("Filler", 0, &format!("{filled}{body}"), &[])).await;
        if r.code != code::SUCCESS {
            assert_eq!(r.code, code::SYSTEM_BUSY, "the budget is full: {r:?}");
            break;
        }
        filled += 1;
    }
    // Past the due time, with no room: nothing can be delivered, nothing is lost.
    while epoch_ms() < due + 1_000 {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let r = conn.call(max_offset_request("TimerTopic", 0)).await;
    assert_eq!(max_offset(&r), 0, "no room for a delivered copy while the budget is full: {r:?}");
    assert_eq!(broker.store().memory().live_messages, 20 + filled, "the timers still wait");
    // Room returns: every timer is delivered, once.
    broker.store().delete_topic("Filler").expect("the filler topic is deleted");
    let delivered = |b: &RunningBroker| {
        b.store().topic("TimerTopic").and_then(|t| t.offsets(0).ok()).map_or(0, |(_, max)| max)
    };
    assert!(
        wait_for(|| delivered(&broker) >= 20).await,
        "the timers are delivered once there is room (delivered: {})",
        delivered(&broker)
    );
    assert!(wait_for(|| broker.timers_waiting() == 0).await, "none waits any more");
    let got = pull_all(&mut conn, "TimerTopic", 0).await;
    let mut heads: Vec<String> =
        got.iter().map(|m| String::from_utf8_lossy(&m.body[..2]).into_owned()).collect();
    heads.sort();
    let want: Vec<String> = (0..20).map(|i| format!("{i:02}")).collect();
    assert_eq!(heads, want, "each timer delivered exactly once");
    broker.shutdown().await;
}

#[tokio::test]
async fn given_a_delay_level_and_timer_properties_should_use_the_level_and_drop_the_timer_properties(
) {
    let (broker, mut conn) = broker_with_topic("TimerTopic").await;
    let before = epoch_ms();
    let pairs = [("DELAY", "1".to_string()), ("TIMER_DELAY_SEC", "3600".to_string())];
    let r = conn.call(timer_send("TimerTopic", 0, "level", &pairs)).await;
    assert_eq!(r.code, code::SUCCESS, "accepted: {r:?}");
    assert_eq!(broker.timers_waiting(), 0, "not a timer: the delay level wins, as in RocketMQ");
    let deadline = Instant::now() + PATIENCE;
    let mut got = Vec::new();
    while got.is_empty() && Instant::now() < deadline {
        got = pull_all(&mut conn, "TimerTopic", 0).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(got.len(), 1, "delivered at level 1 (1 s), not in an hour");
    assert!(got[0].store_timestamp as u64 >= before + 1_000, "not before level 1's delay");
    let p = props_of(&got[0]);
    assert!(!p.contains_key("TIMER_DELAY_SEC") && !p.contains_key("TIMER_OUT_MS"), "{p:?}");
    broker.shutdown().await;
}

#[tokio::test]
async fn given_an_illegal_one_way_timer_should_count_it_as_a_refused_one_way_send() {
    let (broker, mut conn) = broker_with_topic("TimerTopic").await;
    let mut bad = timer_send("TimerTopic", 0, "far", &[("TIMER_DELAY_SEC", "259201".into())]);
    bad.flag = RemotingCommand::FLAG_ONEWAY;
    bad.opaque = 1;
    conn.write(&bad).await;
    let r = conn.call(max_offset_request("TimerTopic", 0)).await;
    assert_eq!(max_offset(&r), 0, "the first answer is the probe's, nothing stored: {r:?}");
    assert_eq!(broker.oneway_rejected(), 1, "the refused one-way timer is counted");
    assert_eq!(broker.timers_waiting(), 0);
    broker.shutdown().await;
}

#[tokio::test]
async fn given_java_properties_without_the_last_separator_and_the_timer_last_should_read_the_timer()
{
    // Java 4.9.1–5.1.4 writes no 0x02 after the last pair (client-wire-facts row 1), and with
    // HashMap order the timer property may be that last pair.
    let (broker, mut conn) = broker_with_topic("TimerTopic").await;
    let due = epoch_ms() + 1_200;
    let mut req = send_v2_request(rc::SEND_MESSAGE_V2, "TimerTopic", 0, &b"java"[..]);
    let props = format!("UNIQ_KEY\u{1}java\u{2}WAIT\u{1}true\u{2}TIMER_DELIVER_MS\u{1}{due}");
    req.ext_fields.insert("i", props.as_str());
    let r = conn.call(req).await;
    assert_eq!(r.code, code::SUCCESS, "accepted: {r:?}");
    let deadline = Instant::now() + PATIENCE;
    let mut got = Vec::new();
    while got.is_empty() && Instant::now() < deadline {
        got = pull_all(&mut conn, "TimerTopic", 0).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(got.len(), 1, "delivered once");
    assert!(got[0].store_timestamp as u64 >= due, "not before TIMER_DELIVER_MS");
    let p = props_of(&got[0]);
    assert_eq!(p.get("TIMER_OUT_MS"), Some(&due.to_string()), "the whole last value was read");
    assert_eq!(p.get("TIMER_DELIVER_MS"), Some(&due.to_string()), "and kept: {p:?}");
    broker.shutdown().await;
}

#[tokio::test]
async fn given_a_budget_filled_by_waiting_timers_when_they_come_due_should_still_deliver_each_once()
{
    let due = epoch_ms() + 2_000;
    fill_the_budget_with_waiting_messages_then_expect_each_delivered(
        &[("TIMER_DELIVER_MS", due.to_string())],
        false,
    )
    .await;
}

#[tokio::test]
async fn given_a_budget_filled_by_delay_level_messages_when_they_come_due_should_still_deliver_each_once(
) {
    // Delay level 2 is 5 s: long enough for the filling sends to finish before the first is due.
    fill_the_budget_with_waiting_messages_then_expect_each_delivered(
        &[("DELAY", "2".to_string())],
        false,
    )
    .await;
}

#[tokio::test]
async fn given_a_budget_lowered_live_when_delay_level_messages_fill_it_should_still_deliver_each_once(
) {
    // The same with the 1 MiB budget set by updateBrokerConfig: the room kept for deliveries
    // follows the budget in force, not the one the broker started with.
    fill_the_budget_with_waiting_messages_then_expect_each_delivered(
        &[("DELAY", "2".to_string())],
        true,
    )
    .await;
}

/// Sends messages carrying `wait` (a timer or a delay level) into a 1 MiB budget until it is
/// full to the last few bytes, then checks that every accepted one is delivered exactly once:
/// messages that wait must leave room for their own delivery.
/// With `live`, the broker starts with 64 MiB and the 1 MiB comes from `updateBrokerConfig`.
async fn fill_the_budget_with_waiting_messages_then_expect_each_delivered(
    wait: &[(&str, String)],
    live: bool,
) {
    let start_budget = if live { 64 } else { 1 } * 1024 * 1024;
    let broker = start_broker(|c| c.core.memory_budget = start_budget).await;
    let mut conn = Conn::open(broker_addr(&broker)).await;
    if live {
        let body = format!("memoryBudget={}\n", 1024 * 1024);
        let update =
            request(rc::UPDATE_BROKER_CONFIG, ExtFields::new()).with_body(body.into_bytes());
        let r = conn.call(update).await;
        assert_eq!(r.code, code::SUCCESS, "the budget changes live: {r:?}");
    }
    // A one-letter topic keeps a delivered copy about as large as the waiting one (a timer's is
    // a few bytes larger: REAL_TOPIC and REAL_QID gone, TIMER_DEQUEUE_MS added); with the budget
    // packed below, it fits only if the waiting messages left room on purpose.
    let r = conn.call(create_topic_request("T", 1)).await;
    assert_eq!(r.code, code::SUCCESS, "creating a topic succeeds: {r:?}");
    // 8 KiB messages until one is refused, then ever smaller ones, so that the budget is full
    // to the last few bytes: a delivered copy then fits only if room was kept for it.
    let mut accepted = 0usize;
    let mut size = 8 * 1024;
    while size >= 16 {
        assert!(accepted < 2_000, "1 MiB cannot hold 2000 of these messages");
        let b = format!("{accepted:04}{}", "x".repeat(size));
        let r = conn.call(timer_send("T", 0, &b, wait)).await;
        if r.code != code::SUCCESS {
            assert_eq!(r.code, code::SYSTEM_BUSY, "refused for lack of memory: {r:?}");
            size /= 2;
            continue;
        }
        accepted += 1;
    }
    assert!(accepted > 10, "the budget took {accepted} timers first");
    let delivered = |b: &RunningBroker| {
        b.store().topic("T").and_then(|t| t.offsets(0).ok()).map_or(0, |(_, max)| max)
    };
    let deadline = Instant::now() + PATIENCE + Duration::from_secs(5);
    while delivered(&broker) < accepted as u64 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        delivered(&broker),
        accepted as u64,
        "waiting messages alone never block their own delivery ({accepted} accepted, {wait:?})"
    );
    let got = pull_all(&mut conn, "T", 0).await;
    let mut heads: Vec<String> =
        got.iter().map(|m| String::from_utf8_lossy(&m.body[..4]).into_owned()).collect();
    heads.sort();
    heads.dedup();
    assert_eq!(heads.len(), accepted, "each delivered exactly once");
    broker.shutdown().await;
}
