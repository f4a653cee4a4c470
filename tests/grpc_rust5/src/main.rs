//! Drives the official RocketMQ 5 Rust client (`rocketmq` 5.0.0) for baiji's gRPC tests
//! (`tests/grpc_clients`), with the same modes and output as the Python and Node.js scripts
//! there: one JSON object per line on standard output (the client's own log goes to standard
//! error); exit status 0 when the mode did what it was asked, 1 otherwise.
//!
//! Producer modes (`tests/grpc/producer.py` has the same):
//! ```text
//! grpc_rust5 normal ENDPOINT TOPIC COUNT      tag, two keys and two user properties each
//! grpc_rust5 fifo   ENDPOINT TOPIC GROUPS COUNT   COUNT messages in each of GROUPS groups
//! grpc_rust5 delay  ENDPOINT TOPIC SECS       one message due SECS seconds from now
//! grpc_rust5 tx     ENDPOINT TOPIC            one committed, one rolled-back transaction
//! grpc_rust5 orphan ENDPOINT TOPIC WAIT_SECS  one undecided transaction; waits for the check
//! ```
//! SimpleConsumer (5.0.0 has receive and ack only; `tests/grpc/consumer_simple.py` receive mode):
//! ```text
//! grpc_rust5 receive --endpoint E --topic T --group G [--count N] [--invisible S] [--tag EXPR]
//!                    [--patience S]
//! ```

use std::collections::HashMap;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rocketmq::conf::{ClientOption, ProducerOption, SimpleConsumerOption};
use rocketmq::model::common::{FilterExpression, FilterType};
use rocketmq::model::message::MessageBuilder;
use rocketmq::model::transaction::{Transaction, TransactionResolution};
use rocketmq::{Producer, SimpleConsumer};
use serde_json::{json, Value};

fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}

fn emit(v: Value) {
    println!("{v}");
}

fn client_option(endpoint: &str) -> ClientOption {
    let mut c = ClientOption::default();
    c.set_access_url(endpoint);
    c.set_enable_tls(false);
    c.set_timeout(Duration::from_secs(10));
    c
}

fn number<T: std::str::FromStr>(what: &str, v: &str) -> Result<T, String> {
    v.parse().map_err(|_| format!("{what} is a number: {v}"))
}

/// The message ids the broker asked about, shared with the checker closure.
type Checked = Arc<Mutex<Vec<String>>>;

async fn producer(
    endpoint: &str,
    topic: &str,
    checker: Option<Checked>,
) -> Result<Producer, String> {
    let mut option = ProducerOption::default();
    option.set_topics(vec![topic]);
    let mut p = match checker {
        None => Producer::new(option, client_option(endpoint)),
        Some(checked) => Producer::new_transaction_producer(
            option,
            client_option(endpoint),
            Box::new(move |_transaction_id, message| {
                if let Ok(mut c) = checked.lock() {
                    c.push(message.message_id().to_string());
                }
                TransactionResolution::COMMIT
            }),
        ),
    }
    .map_err(|e| format!("producer: {e:?}"))?;
    p.start().await.map_err(|e| format!("producer start: {e:?}"))?;
    Ok(p)
}

async fn normal(endpoint: &str, topic: &str, count: &str) -> Result<(), String> {
    let p = producer(endpoint, topic, None).await?;
    for i in 0..number::<usize>("COUNT", count)? {
        let body = format!("rs-normal-{i}");
        let keys = vec![format!("key-{i}"), format!("other-{i}")];
        let props = HashMap::from([
            ("color".to_string(), format!("red-{i}")),
            ("size".to_string(), i.to_string()),
        ]);
        let m = MessageBuilder::builder()
            .set_topic(topic)
            .set_body(body.clone().into_bytes())
            .set_tag("TagA")
            .set_keys(keys.clone())
            .set_properties(props.clone())
            .build()
            .map_err(|e| format!("build: {e:?}"))?;
        let r = p.send(m).await.map_err(|e| format!("send: {e:?}"))?;
        emit(json!({"kind": "sent", "message_id": r.message_id(), "body": body, "tag": "TagA",
            "keys": keys, "props": props}));
    }
    p.shutdown().await.map_err(|e| format!("shutdown: {e:?}"))
}

