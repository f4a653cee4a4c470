//! Producers of the 5.x SDKs (Python, Node.js) over gRPC, read back by a remoting consumer:
//! normal, FIFO, delay, transactional (commit, rollback, orphan recovery), and bad input.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::support::{
    body, create_topic, of_kind, props, pull_all, pull_until, run, s, start_broker, unique, Sdk,
};

const QUEUES: i32 = 4;

fn args(parts: &[&str]) -> Vec<String> {
    parts.iter().map(|p| (*p).to_owned()).collect()
}

async fn normal_messages_arrive_intact_at_a_remoting_consumer(sdk: Sdk) {
    let b = start_broker(|_| {}).await;
    let topic = unique("GrpcNormal");
    create_topic(&b, &topic, QUEUES).await;
    let lines = run(sdk, sdk.producer_script(), args(&["normal", &b.grpc, &topic, "4"])).await;
    let sent = of_kind(&lines, "sent");
    assert_eq!(sent.len(), 4, "the producer reports every send: {lines:#?}");
    let msgs =
        pull_until(&b, &topic, QUEUES, "every sent message is stored", |m| m.len() >= 4).await;
    assert_eq!(msgs.len(), 4, "each message is stored once");
    for line in sent {
        let id = s(line, "message_id");
        let m = msgs
            .iter()
            .find(|m| props(m).get("UNIQ_KEY").map(String::as_str) == Some(id))
            .unwrap_or_else(|| panic!("the message id {id} is the stored UNIQ_KEY"));
        let p = props(m);
        assert_eq!(body(m), s(line, "body"), "the body is intact");
        assert_eq!(p.get("TAGS").map(String::as_str), Some(s(line, "tag")), "the tag is intact");
        let keys: Vec<&str> =
            line["keys"].as_array().expect("keys").iter().filter_map(Value::as_str).collect();
        let stored: Vec<&str> = p.get("KEYS").map(|k| k.split(' ').collect()).unwrap_or_default();
        let mut stored_sorted = stored.clone();
        stored_sorted.sort_unstable();
        let mut keys_sorted = keys.clone();
        keys_sorted.sort_unstable();
        assert_eq!(stored_sorted, keys_sorted, "the keys are intact (space separated)");
        for (k, v) in line["props"].as_object().expect("props") {
            assert_eq!(p.get(k).map(String::as_str), v.as_str(), "user property {k} is intact");
        }
        assert_eq!(m.topic, topic, "stored in the topic it was sent to");
    }
    b.running.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_python_producer_with_tls_on_when_sending_to_the_grpc_port_should_store_its_messages(
) {
    // The 5.x SDKs' TLS default: the gRPC port was plaintext only. The certificate here is
    // configured (the Python SDK verifies it against GRPC_DEFAULT_SSL_ROOTS_FILE_PATH); the
    // port serves TLS beside plaintext by default.
    let dir = std::env::temp_dir().join(format!("baiji-grpc-tls-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    let made = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_owned()])
        .expect("a self-signed certificate");
    let (cert, key) = (dir.join("grpc.pem"), dir.join("grpc.key"));
    std::fs::write(&cert, made.cert.pem()).expect("write");
    std::fs::write(&key, made.signing_key.serialize_pem()).expect("write");
    let b = start_broker(|c| {
        c.security.tls_cert = Some(cert.clone());
        c.security.tls_key = Some(key.clone());
    })
    .await;
    let topic = unique("GrpcTls");
    create_topic(&b, &topic, QUEUES).await;
    let roots = cert.to_string_lossy().into_owned();
    let lines =
        run(Sdk::Python, "producer.py", args(&["tls_normal", &b.grpc, &topic, "3", &roots])).await;
    assert_eq!(of_kind(&lines, "sent").len(), 3, "every send over TLS answered: {lines:#?}");
    let msgs = pull_until(&b, &topic, QUEUES, "the TLS sends are stored", |m| m.len() >= 3).await;
    assert_eq!(msgs.len(), 3);
    // And plaintext on the same port, as before.
    let lines = run(Sdk::Python, "producer.py", args(&["normal", &b.grpc, &topic, "1"])).await;
    assert_eq!(of_kind(&lines, "sent").len(), 1, "plaintext beside TLS: {lines:#?}");
    b.running.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}

async fn fifo_messages_keep_their_order_per_group(sdk: Sdk) {
    let b = start_broker(|_| {}).await;
    let topic = unique("GrpcFifo");
    create_topic(&b, &topic, QUEUES).await;
    let lines = run(sdk, sdk.producer_script(), args(&["fifo", &b.grpc, &topic, "3", "5"])).await;
    assert_eq!(of_kind(&lines, "sent").len(), 15, "3 groups of 5 sent: {lines:#?}");
    let msgs =
        pull_until(&b, &topic, QUEUES, "every FIFO message is stored", |m| m.len() >= 15).await;
    let mut by_group: BTreeMap<String, Vec<(i32, String)>> = BTreeMap::new();
    for m in &msgs {
        let group = props(m).get("__SHARDINGKEY").cloned().expect("the message group is stored");
        by_group.entry(group).or_default().push((m.queue_id, body(m)));
    }
    assert_eq!(by_group.len(), 3, "three message groups: {by_group:?}");
    for (group, got) in by_group {
        let queues: std::collections::BTreeSet<i32> = got.iter().map(|(q, _)| *q).collect();
        assert_eq!(queues.len(), 1, "group {group} lands on one queue: {got:?}");
        let g = group.trim_start_matches("group-");
        let prefix = sdk.prefix();
        let want: Vec<String> = (0..5).map(|i| format!("{prefix}-fifo-{g}-{i}")).collect();
        let bodies: Vec<String> = got.into_iter().map(|(_, b)| b).collect();
        assert_eq!(bodies, want, "group {group} is read in the order it was sent");
    }
    b.running.shutdown().await;
}

async fn delayed_messages_arrive_no_earlier_than_due(sdk: Sdk) {
    let b = start_broker(|_| {}).await;
    let topic = unique("GrpcDelay");
    create_topic(&b, &topic, QUEUES).await;
    let lines = run(sdk, sdk.producer_script(), args(&["delay", &b.grpc, &topic, "3"])).await;
    let sent = of_kind(&lines, "sent");
    let due = sent[0]["due_ms"].as_i64().expect("due_ms");
    let msgs =
        pull_until(&b, &topic, QUEUES, "the delayed message arrives", |m| !m.is_empty()).await;
    assert_eq!(msgs.len(), 1, "delivered once");
    let m = &msgs[0];
    assert!(
        m.store_timestamp >= due,
        "stored in its topic at {} ms, not before it was due at {due} ms",
        m.store_timestamp
    );
    assert_eq!(props(m).get("UNIQ_KEY").map(String::as_str), Some(s(sent[0], "message_id")));
    b.running.shutdown().await;
}

async fn a_recalled_delay_message_never_arrives(sdk: Sdk) {
    let b = start_broker(|_| {}).await;
    let topic = unique("GrpcRecall");
    create_topic(&b, &topic, QUEUES).await;
    let lines = run(sdk, sdk.producer_script(), args(&["recall", &b.grpc, &topic, "4"])).await;
    let sent = of_kind(&lines, "sent");
    assert_eq!(sent.len(), 2, "two delay messages sent: {lines:#?}");
    for line in &sent {
        // It was always empty: the SDKs' `recall_handle` / `recallHandle` came back blank.
        assert!(!s(line, "recall_handle").is_empty(), "the send receipt carries a handle: {line}");
    }
    let recalled = of_kind(&lines, "recalled");
    assert_eq!(recalled.len(), 1, "the recall succeeded: {lines:#?}");
    assert_eq!(s(recalled[0], "message_id"), s(sent[0], "message_id"), "it names the message");
    let refused = of_kind(&lines, "refused");
    let error = refused.first().map(|l| &l["error"]);
    assert!(
        error.and_then(Value::as_str).is_some_and(|e| e.contains("recall handle is invalid")),
        "a malformed handle is refused with the broker's remark: {lines:#?}"
    );
    // Timers are delivered in due order: once the later one is in, the recalled one's time
    // has passed.
    let msgs = pull_until(&b, &topic, QUEUES, "the kept message arrives", |m| !m.is_empty()).await;
    let bodies: Vec<String> = msgs.iter().map(body).collect();
    assert_eq!(bodies, [format!("{}-kept", sdk.prefix())], "the recalled message never arrives");
    b.running.shutdown().await;
}

async fn transactions_deliver_the_committed_and_drop_the_rolled_back(sdk: Sdk) {
    let b = start_broker(|_| {}).await;
    let topic = unique("GrpcTx");
    create_topic(&b, &topic, QUEUES).await;
    let lines = run(sdk, sdk.producer_script(), args(&["tx", &b.grpc, &topic])).await;
    let halves = of_kind(&lines, "half");
    assert_eq!(halves.len(), 2, "two half messages: {lines:#?}");
    for h in &halves {
        assert_eq!(
            s(h, "transaction_id"),
            s(h, "message_id"),
            "the transaction id is the message id"
        );
    }
    let prefix = sdk.prefix();
    let committed = format!("{prefix}-tx-commit");
    let msgs = pull_until(&b, &topic, QUEUES, "the committed message is delivered", |m| {
        m.iter().any(|m| body(m) == committed)
    })
    .await;
    let stats = b.running.transaction_stats();
    assert_eq!((stats.committed, stats.rolled_back), (1, 1), "one commit, one rollback: {stats:?}");
    let msgs: Vec<String> =
        msgs.iter().map(body).chain(pull_all(&b, &topic, QUEUES).await.iter().map(body)).collect();
    assert!(
        !msgs.iter().any(|m| m.ends_with("-tx-rollback")),
        "the rolled-back message is never delivered: {msgs:?}"
    );
    assert_eq!(stats.half_messages, 0, "nothing is left undecided");
    b.running.shutdown().await;
}

async fn an_orphaned_transaction_is_recovered_through_the_checker(sdk: Sdk) {
    let b = start_broker(|c| {
        c.core.transaction_time_out = 1_000;
        c.core.transaction_check_interval = 1_000;
    })
    .await;
    let topic = unique("GrpcOrphan");
    create_topic(&b, &topic, QUEUES).await;
    let lines = run(sdk, sdk.producer_script(), args(&["orphan", &b.grpc, &topic, "40"])).await;
    let half = of_kind(&lines, "half");
    let checked = of_kind(&lines, "checked");
    assert_eq!(checked.len(), 1, "the producer was asked about its orphan: {lines:#?}");
    assert_eq!(
        s(checked[0], "message_id"),
        s(half[0], "message_id"),
        "the check names the orphaned message"
    );
    let prefix = sdk.prefix();
    let orphan = format!("{prefix}-tx-orphan");
    let msgs =
        pull_until(&b, &topic, QUEUES, "the orphan committed by its check is delivered", |m| {
            m.iter().any(|m| body(m) == orphan)
        })
        .await;
    assert_eq!(msgs.iter().filter(|m| body(m) == orphan).count(), 1, "delivered once");
    let stats = b.running.transaction_stats();
    assert!(stats.checks_sent >= 1, "the checker sent the check: {stats:?}");
    assert_eq!(stats.half_messages, 0, "nothing is left undecided: {stats:?}");
    b.running.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_python_producer_when_sending_should_store_body_tag_keys_properties_and_id() {
    normal_messages_arrive_intact_at_a_remoting_consumer(Sdk::Python).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_node_producer_when_sending_should_store_body_tag_keys_properties_and_id() {
    normal_messages_arrive_intact_at_a_remoting_consumer(Sdk::Node).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_python_fifo_producer_when_sending_groups_should_keep_each_group_on_one_queue_in_order(
) {
    fifo_messages_keep_their_order_per_group(Sdk::Python).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_node_fifo_producer_when_sending_groups_should_keep_each_group_on_one_queue_in_order(
) {
    fifo_messages_keep_their_order_per_group(Sdk::Node).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_python_delay_message_when_sent_should_arrive_no_earlier_than_due() {
    delayed_messages_arrive_no_earlier_than_due(Sdk::Python).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_node_delay_message_when_sent_should_arrive_no_earlier_than_due() {
    delayed_messages_arrive_no_earlier_than_due(Sdk::Node).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_python_delay_message_when_recalled_with_its_receipts_handle_should_never_arrive() {
    a_recalled_delay_message_never_arrives(Sdk::Python).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_node_delay_message_when_recalled_with_its_receipts_handle_should_never_arrive() {
    a_recalled_delay_message_never_arrives(Sdk::Node).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_python_transactions_when_committed_and_rolled_back_should_deliver_only_the_commit() {
    transactions_deliver_the_committed_and_drop_the_rolled_back(Sdk::Python).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_node_transactions_when_committed_and_rolled_back_should_deliver_only_the_commit() {
    transactions_deliver_the_committed_and_drop_the_rolled_back(Sdk::Node).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_python_orphaned_transaction_when_checked_should_ask_over_telemetry_and_commit() {
    an_orphaned_transaction_is_recovered_through_the_checker(Sdk::Python).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_node_orphaned_transaction_when_checked_should_ask_over_telemetry_and_commit() {
    an_orphaned_transaction_is_recovered_through_the_checker(Sdk::Node).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_rust_producer_when_sending_should_store_body_tag_keys_properties_and_id() {
    normal_messages_arrive_intact_at_a_remoting_consumer(Sdk::Rust).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_rust_fifo_producer_when_sending_groups_should_keep_each_group_on_one_queue_in_order(
) {
    fifo_messages_keep_their_order_per_group(Sdk::Rust).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_rust_delay_message_when_sent_should_arrive_no_earlier_than_due() {
    delayed_messages_arrive_no_earlier_than_due(Sdk::Rust).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_rust_transactions_when_committed_and_rolled_back_should_deliver_only_the_commit() {
    transactions_deliver_the_committed_and_drop_the_rolled_back(Sdk::Rust).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_rust_orphaned_transaction_when_checked_should_ask_over_telemetry_and_commit() {
    an_orphaned_transaction_is_recovered_through_the_checker(Sdk::Rust).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_bad_input_when_sent_over_grpc_should_answer_rocketmq_codes_and_keep_serving() {
    let b = start_broker(|c| {
        c.core.auto_create_topic = false;
        c.core.max_message_size = 64 * 1024;
        c.core.memory_budget = 2 * 1024 * 1024;
    })
    .await;
    let topic = unique("GrpcBad");
    create_topic(&b, &topic, QUEUES).await;
    let unknown = unique("GrpcNoSuchTopic");
    let lines =
        run(Sdk::Python, "producer.py", args(&["raw", &b.grpc, &topic, &unknown, "70000"])).await;
    let code = |kind: &str| {
        of_kind(&lines, kind)
            .first()
            .and_then(|v| v["code"].as_i64())
            .unwrap_or_else(|| panic!("a {kind} line in {lines:#?}"))
    };
    assert_eq!(code("route_without_client_id"), 40017, "CLIENT_ID_REQUIRED without x-mq-client-id");
    assert_eq!(code("send_without_client_id"), 40017, "CLIENT_ID_REQUIRED on a send too");
    assert_eq!(code("route_unknown_topic"), 40402, "TOPIC_NOT_FOUND (auto-create off)");
    assert_eq!(code("send_unknown_topic"), 40402, "TOPIC_NOT_FOUND on a send");
    assert_eq!(code("send_oversized"), 41301, "MESSAGE_BODY_TOO_LARGE over max-message-size");
    assert_eq!(code("send_empty"), 41302, "MESSAGE_BODY_EMPTY");
    assert_eq!(code("send_good"), 20000, "a good send afterwards is served");
    let route = of_kind(&lines, "route_good")[0];
    assert_eq!(route["queues"], QUEUES, "the route lists the topic's queues: {route}");
    assert_eq!(route["types"], serde_json::json!([1, 2, 3, 4]), "every message type is accepted");
    assert_eq!(
        route["endpoint"],
        serde_json::json!([b.grpc]),
        "the route names this broker's gRPC endpoint"
    );
    let full = of_kind(&lines, "send_until_full")[0];
    assert_eq!(full["code"], 42900, "a full memory budget is TOO_MANY_REQUESTS (retried): {full}");
    assert!(full["accepted"].as_i64().is_some_and(|n| n > 0), "sends were accepted until then");
    assert_eq!(code("route_after_full"), 20000, "the broker still answers");
    assert!(b.running.sends_rejected() >= 1, "the refusal is counted");
    let good = s(of_kind(&lines, "send_good")[0], "message_id").to_owned();
    let msgs = pull_all(&b, &topic, QUEUES).await;
    let stored: Vec<String> = msgs.iter().map(body).filter(|b| !b.starts_with('f')).collect();
    assert_eq!(stored, vec!["still-served".to_string()], "no refused message was stored");
    let m = msgs.iter().find(|m| body(m) == "still-served").expect("the good message");
    assert_eq!(props(m).get("UNIQ_KEY"), Some(&good));
    b.running.shutdown().await;
}
