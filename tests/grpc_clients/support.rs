//! The harness of `tests/grpc_clients.rs`: a broker with its gRPC endpoint on a free port, the
//! client scripts (`tests/grpc/*.py`, `tests/node/grpc_*.js`) run to completion with their JSON
//! lines collected, and remoting reads of what they stored.

#![allow(dead_code)]

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use baiji::broker::{BrokerConfig, RunningBroker};
use baiji::remoting::client::request_once;
use baiji::remoting::code::{request_code as rc, response_code as code};
use baiji::remoting::header::{
    pull_sys_flag, CreateTopicRequestHeader, PullMessageRequestHeader, ToExtFields,
};
use baiji::remoting::message::{decode_records, DecodedMessage};
use baiji::remoting::RemotingCommand;
use serde_json::Value;

/// Generous bound for anything a test waits for; a healthy run needs a fraction of it.
pub(crate) const PATIENCE: Duration = Duration::from_secs(60);

/// A broker with its remoting and gRPC endpoints.
pub(crate) struct Broker {
    pub(crate) running: RunningBroker,
    /// Where the gRPC clients connect (`host:port`).
    pub(crate) grpc: String,
    /// The remoting port.
    pub(crate) remoting: SocketAddr,
}

/// A broker on free loopback ports (remoting, embedded name server, gRPC), configured by
/// `tweak`.
pub(crate) async fn start_broker(tweak: impl FnOnce(&mut BrokerConfig)) -> Broker {
    let running = crate::common::broker::start(crate::common::broker::with_grpc(), tweak).await;
    let grpc = running.grpc_addr().expect("a gRPC endpoint").to_string();
    let remoting = running.broker_addr().expect("a broker port");
    Broker { running, grpc, remoting }
}

pub(crate) use crate::common::names::unique;

/// Creates `topic` with `queues` read-write queues over the remoting port.
pub(crate) async fn create_topic(b: &Broker, topic: &str, queues: i32) {
    let h = CreateTopicRequestHeader::read_write(topic, queues);
    let req =
        RemotingCommand::request(rc::UPDATE_AND_CREATE_TOPIC, 0).with_ext_fields(h.to_ext_fields());
    let r = request_once(b.remoting, req, PATIENCE).await.expect("the broker answers");
    assert_eq!(r.code, code::SUCCESS, "creating topic {topic} succeeds: {r:?}");
}

/// A real 5.x SDK the tests drive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Sdk {
    /// `rocketmq-python-client` 5.1.2 (`tests/grpc/*.py`, interpreter in `.tools/py`).
    Python,
    /// `rocketmq-client-nodejs` 1.0.8 (`tests/node/grpc_*.js`).
    Node,
    /// The official Rust client, crates.io `rocketmq` 5.0.0, driven by `tests/grpc_rust5` (a
    /// package of its own, built by `.ci/test`; its modes are the producer script's).
    Rust,
}

fn repo(parts: &[&str]) -> PathBuf {
    let mut p = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    p.extend(parts);
    p
}

impl Sdk {
    /// The command running `script` (a file name under `tests/grpc/` or `tests/node/`),
    /// after checking that the SDK is installed.
    fn command(self, script: &str) -> Command {
        match self {
            Sdk::Python => {
                let python = repo(&[".tools", "py", "bin", "python"]);
                assert!(
                    python.is_file()
                        && repo(&[".tools", "py", "lib"]).is_dir()
                        && Command::new(&python)
                            .args(["-c", "import rocketmq"])
                            .status()
                            .is_ok_and(|s| s.success()),
                    "the Python SDK is missing: run .ci/test, or `python3 -m venv .tools/py && \
                     .tools/py/bin/pip install rocketmq-python-client==5.1.2`"
                );
                let mut c = Command::new(python);
                c.arg(repo(&["tests", "grpc", script]));
                c
            }
            Sdk::Node => {
                assert!(
                    repo(&["tests", "node", "node_modules", "rocketmq-client-nodejs"]).is_dir(),
                    "the Node.js SDK is missing: run `npm ci --prefix tests/node` (or .ci/test)"
                );
                let mut c = Command::new("node");
                c.arg(repo(&["tests", "node", script]));
                c
            }
            Sdk::Rust => {
                let driver = repo(&["tests", "grpc_rust5", "target", "debug", script]);
                assert!(
                    driver.is_file(),
                    "the Rust SDK driver is missing: run `cargo build --manifest-path \
                     tests/grpc_rust5/Cargo.toml` (or .ci/test)"
                );
                Command::new(driver)
            }
        }
    }

    /// How this SDK's scripts start the bodies they send (`py-normal-0`, `node-fifo-1-2`, …).
    pub(crate) fn prefix(self) -> &'static str {
        match self {
            Sdk::Python => "py",
            Sdk::Node => "node",
            Sdk::Rust => "rs",
        }
    }

    /// The producer script of this SDK.
    pub(crate) fn producer_script(self) -> &'static str {
        match self {
            Sdk::Python => "producer.py",
            Sdk::Node => "grpc_producer.js",
            Sdk::Rust => "grpc_rust5",
        }
    }
}