async fn fifo(endpoint: &str, topic: &str, groups: &str, count: &str) -> Result<(), String> {
    let p = producer(endpoint, topic, None).await?;
    let groups = number::<usize>("GROUPS", groups)?;
    for i in 0..number::<usize>("COUNT", count)? {
        for g in 0..groups {
            let body = format!("rs-fifo-{g}-{i}");
            let group = format!("group-{g}");
            let m = MessageBuilder::fifo_message_builder(topic, body.clone().into_bytes(), &group)
                .build()
                .map_err(|e| format!("build: {e:?}"))?;
            let r = p.send(m).await.map_err(|e| format!("send: {e:?}"))?;
            emit(json!({"kind": "sent", "message_id": r.message_id(), "body": body,
                "group": group, "seq": i}));
        }
    }
    p.shutdown().await.map_err(|e| format!("shutdown: {e:?}"))
}

async fn delay(endpoint: &str, topic: &str, secs: &str) -> Result<(), String> {
    let p = producer(endpoint, topic, None).await?;
    // rocketmq 5.0.0 takes the delivery timestamp in epoch *seconds* (it becomes the
    // Timestamp's `seconds`), as the Python client's whole seconds.
    let due_s = now_ms() / 1000 + number::<i64>("SECS", secs)?;
    let due_ms = due_s * 1000;
    let m = MessageBuilder::delay_message_builder(topic, b"rs-delay".to_vec(), due_s)
        .build()
        .map_err(|e| format!("build: {e:?}"))?;
    let r = p.send(m).await.map_err(|e| format!("send: {e:?}"))?;
    emit(
        json!({"kind": "sent", "message_id": r.message_id(), "body": "rs-delay", "due_ms": due_ms}),
    );
    p.shutdown().await.map_err(|e| format!("shutdown: {e:?}"))
}

async fn tx(endpoint: &str, topic: &str) -> Result<(), String> {
    let p = producer(endpoint, topic, Some(Checked::default())).await?;
    for (body, decide) in [("rs-tx-commit", "commit"), ("rs-tx-rollback", "rollback")] {
        let m = MessageBuilder::transaction_message_builder(topic, body.as_bytes().to_vec())
            .build()
            .map_err(|e| format!("build: {e:?}"))?;
        let t = p.send_transaction_message(m).await.map_err(|e| format!("send: {e:?}"))?;
        let (mid, tid) = (t.message_id().to_string(), t.transaction_id().to_string());
        emit(json!({"kind": "half", "message_id": mid, "transaction_id": tid, "body": body}));
        let ended = if decide == "commit" { t.commit().await } else { t.rollback().await };
        ended.map_err(|e| format!("{decide}: {e:?}"))?;
        emit(json!({"kind": decide, "message_id": mid}));
    }
    p.shutdown().await.map_err(|e| format!("shutdown: {e:?}"))
}

