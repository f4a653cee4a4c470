//! Drives the official RocketMQ 5 Rust client (`rocketmq` 5.0.0) for baiji's gRPC tests. Every
//! outcome is one JSON object on a line of standard output (the client's own log lines go to
//! standard error); the exit status is 0 when the command did what it was asked, 1 otherwise.
//!
//! ```text
//! grpc_rust5 send    ENDPOINT TOPIC COUNT [tag=T] [keys=K] [prop=K:V] [group=G] [delay_ms=MS]
//!                    [tx=commit|rollback|unknown] [checker=commit|rollback] [linger_s=S]
//! grpc_rust5 receive ENDPOINT TOPIC GROUP COUNT [filter=EXPR] [sql=EXPR] [invisible_s=S]
//!                    [patience_s=S] [ack=yes|no]
//! ```
//!
//! `send` sends COUNT messages with bodies `<topic>#<i>`: normal, FIFO (`group=`), delayed
//! (`delay_ms=` after now) or transactional (`tx=`: committed, rolled back, or left unknown for
//! the broker's check, which the checker answers with `checker=`). With `linger_s` it stays up that
//! long afterwards (so that the broker can check back). `receive` receives and (by default) acks
//! until COUNT messages have arrived or `patience_s` (60) has passed.

use std::collections::HashMap;
use std::process::ExitCode;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rocketmq::conf::{ClientOption, ProducerOption, SimpleConsumerOption};
use rocketmq::model::common::{FilterExpression, FilterType};
use rocketmq::model::message::MessageBuilder;
use rocketmq::model::transaction::{Transaction, TransactionResolution};
use rocketmq::{Producer, SimpleConsumer};
use serde_json::json;

fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}

fn emit(v: serde_json::Value) {
    println!("{v}");
}

/// `key=value` options after the positional arguments; `prop` may repeat.
struct Opts {
    one: HashMap<String, String>,
    props: HashMap<String, String>,
}

impl Opts {
    fn parse(args: &[String]) -> Result<Self, String> {
        let mut one = HashMap::new();
        let mut props = HashMap::new();
        for a in args {
            let (k, v) = a.split_once('=').ok_or_else(|| format!("not key=value: {a}"))?;
            if k == "prop" {
                let (pk, pv) = v.split_once(':').ok_or_else(|| format!("prop is K:V: {v}"))?;
                props.insert(pk.to_string(), pv.to_string());
            } else {
                one.insert(k.to_string(), v.to_string());
            }
        }
        Ok(Opts { one, props })
    }

    fn get(&self, k: &str) -> Option<&str> {
        self.one.get(k).map(String::as_str)
    }

    fn secs(&self, k: &str, default: u64) -> Result<Duration, String> {
        match self.get(k) {
            None => Ok(Duration::from_secs(default)),
            Some(v) => v.parse().map(Duration::from_secs).map_err(|_| format!("{k}={v}")),
        }
    }
}

fn client_option(endpoint: &str) -> ClientOption {
    let mut c = ClientOption::default();
    c.set_access_url(endpoint);
    c.set_enable_tls(false);
    c.set_timeout(Duration::from_secs(10));
    c
}

fn resolution(v: Option<&str>) -> TransactionResolution {
    match v {
        Some("commit") => TransactionResolution::COMMIT,
        Some("rollback") => TransactionResolution::ROLLBACK,
        _ => TransactionResolution::UNKNOWN,
    }
}

