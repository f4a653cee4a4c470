//! Transactional messages with the real client (issue 12): rocketmq-client-rust 1.0.0's
//! `TransactionMQProducer` sends half messages, ends them one-way with its local decision, and
//! answers the broker's check-back; a push consumer must see exactly the committed messages,
//! each once. The broker checks after 1 s (`transaction-time-out`) every 300 ms
//! (`transaction-check-interval`); the tests wait for conditions with generous deadlines.

use std::any::Any;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rocketmq_client_rust::{
    LocalTransactionState, MQPushConsumer, TransactionListener, TransactionMQProducer,
};
use rocketmq_model::common::message::message_ext::MessageExt;
use rocketmq_model::common::message::MessageTrait;

use crate::completeness_support::*;

/// Bound for what the tests wait for (checks, heartbeats every 10 s, deliveries).
const PATIENCE: Duration = Duration::from_secs(60);

/// A listener that decides by the body's prefix: `commit-` and `rollback-` at once,
/// `check-commit-` and `check-rollback-` only when the broker checks (`Unknown` first), and
/// `forgotten-` never. It records every check it answers (body, `TRANSACTION_CHECK_TIMES`).
#[derive(Clone, Default)]
struct Scripted {
    checks: Arc<Mutex<Vec<(String, String)>>>,
}

fn body_of(msg: &dyn MessageTrait) -> String {
    msg.get_body().map(|b| String::from_utf8_lossy(b).into_owned()).unwrap_or_default()
}

impl TransactionListener for Scripted {
    fn execute_local_transaction(
        &self,
        msg: &dyn MessageTrait,
        _arg: Option<&(dyn Any + Send + Sync)>,
    ) -> LocalTransactionState {
        let body = body_of(msg);
        if body.starts_with("commit-") {
            LocalTransactionState::CommitMessage
        } else if body.starts_with("rollback-") {
            LocalTransactionState::RollbackMessage
        } else {
            LocalTransactionState::Unknown
        }
    }

    fn check_local_transaction(&self, msg: &MessageExt) -> LocalTransactionState {
        let body = body_of(msg);
        let times = msg
            .properties()
            .iter()
            .find(|(k, _)| k.as_str() == "TRANSACTION_CHECK_TIMES")
            .map(|(_, v)| v.to_string())
            .unwrap_or_default();
        crate::common::sync::lock(&self.checks).push((body.clone(), times));
        if body.starts_with("check-commit-") {
            LocalTransactionState::CommitMessage
        } else if body.starts_with("check-rollback-") {
            LocalTransactionState::RollbackMessage
        } else {
            LocalTransactionState::Unknown
        }
    }
}

impl Scripted {
    fn checked(&self) -> Vec<(String, String)> {
        crate::common::sync::lock(&self.checks).clone()
    }
}

/// A started transactional producer of `group` with `listener`.
async fn tx_producer(
    rt: &Arc<rocketmq_client_rust::ClientRuntime>,
    namesrv: &str,
    group: &str,
    instance: &str,
    listener: impl TransactionListener,
) -> TransactionMQProducer {
    let mut p = TransactionMQProducer::builder(Arc::clone(rt))
        .client_config(client_config(namesrv, instance))
        .producer_group(group)
        .name_server_addr(namesrv)
        .send_msg_timeout(5_000)
        .retry_times_when_send_failed(0)
        .transaction_listener(listener)
        .build();
    p.start().await.expect("the transactional producer starts");
    p
}

/// Sends `body` in a transaction; returns its `UNIQ_KEY`.
async fn send_tx(p: &TransactionMQProducer, topic: &str, body: &str) -> String {
    let r = p
        .send_message_in_transaction::<(), _>(message(topic, body, "TagTx", &[], &[]), None)
        .await
        .expect("the half message is sent");
    let sent = r.send_result.expect("a send result");
    sent.msg_id.expect("a message id").to_string()
}

/// How often each `UNIQ_KEY` was delivered.
fn counts(log: &Log) -> HashMap<String, usize> {
    let mut c = HashMap::new();
    for d in log.snapshot() {
        *c.entry(d.uniq).or_insert(0) += 1;
    }
    c
}

