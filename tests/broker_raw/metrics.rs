//! The Prometheus endpoint (`metrics-listen`): a broker with the endpoint on a port it binds
//! itself (port 0, its bound address passed on by `metrics_addr`), sends and pulls in raw
//! frames, and scrapes `GET /metrics` over TCP: exact counter values, consistent histograms,
//! escaped label values, and `promtool check metrics` on the text when promtool is installed
//! (required when `BAIJI_REQUIRE_PROMTOOL=1`, as `.ci/test` sets it).

use std::collections::BTreeMap;
use std::io::Write as _;
use std::process::{Command, Stdio};

use super::*;

/// A cluster name and a group name with every character the text format escapes.
const CLUSTER: &str = "Clu\"ster\\with\nspecials";
const GROUP: &str = "metrics_\"group\"\\x\ny";
const TOPIC: &str = "MetricsTopic";

/// `GET path` over a fresh TCP connection; returns the status line and the body.
pub(super) async fn http_get(addr: SocketAddr, path: &str) -> (String, String) {
    let mut stream = TcpStream::connect(addr).await.expect("the metrics endpoint accepts");
    let req = format!("GET {path} HTTP/1.1\r\nHost: baiji\r\nAccept: text/plain\r\n\r\n");
    stream.write_all(req.as_bytes()).await.expect("the request is written");
    let mut raw = Vec::new();
    tokio::time::timeout(PATIENCE, stream.read_to_end(&mut raw))
        .await
        .expect("the endpoint answers and closes within the patience")
        .expect("the answer is read");
    let text = String::from_utf8(raw).expect("the answer is UTF-8");
    let (head, body) = text.split_once("\r\n\r\n").expect("an HTTP head and body");
    let status = head.lines().next().unwrap_or_default().to_string();
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("Content-Length: "))
        .expect("a Content-Length header")
        .parse()
        .expect("a numeric Content-Length");
    assert_eq!(length, body.len(), "Content-Length is the body's length");
    (status, body.to_string())
}

/// Samples of one metric name: the label text between the braces → value.
pub(super) fn samples(text: &str, name: &str) -> BTreeMap<String, f64> {
    let prefix = format!("{name}{{");
    text.lines()
        .filter_map(|l| l.strip_prefix(&prefix))
        .map(|rest| {
            let (labels, value) = rest.rsplit_once("} ").expect("a sample line");
            (labels.to_string(), value.parse().expect("a numeric value"))
        })
        .collect()
}

/// The one sample of `name` whose labels contain every fragment of `with`.
pub(super) fn value(text: &str, name: &str, with: &[&str]) -> f64 {
    let found: Vec<(String, f64)> = samples(text, name)
        .into_iter()
        .filter(|(labels, _)| with.iter().all(|w| labels.contains(w)))
        .collect();
    assert_eq!(found.len(), 1, "one sample of {name} with {with:?}; scrape:\n{text}");
    found[0].1
}

/// `topic="…"` with the label value escaped as the text format does.
fn escaped(key: &str, v: &str) -> String {
    let v = v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n");
    format!("{key}=\"{v}\"")
}

/// Checks one histogram series: cumulative buckets never decrease, `+Inf` equals `_count`;
/// returns the buckets (upper bound → cumulative count), the sum and the count.
fn histogram(text: &str, name: &str, with: &[&str]) -> (Vec<(String, f64)>, f64, f64) {
    let mut buckets: Vec<(String, f64)> = samples(text, &format!("{name}_bucket"))
        .into_iter()
        .filter(|(labels, _)| with.iter().all(|w| labels.contains(w)))
        .map(|(labels, v)| {
            let le = labels.rsplit_once("le=\"").expect("an le label").1.trim_end_matches('"');
            (le.to_string(), v)
        })
        .collect();
    let bound = |le: &str| if le == "+Inf" { f64::INFINITY } else { le.parse().expect("a bound") };
    buckets.sort_by(|a, b| bound(&a.0).total_cmp(&bound(&b.0)));
    assert!(!buckets.is_empty(), "{name} has buckets for {with:?}:\n{text}");
    for w in buckets.windows(2) {
        assert!(w[0].1 <= w[1].1, "{name} buckets are cumulative: {buckets:?}");
    }
    let count = value(text, &format!("{name}_count"), with);
    let sum = value(text, &format!("{name}_sum"), with);
    let last = buckets.last().expect("a last bucket");
    assert_eq!(last.0, "+Inf", "{name}'s last bucket is +Inf: {buckets:?}");
    assert_eq!(last.1, count, "{name}: le=\"+Inf\" equals _count");
    (buckets, sum, count)
}