/// Runs `script` of `sdk` with `args` to completion (at most [`PATIENCE`]) and returns the
/// JSON objects it printed, one per line. Fails the test if it fails, prints an `error`, or
/// does not finish.
pub(crate) async fn run(sdk: Sdk, script: &str, args: Vec<String>) -> Vec<Value> {
    let mut cmd = sdk.command(script);
    cmd.args(&args);
    let what = format!("{sdk:?} {script} {args:?}");
    tokio::task::spawn_blocking(move || {
        let done = crate::common::child::run_to_end(cmd, &what, PATIENCE, 3000);
        let (lines, tail) = (done.lines, done.stderr_tail);
        match done.status {
            Some(s) if s.success() => {}
            Some(s) => panic!("{what} exits with {s}; printed {lines:#?}; stderr: {tail}"),
            None => panic!(
                "{what} did not finish within {PATIENCE:?}; printed {lines:#?}; stderr: {tail}"
            ),
        }
        let values: Vec<Value> = lines
            .iter()
            .filter(|l| l.starts_with('{'))
            .map(|l| {
                serde_json::from_str(l).unwrap_or_else(|e| panic!("{what}: bad JSON line {l}: {e}"))
            })
            .collect();
        assert!(
            values.iter().all(|v| v["kind"] != "error"),
            "{what} reported an error: {values:#?}; stderr: {tail}"
        );
        values
    })
    .await
    .expect("the client runner does not panic")
}

/// A client process left running (killed when dropped).
pub(crate) struct Running(std::process::Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `script` of `sdk` with `args` and returns once it printed a line of kind `started`
/// (at most [`PATIENCE`]); the process keeps running until the returned value is dropped.
pub(crate) async fn start(sdk: Sdk, script: &str, args: Vec<String>) -> Running {
    start_with_line(sdk, script, args).await.0
}

/// [`start`], with the `started` line the process printed.
pub(crate) async fn start_with_line(sdk: Sdk, script: &str, args: Vec<String>) -> (Running, Value) {
    let mut cmd = sdk.command(script);
    cmd.args(&args).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::null());
    let what = format!("{sdk:?} {script} {args:?}");
    let mut child = cmd.spawn().unwrap_or_else(|e| panic!("{what}: cannot start: {e}"));
    let stdout = child.stdout.take().expect("piped stdout");
    let running = Running(child);
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::spawn(move || {
        let started = BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            .find(|l| l.contains("\"started\""));
        let _ = tx.send(started);
    });
    match tokio::time::timeout(PATIENCE, rx).await {
        Ok(Ok(Some(line))) => {
            let v = serde_json::from_str(&line).unwrap_or(Value::Null);
            (running, v)
        }
        other => panic!("{what} did not start within {PATIENCE:?}: {other:?}"),
    }
}

/// The lines of `kind`.
pub(crate) fn of_kind<'a>(lines: &'a [Value], kind: &str) -> Vec<&'a Value> {
    lines.iter().filter(|v| v["kind"] == kind).collect()
}

/// A string field of a JSON line.
pub(crate) fn s<'a>(v: &'a Value, field: &str) -> &'a str {
    v[field].as_str().unwrap_or_else(|| panic!("field {field} is a string in {v}"))
}

/// Everything in every queue of `topic` from offset 0, read with remoting pulls (queue by
/// queue, in offset order) by a group of its own.
pub(crate) async fn pull_all(b: &Broker, topic: &str, queues: i32) -> Vec<DecodedMessage> {
    let mut out = Vec::new();
    for queue in 0..queues {
        let mut offset = 0i64;
        loop {
            let h = PullMessageRequestHeader {
                consumer_group: "grpc_test_reader",
                topic,
                queue_id: queue,
                queue_offset: offset,
                max_msg_nums: 32,
                sys_flag: pull_sys_flag::SUBSCRIPTION,
                commit_offset: 0,
                suspend_timeout_millis: 0,
                subscription: Some("*"),
                sub_version: 0,
                expression_type: "TAG",
                max_msg_bytes: None,
            };
            let req =
                RemotingCommand::request(rc::PULL_MESSAGE, 0).with_ext_fields(h.to_ext_fields());
            let r =
                request_once(b.remoting, req, PATIENCE).await.expect("the broker answers a pull");
            if r.code != code::SUCCESS {
                break;
            }
            let msgs = decode_records(&r.body).expect("a pull body decodes");
            let Some(last) = msgs.last() else { break };
            offset = last.queue_offset + 1;
            out.extend(msgs);
        }
    }
    out
}

/// Pulls `topic` until `done` holds for what it holds (at most [`PATIENCE`]); returns it.
pub(crate) async fn pull_until(
    b: &Broker,
    topic: &str,
    queues: i32,
    what: &str,
    done: impl Fn(&[DecodedMessage]) -> bool,
) -> Vec<DecodedMessage> {
    let start = Instant::now();
    loop {
        let msgs = pull_all(b, topic, queues).await;
        if done(&msgs) {
            return msgs;
        }
        assert!(
            start.elapsed() < PATIENCE,
            "{what} within {PATIENCE:?}; topic {topic} holds {:?}",
            msgs.iter().map(body).collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A message's body as text.
pub(crate) fn body(m: &DecodedMessage) -> String {
    String::from_utf8_lossy(&m.body).into_owned()
}

/// A message's properties.
pub(crate) fn props(m: &DecodedMessage) -> HashMap<String, String> {
    String::from_utf8_lossy(&m.properties)
        .split('\u{2}')
        .filter_map(|p| p.split_once('\u{1}'))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}
