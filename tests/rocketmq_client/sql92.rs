//! SQL92 selectors with the real client (`MessageSelector::by_sql`): a push consumer receives
//! exactly the messages whose properties match, messages without the property included, and an
//! expression the broker refuses makes the consumer's `start()` fail at `CHECK_CLIENT_CONFIG`.

use std::collections::BTreeSet;
use std::time::Duration;

use rocketmq_client_rust::{MQClientException, MQPushConsumer, MessageSelector};

use crate::completeness_support::*;

/// A message's body, its properties, and whether the selector selects it.
type Case = (&'static str, &'static [(&'static str, &'static str)], bool);

/// Bound for every wait (a healthy run takes a few seconds).
const PATIENCE: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_an_sql92_selector_should_receive_exactly_the_matching_messages() {
    let b = start_broker(|_| {}).await;
    let rt = client_runtime("sql92-select");
    let (topic, group) = ("sql_topic", "sql_group");
    let mut p = producer(&rt, &b.namesrv, "sql_producer").await;
    create_topic(&mut p, topic, 4).await;

    let log = Log::default();
    let mut c = push_consumer(&rt, &b.namesrv, group, "sql-consumer").build();
    let selector = MessageSelector::by_sql("a > 5 AND (region = 'east' OR region IS NULL)");
    c.subscribe_with_selector(topic, Some(selector)).await.expect("subscribe");
    c.register_message_listener_concurrently(recording_listener("sql-consumer", &log));
    c.start().await.expect("a valid SQL92 expression passes the broker's check");

    // (body, properties, selected?) — all on queue 0, so the group's committed offset reaching
    // the end of the queue means every message was either delivered or filtered out.
    let cases: [Case; 9] = [
        ("east-7", &[("a", "7"), ("region", "east")], true),
        ("west-7", &[("a", "7"), ("region", "west")], false),
        ("no-region-9", &[("a", "9")], true),
        ("east-3", &[("a", "3"), ("region", "east")], false),
        ("no-a", &[("region", "east")], false),
        ("no-properties", &[], false),
        ("east-abc", &[("a", "abc"), ("region", "east")], false),
        ("east-6.5", &[("a", "6.5"), ("region", "east")], false),
        ("east-100", &[("a", "100"), ("region", "east")], true),
    ];
    for (body, props, _) in cases {
        send_to(&p, message(topic, body, "TagA", &[], props), 0).await;
    }
    let expected: BTreeSet<&str> = cases.iter().filter(|c| c.2).map(|c| c.0).collect();
    let bodies = || log.snapshot().into_iter().map(|d| d.body).collect::<Vec<_>>();
    assert!(
        eventually(PATIENCE, || bodies().len() >= expected.len()).await,
        "the matching messages arrive; got {:?}",
        bodies()
    );
    let end = b.broker.store().topic(topic).expect("the topic").offsets(0).expect("queue 0").1;
    assert_eq!(end, cases.len() as u64, "every message was stored");
    let end = i64::try_from(end).expect("a small offset");
    assert!(
        eventually(PATIENCE, || committed_offset(b.addr, group, topic, 0) == Some(end)).await,
        "the group commits past the messages it never received (committed {:?})",
        committed_offset(b.addr, group, topic, 0)
    );
    let got = bodies();
    let got_set: BTreeSet<&str> = got.iter().map(String::as_str).collect();
    assert_eq!(got_set, expected, "exactly the matching messages, missing properties included");
    assert_eq!(got.len(), expected.len(), "each once: {got:?}");

    c.shutdown().await;
    p.shutdown().await;
    b.broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_an_invalid_sql92_selector_when_the_consumer_starts_should_be_refused() {
    let b = start_broker(|_| {}).await;
    let rt = client_runtime("sql92-invalid");
    let (topic, group) = ("sql_bad_topic", "sql_bad_group");
    let mut p = producer(&rt, &b.namesrv, "sql_bad_producer").await;
    create_topic(&mut p, topic, 4).await;

    let mut c = push_consumer(&rt, &b.namesrv, group, "sql-bad-consumer").build();
    let selector = MessageSelector::by_sql("a > 'not a number'");
    c.subscribe_with_selector(topic, Some(selector)).await.expect("the client does not parse SQL");
    c.register_message_listener_concurrently(recording_listener(
        "sql-bad-consumer",
        &Log::default(),
    ));
    let err =
        c.start().await.expect_err("the broker refuses the expression at CHECK_CLIENT_CONFIG");
    let refusal = err
        .source_ref::<MQClientException>()
        .unwrap_or_else(|| panic!("the broker's answer is the cause: {err:?}"));
    assert_eq!(refusal.response_code(), 23, "SUBSCRIPTION_PARSE_FAILED: {refusal:?}");
    let reason = refusal.error_message().unwrap_or_default();
    assert!(
        reason.starts_with("Invalid MessageSelector. ") && reason.contains("cannot be compared"),
        "the broker's remark names the error: {reason}"
    );

    p.shutdown().await;
    b.broker.shutdown().await;
}