/// Runs `promtool check metrics` on `text` when promtool is installed; fails without it when
/// `BAIJI_REQUIRE_PROMTOOL=1`.
fn promtool_check(text: &str) {
    let spawned = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let mut child = match spawned {
        Ok(c) => c,
        Err(e) => {
            let required = std::env::var("BAIJI_REQUIRE_PROMTOOL").is_ok_and(|v| v == "1");
            assert!(
                !required,
                "BAIJI_REQUIRE_PROMTOOL=1 but promtool cannot be run ({e}): install Debian's \
                 `prometheus` package (apt-get install prometheus), as .ci/test does"
            );
            eprintln!("promtool not found ({e}): skipping `promtool check metrics`");
            return;
        }
    };
    child
        .stdin
        .take()
        .expect("promtool's stdin")
        .write_all(text.as_bytes())
        .expect("the scrape is piped to promtool");
    let out = child.wait_with_output().expect("promtool finishes");
    assert!(
        out.status.success(),
        "promtool check metrics fails:\nstdout: {}\nstderr: {}\nscrape:\n{text}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test]
async fn given_no_metrics_listen_should_serve_no_endpoint() {
    let broker = start_broker(|_| {}).await;
    assert_eq!(broker.metrics_addr(), None, "metrics are off by default");
    broker.shutdown().await;
}

#[tokio::test]
async fn given_sends_and_pulls_when_scraped_should_count_them_exactly_in_valid_text() {
    let broker = start_broker(|c| {
        c.core.metrics_listen = Some("127.0.0.1:0".parse().expect("an address"));
        c.core.cluster_name = CLUSTER.into();
    })
    .await;
    let metrics = broker.metrics_addr().expect("the endpoint is bound");
    let mut conn = Conn::open(broker_addr(&broker)).await;
    let r = conn.call(create_topic_request(TOPIC, 2)).await;
    assert_eq!(r.code, code::SUCCESS, "creating a topic succeeds: {r:?}");

    // Seven messages: sizes chosen to land in four of RocketMQ's size buckets.
    let sizes: [(i32, usize); 7] =
        [(0, 10), (0, 1024), (0, 1025), (0, 4096), (1, 5000), (1, 600 * 1024), (1, 1)];
    for (queue, size) in sizes {
        let r = conn.call(send_request(TOPIC, queue, vec![b'x'; size])).await;
        assert_eq!(r.code, code::SUCCESS, "sending {size} bytes succeeds: {r:?}");
    }
    let total: usize = sizes.iter().map(|(_, s)| s).sum();

    // A clustering group (its name needs escaping) subscribes and pulls queue 0 from 0.
    let body = serde_json::json!({
        "clientID": "127.0.0.1@metrics",
        "producerDataSet": [],
        "consumerDataSet": [{
            "groupName": GROUP,
            "consumeType": "CONSUME_PASSIVELY",
            "messageModel": "CLUSTERING",
            "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET",
            "subscriptionDataSet": [{
                "classFilterMode": false, "topic": TOPIC, "subString": "*", "tagsSet": [],
                "codeSet": [], "subVersion": 1, "expressionType": "TAG"
            }],
            "unitMode": false
        }],
        "heartbeatFingerprint": 0,
        "withoutSub": false
    });
    let hb = request(rc::HEART_BEAT, ExtFields::new()).with_body(body.to_string().into_bytes());
    let r = conn.call(hb).await;
    assert_eq!(r.code, code::SUCCESS, "the heartbeat is accepted: {r:?}");
    let r = conn.call(pull_request(GROUP, TOPIC, 0, 0, 0, pull_sys_flag::SUBSCRIPTION)).await;
    assert_eq!(r.code, code::SUCCESS, "the pull finds queue 0's messages: {r:?}");
    let pulled = decode_records(&r.body).expect("the pulled records decode");
    assert_eq!(pulled.len(), 4, "queue 0 holds four messages");

    let (status, text) = http_get(metrics, "/metrics").await;
    assert_eq!(status, "HTTP/1.1 200 OK", "the scrape succeeds:\n{text}");
    let t = escaped("topic", TOPIC);
    let g = escaped("consumer_group", GROUP);
    let cluster = escaped("cluster", CLUSTER);
    assert!(cluster.contains(r#"\"ster\\with\nspecials"#), "the fixture escapes: {cluster}");
    let common = [cluster.as_str(), "node_type=\"broker\"", "node_id=\"baiji-a\""];

    // Counters: exactly what was sent and pulled.
    let topic_in = [common.as_slice(), &[t.as_str(), "message_type=\"normal\""]].concat();
    assert_eq!(value(&text, "rocketmq_messages_in_total", &topic_in), 7.0);
    assert_eq!(value(&text, "rocketmq_throughput_in_total", &topic_in), total as f64);
    let out = [common.as_slice(), &[t.as_str(), g.as_str()]].concat();
    assert_eq!(value(&text, "rocketmq_messages_out_total", &out), 4.0);
    assert_eq!(value(&text, "rocketmq_throughput_out_total", &out), r.body.len() as f64);

    // The size histogram: each bucket holds what was sent, +Inf == count == 7.
    let (buckets, sum, count) = histogram(&text, "rocketmq_message_size", &topic_in);
    assert_eq!(count, 7.0);
    assert_eq!(sum, total as f64);
    let expected = [
        ("1024", 3.0),
        ("4096", 5.0),
        ("524288", 6.0),
        ("1048576", 7.0),
        ("2097152", 7.0),
        ("4194304", 7.0),
        ("+Inf", 7.0),
    ];
    let got: Vec<(&str, f64)> = buckets.iter().map(|(le, v)| (le.as_str(), *v)).collect();
    assert_eq!(got, expected, "cumulative size buckets");

    // RPC latency: seven sends answered SUCCESS, one pull.
    let sends = ["request_code=\"send_message\"", "response_code=\"success\""];
    let (_, _, n) = histogram(&text, "rocketmq_rpc_latency", &sends);
    assert_eq!(n, 7.0, "seven sends timed");
    let pulls = ["request_code=\"pull_message\"", "response_code=\"success\""];
    let (_, _, n) = histogram(&text, "rocketmq_rpc_latency", &pulls);
    assert_eq!(n, 1.0, "one pull timed");

    // Gauges: the group committed nothing, pulled four of queue 0.
    let lag = [t.as_str(), g.as_str()];
    assert_eq!(value(&text, "rocketmq_consumer_lag_messages", &lag), 7.0);
    assert_eq!(value(&text, "rocketmq_consumer_inflight_messages", &lag), 4.0);
    assert_eq!(value(&text, "rocketmq_consumer_connections", &[g.as_str()]), 1.0);
    assert_eq!(value(&text, "baiji_topic_retained_messages", &[t.as_str()]), 7.0);
    let used = value(&text, "baiji_memory_used_bytes", &[]);
    assert!(used >= total as f64, "the budget in use counts the stored records: {used}");
    assert_eq!(value(&text, "baiji_memory_limit_bytes", &[]), (1u64 << 30) as f64);
    let held = value(&text, "baiji_group_held_bytes", &lag);
    let retained = value(&text, "baiji_topic_retained_bytes", &[t.as_str()]);
    assert_eq!(held, retained, "the group holds every retained byte of the topic");
    assert_eq!(value(&text, "baiji_oneway_sends_refused_total", &[]), 0.0);

    // Every sample carries the escaped cluster label; the raw newline never appears in one.
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        assert!(line.contains(&cluster), "a sample without the escaped cluster: {line}");
    }
    promtool_check(&text);

    let (status, _) = http_get(metrics, "/nothing").await;
    assert_eq!(status, "HTTP/1.1 404 Not Found");
    broker.shutdown().await;
}

/// A broker with a 64 KiB budget under `policy`, the endpoint on, topic [`TOPIC`] (1 queue)
/// and a clustering group that holds every message (it never commits).
async fn small_broker(policy: &str) -> (RunningBroker, Conn, SocketAddr) {
    let broker = start_broker(|c| {
        c.core.metrics_listen = Some("127.0.0.1:0".parse().expect("an address"));
        c.core.memory_budget = 64 * 1024;
        c.core.memory_policy = policy.into();
    })
    .await;
    let metrics = broker.metrics_addr().expect("the endpoint is bound");
    let mut conn = Conn::open(broker_addr(&broker)).await;
    let r = conn.call(create_topic_request(TOPIC, 1)).await;
    assert_eq!(r.code, code::SUCCESS, "creating a topic succeeds: {r:?}");
    let r = conn.call(heartbeat_request("127.0.0.1@holder", "holder", TOPIC)).await;
    assert_eq!(r.code, code::SUCCESS, "the heartbeat is accepted: {r:?}");
    (broker, conn, metrics)
}

#[tokio::test]
async fn given_a_full_budget_under_reject_when_scraped_should_count_every_refusal() {
    let (broker, mut conn, metrics) = small_broker("reject").await;
    let mut busy = 0u32;
    for _ in 0..100 {
        let r = conn.call(send_request(TOPIC, 0, vec![b'r'; 1024])).await;
        match r.code {
            code::SUCCESS => {}
            code::SYSTEM_BUSY => busy += 1,
            other => panic!("a send is stored or refused for room, not {other}: {r:?}"),
        }
    }
    assert!(busy > 0 && busy < 100, "64 KiB holds some of 100 KiB, not all: {busy} refused");
    // One more, one-way: refused, and nobody can be told but the metrics.
    let mut oneway = send_request(TOPIC, 0, vec![b'r'; 1024]);
    oneway.flag = RemotingCommand::FLAG_ONEWAY;
    oneway.opaque = 7;
    conn.write(&oneway).await;
    let r = conn.call(max_offset_request(TOPIC, 0)).await;
    assert_eq!(r.code, code::SUCCESS, "the probe after the one-way send is answered: {r:?}");
    let stored = 100 - busy;
    assert_eq!(r.ext_fields.get("offset"), Some(stored.to_string().as_str()));

    let (_, text) = http_get(metrics, "/metrics").await;
    let policy = ["policy=\"reject\""];
    let refused = f64::from(busy + 1);
    assert_eq!(value(&text, "baiji_sends_refused_total", &policy), refused);
    assert_eq!(value(&text, "baiji_refused_messages_total", &policy), refused);
    assert_eq!(value(&text, "baiji_oneway_sends_refused_total", &[]), 1.0);
    let t = escaped("topic", TOPIC);
    assert_eq!(value(&text, "rocketmq_messages_in_total", &[t.as_str()]), f64::from(stored));
    let busy_rpc = ["request_code=\"send_message\"", "response_code=\"system_busy\""];
    let (_, _, n) = histogram(&text, "rocketmq_rpc_latency", &busy_rpc);
    assert_eq!(n, refused, "every refused send is timed under its response code");
    let used = value(&text, "baiji_memory_used_bytes", &[]);
    assert!(used <= value(&text, "baiji_memory_limit_bytes", &[]), "within budget: {used}");
    promtool_check(&text);
    broker.shutdown().await;
}

#[tokio::test]
async fn given_drop_oldest_when_the_budget_overflows_should_count_the_holding_groups_drops() {
    let (broker, mut conn, metrics) = small_broker("drop-oldest").await;
    for _ in 0..100 {
        let r = conn.call(send_request(TOPIC, 0, vec![b'd'; 1024])).await;
        assert_eq!(r.code, code::SUCCESS, "drop-oldest stores every send: {r:?}");
    }
    let (_, text) = http_get(metrics, "/metrics").await;
    let policy = "policy=\"drop-oldest\"";
    let evicted = value(&text, "baiji_evicted_messages_total", &[policy]);
    assert!(evicted > 0.0, "100 KiB through a 64 KiB budget evicts:\n{text}");
    let t = escaped("topic", TOPIC);
    let g = escaped("consumer_group", "holder");
    let dropped = value(&text, "baiji_dropped_messages_total", &[policy, &t, &g]);
    assert_eq!(dropped, evicted, "the one group held every evicted message");
    let retained = value(&text, "baiji_topic_retained_messages", &[t.as_str()]);
    assert_eq!(retained + evicted, 100.0, "retained and evicted add up to what was sent");
    assert_eq!(value(&text, "rocketmq_consumer_lag_messages", &[&t, &g]), retained);
    promtool_check(&text);
    broker.shutdown().await;
}