async fn orphan(endpoint: &str, topic: &str, wait_secs: &str) -> Result<(), String> {
    let checked = Checked::default();
    let p = producer(endpoint, topic, Some(Arc::clone(&checked))).await?;
    let m = MessageBuilder::transaction_message_builder(topic, b"rs-tx-orphan".to_vec())
        .build()
        .map_err(|e| format!("build: {e:?}"))?;
    let t = p.send_transaction_message(m).await.map_err(|e| format!("send: {e:?}"))?;
    emit(
        json!({"kind": "half", "message_id": t.message_id(), "transaction_id": t.transaction_id(),
        "body": "rs-tx-orphan"}),
    );
    // Left undecided (dropped without commit or rollback): the broker must ask over Telemetry.
    drop(t);
    let deadline = Instant::now() + Duration::from_secs(number("WAIT_SECS", wait_secs)?);
    let first = loop {
        let first = checked.lock().ok().and_then(|c| c.first().cloned());
        if let Some(id) = first {
            break id;
        }
        if Instant::now() > deadline {
            return Err("the broker never asked about the orphaned transaction".into());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    emit(json!({"kind": "checked", "message_id": first}));
    // The client sends the checker's EndTransaction on a task of its own.
    tokio::time::sleep(Duration::from_secs(2)).await;
    p.shutdown().await.map_err(|e| format!("shutdown: {e:?}"))
}

/// `--name value` flags.
fn flags(args: &[String]) -> Result<HashMap<String, String>, String> {
    let mut out = HashMap::new();
    let mut it = args.iter();
    while let Some(k) = it.next() {
        let name = k.strip_prefix("--").ok_or_else(|| format!("not a flag: {k}"))?;
        let v = it.next().ok_or_else(|| format!("{k} needs a value"))?;
        out.insert(name.to_string(), v.clone());
    }
    Ok(out)
}

async fn receive(args: &[String]) -> Result<(), String> {
    let f = flags(args)?;
    let need = |k: &str| f.get(k).cloned().ok_or_else(|| format!("--{k} is required"));
    let (endpoint, topic, group) = (need("endpoint")?, need("topic")?, need("group")?);
    let count: usize = number("--count", f.get("count").map_or("1", String::as_str))?;
    let invisible: u64 = number("--invisible", f.get("invisible").map_or("30", String::as_str))?;
    let patience: u64 = number("--patience", f.get("patience").map_or("60", String::as_str))?;
    let tag = f.get("tag").map_or("*", String::as_str);
    let mut option = SimpleConsumerOption::default();
    option.set_topics(vec![topic.as_str()]);
    option.set_consumer_group(group.as_str());
    let mut c = SimpleConsumer::new(option, client_option(&endpoint))
        .map_err(|e| format!("consumer: {e:?}"))?;
    c.start().await.map_err(|e| format!("consumer start: {e:?}"))?;
    let filter = FilterExpression::new(FilterType::Tag, tag);
    let deadline = Instant::now() + Duration::from_secs(patience);
    let mut got = 0;
    while got < count && Instant::now() < deadline {
        let batch = c
            .receive_with(&topic, &filter, 32, Duration::from_secs(invisible))
            .await
            .map_err(|e| format!("receive: {e:?}"))?;
        for m in batch {
            let mut keys = m.keys().to_vec();
            keys.sort();
            emit(json!({"kind": "message", "id": m.message_id(), "topic": m.topic(),
                "body": String::from_utf8_lossy(m.body()), "tag": m.tag(), "keys": keys,
                "properties": m.properties(), "attempt": m.delivery_attempt(),
                "group": m.message_group()}));
            c.ack(&m).await.map_err(|e| format!("ack: {e:?}"))?;
            got += 1;
        }
    }
    emit(json!({"kind": "done", "received": got}));
    c.shutdown().await.map_err(|e| format!("shutdown: {e:?}"))
}

async fn run(args: &[String]) -> Result<(), String> {
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    match a.as_slice() {
        ["normal", e, t, n] => normal(e, t, n).await,
        ["fifo", e, t, g, n] => fifo(e, t, g, n).await,
        ["delay", e, t, s] => delay(e, t, s).await,
        ["tx", e, t] => tx(e, t).await,
        ["orphan", e, t, w] => orphan(e, t, w).await,
        ["receive", ..] => receive(&args[1..]).await,
        _ => Err(format!("unknown mode or arguments: {a:?} (see the module docs)")),
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match run(&args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            emit(json!({"kind": "error", "event": "done", "error": e}));
            ExitCode::FAILURE
        }
    }
}