async fn send(endpoint: &str, topic: &str, count: usize, o: &Opts) -> Result<(), String> {
    let mut option = ProducerOption::default();
    option.set_topics(vec![topic]);
    let tx = o.get("tx").map(str::to_string);
    let mut producer = if tx.is_some() {
        let answer = o.get("checker").map(str::to_string);
        Producer::new_transaction_producer(
            option,
            client_option(endpoint),
            Box::new(move |transaction_id, message| {
                emit(json!({"event": "checked", "transaction_id": transaction_id,
                    "message_id": message.message_id(), "topic": message.topic(),
                    "body": String::from_utf8_lossy(message.body())}));
                resolution(answer.as_deref())
            }),
        )
    } else {
        Producer::new(option, client_option(endpoint))
    }
    .map_err(|e| format!("producer: {e:?}"))?;
    producer.start().await.map_err(|e| format!("start: {e:?}"))?;
    emit(json!({"event": "started"}));
    for i in 0..count {
        let body = format!("{topic}#{i}").into_bytes();
        let mut b = MessageBuilder::builder().set_topic(topic).set_body(body);
        if let Some(t) = o.get("tag") {
            b = b.set_tag(t);
        }
        if let Some(k) = o.get("keys") {
            b = b.set_keys(k.split(' ').collect::<Vec<_>>());
        }
        if !o.props.is_empty() {
            b = b.set_properties(o.props.clone());
        }
        if let Some(g) = o.get("group") {
            b = b.set_message_group(g);
        }
        if let Some(d) = o.get("delay_ms") {
            let d: i64 = d.parse().map_err(|_| format!("delay_ms={d}"))?;
            b = b.set_delivery_timestamp(now_ms() + d);
        }
        if tx.is_some() {
            b = b.enable_transaction();
        }
        let message = b.build().map_err(|e| format!("build: {e:?}"))?;
        match tx.as_deref() {
            None => match producer.send(message).await {
                Ok(r) => emit(json!({"event": "sent", "i": i, "message_id": r.message_id(),
                    "sent_at_ms": now_ms()})),
                Err(e) => emit(json!({"event": "send_failed", "i": i, "error": format!("{e:?}")})),
            },
            Some(how) => match producer.send_transaction_message(message).await {
                Ok(t) => {
                    let (mid, tid) = (t.message_id().to_string(), t.transaction_id().to_string());
                    let ended = match how {
                        "commit" => Some(t.commit().await),
                        "rollback" => Some(t.rollback().await),
                        _ => None,
                    };
                    emit(json!({"event": "sent", "i": i, "message_id": mid, "transaction_id": tid,
                        "ended": ended.map(|r| r.map_err(|e| format!("{e:?}")).is_ok())}));
                }
                Err(e) => emit(json!({"event": "send_failed", "i": i, "error": format!("{e:?}")})),
            },
        }
    }
    tokio::time::sleep(o.secs("linger_s", 0)?).await;
    producer.shutdown().await.map_err(|e| format!("shutdown: {e:?}"))?;
    emit(json!({"event": "done"}));
    Ok(())
}

async fn receive(
    endpoint: &str,
    topic: &str,
    group: &str,
    count: usize,
    o: &Opts,
) -> Result<(), String> {
    let mut option = SimpleConsumerOption::default();
    option.set_topics(vec![topic]);
    option.set_consumer_group(group);
    let mut consumer = SimpleConsumer::new(option, client_option(endpoint))
        .map_err(|e| format!("consumer: {e:?}"))?;
    consumer.start().await.map_err(|e| format!("start: {e:?}"))?;
    emit(json!({"event": "started"}));
    let filter = match (o.get("filter"), o.get("sql")) {
        (_, Some(sql)) => FilterExpression::new(FilterType::Sql, sql),
        (Some(tag), None) => FilterExpression::new(FilterType::Tag, tag),
        (None, None) => FilterExpression::new(FilterType::Tag, "*"),
    };
    let invisible = o.secs("invisible_s", 15)?;
    let deadline = Instant::now() + o.secs("patience_s", 60)?;
    let ack = o.get("ack") != Some("no");
    let mut got = 0;
    while got < count && Instant::now() < deadline {
        let batch = match consumer.receive_with(topic, &filter, 32, invisible).await {
            Ok(b) => b,
            Err(e) => {
                emit(json!({"event": "receive_failed", "error": format!("{e:?}")}));
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
        };
        for m in batch {
            got += 1;
            emit(json!({"event": "received", "message_id": m.message_id(), "topic": m.topic(),
                "body": String::from_utf8_lossy(m.body()), "tag": m.tag(), "keys": m.keys(),
                "properties": m.properties(), "message_group": m.message_group(),
                "delivery_timestamp": m.delivery_timestamp(), "delivery_attempt": m.delivery_attempt(),
                "received_at_ms": now_ms()}));
            if ack {
                let r = consumer.ack(&m).await;
                emit(json!({"event": "acked", "message_id": m.message_id(),
                    "ok": r.is_ok(), "error": r.err().map(|e| format!("{e:?}"))}));
            }
        }
    }
    consumer.shutdown().await.map_err(|e| format!("shutdown: {e:?}"))?;
    emit(json!({"event": "done", "received": got}));
    if got >= count {
        Ok(())
    } else {
        Err(format!("received {got} of {count}"))
    }
}

async fn run(args: &[String]) -> Result<(), String> {
    let usage = "usage: grpc_rust5 send ENDPOINT TOPIC COUNT [k=v..] | receive ENDPOINT TOPIC GROUP COUNT [k=v..]";
    let count = |s: &String| s.parse::<usize>().map_err(|_| format!("count: {s}"));
    match args {
        [cmd, endpoint, topic, n, rest @ ..] if cmd == "send" => {
            send(endpoint, topic, count(n)?, &Opts::parse(rest)?).await
        }
        [cmd, endpoint, topic, group, n, rest @ ..] if cmd == "receive" => {
            receive(endpoint, topic, group, count(n)?, &Opts::parse(rest)?).await
        }
        _ => Err(usage.to_string()),
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match run(&args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            emit(json!({"event": "error", "error": e}));
            ExitCode::FAILURE
        }
    }
}