fn fast_checks(c: &mut baiji::broker::BrokerConfig) {
    c.core.transaction_time_out = 1_000;
    c.core.transaction_check_interval = 300;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_transactions_committed_rolled_back_and_checked_should_deliver_exactly_the_committed_ones_once(
) {
    let b = start_broker(fast_checks).await;
    let rt = client_runtime("tx-decisions");
    let (topic, group) = ("tx_topic", "tx_consumer_group");
    let mut admin = producer(&rt, &b.namesrv, "tx_admin").await;
    create_topic(&mut admin, topic, 4).await;
    let log = Log::default();
    let mut c = push_consumer(&rt, &b.namesrv, group, "tx-consumer").build();
    c.subscribe(topic, "*").await.expect("subscribe");
    c.register_message_listener_concurrently(recording_listener("tx-consumer", &log));
    c.start().await.expect("the consumer starts");

    let listener = Scripted::default();
    let mut p = tx_producer(&rt, &b.namesrv, "tx_group", "tx-producer", listener.clone()).await;
    let mut committed = Vec::new();
    let mut rolled_back = Vec::new();
    for i in 0..3 {
        committed.push(send_tx(&p, topic, &format!("commit-{i}")).await);
        rolled_back.push(send_tx(&p, topic, &format!("rollback-{i}")).await);
        committed.push(send_tx(&p, topic, &format!("check-commit-{i}")).await);
        rolled_back.push(send_tx(&p, topic, &format!("check-rollback-{i}")).await);
    }

    assert!(
        eventually(PATIENCE, || {
            let s = b.broker.transaction_stats();
            s.half_messages == 0 && s.committed == 6 && s.rolled_back == 6
        })
        .await,
        "every transaction is decided, the unknown ones after their check: {:?}",
        b.broker.transaction_stats()
    );
    assert!(
        eventually(PATIENCE, || {
            let seen = log.uniq_set(None);
            committed.iter().all(|id| seen.contains(id))
        })
        .await,
        "every committed message is delivered: {:?}",
        log.snapshot().iter().map(|d| d.body.clone()).collect::<Vec<_>>()
    );
    let got = counts(&log);
    for id in &committed {
        assert_eq!(got.get(id), Some(&1), "committed message {id} is delivered exactly once");
    }
    for id in &rolled_back {
        assert_eq!(got.get(id), None, "rolled-back message {id} is never delivered");
    }
    assert_eq!(log.len(), committed.len(), "nothing else is delivered");
    for d in log.snapshot() {
        assert_eq!(d.topic, topic, "delivered on its real topic");
        assert_eq!(d.prop("TRAN_MSG"), None, "a committed message is an ordinary one: {d:?}");
        assert_eq!(d.prop("__transactionId__"), Some(d.uniq.as_str()), "with its transactionId");
    }
    let checked = listener.checked();
    for i in 0..3 {
        for kind in ["check-commit", "check-rollback"] {
            let body = format!("{kind}-{i}");
            assert!(
                checked.iter().any(|(b, times)| *b == body && times == "1"),
                "{body} was checked with the message as body: {checked:?}"
            );
        }
    }
    let s = b.broker.transaction_stats();
    assert_eq!(s.end_refused, 0, "no END_TRANSACTION was refused: {s:?}");
    p.shutdown().await;
    admin.shutdown().await;
    c.shutdown().await;
    b.broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_producer_gone_before_its_check_should_keep_the_message_half_until_a_member_of_its_group_returns(
) {
    let b = start_broker(fast_checks).await;
    let rt = client_runtime("tx-gone");
    let (topic, group, tx_group) = ("tx_gone_topic", "tx_gone_consumer", "tx_gone_group");
    let mut admin = producer(&rt, &b.namesrv, "tx_gone_admin").await;
    create_topic(&mut admin, topic, 4).await;
    let log = Log::default();
    let mut c = push_consumer(&rt, &b.namesrv, group, "tx-gone-consumer").build();
    c.subscribe(topic, "*").await.expect("subscribe");
    c.register_message_listener_concurrently(recording_listener("tx-gone-consumer", &log));
    c.start().await.expect("the consumer starts");

    // The first producer leaves its transaction undecided (and would not know it if asked).
    let first = Scripted::default();
    let mut p = tx_producer(&rt, &b.namesrv, tx_group, "tx-gone-first", first.clone()).await;
    let uniq = send_tx(&p, topic, "forgotten-then-check-commit").await;
    p.shutdown().await;

    // Its group has no member now: the message stays half however many passes go by.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let s = b.broker.transaction_stats();
    assert_eq!((s.half_messages, s.committed), (1, 0), "the message stays half: {s:?}");
    assert!(!log.uniq_set(None).contains(&uniq), "and is not delivered");

    // A member of the same group comes back and knows the answer.
    let second = Scripted::default();
    let mut back =
        tx_producer(&rt, &b.namesrv, tx_group, "tx-gone-second", AnswerCommit(second.clone()))
            .await;
    // A client heartbeats only to brokers it has routes for: the member's own first
    // transaction gets it one.
    let own = send_tx(&back, topic, "commit-back").await;
    assert!(
        eventually(PATIENCE, || log.uniq_set(None).contains(&uniq)).await,
        "the returning member is checked and its commit delivers the message: {:?}",
        b.broker.transaction_stats()
    );
    assert!(
        second.checked().iter().any(|(body, _)| body == "forgotten-then-check-commit"),
        "the returning member answered the check: {:?}",
        second.checked()
    );
    assert!(
        eventually(PATIENCE, || log.uniq_set(None).contains(&own)).await,
        "the member's own transaction is delivered too"
    );
    assert_eq!(counts(&log).get(&uniq), Some(&1), "delivered exactly once");
    let s = b.broker.transaction_stats();
    assert_eq!((s.half_messages, s.committed), (0, 2), "decided: {s:?}");
    back.shutdown().await;
    admin.shutdown().await;
    c.shutdown().await;
    b.broker.shutdown().await;
}

/// A listener that commits whatever it is asked about (recording the checks in its
/// [`Scripted`]).
struct AnswerCommit(Scripted);

impl TransactionListener for AnswerCommit {
    fn execute_local_transaction(
        &self,
        msg: &dyn MessageTrait,
        arg: Option<&(dyn Any + Send + Sync)>,
    ) -> LocalTransactionState {
        self.0.execute_local_transaction(msg, arg)
    }

    fn check_local_transaction(&self, msg: &MessageExt) -> LocalTransactionState {
        let _ = self.0.check_local_transaction(msg);
        LocalTransactionState::CommitMessage
    }
}
