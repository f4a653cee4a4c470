//! Issue 26: the broker's own tables across a SIGKILL of the real binary on a
//! `--store-path-root-dir`: undecided half messages are checked again after the restart (with
//! the ids their producer was given) while decided ones are neither delivered again nor
//! checked; a waiting timer message is delivered once, never before its due time, and one
//! delivered before the kill (in or out of its queue's order) is not delivered again; a
//! delay-level message likewise, also when it is older than the retention by the restart and
//! nothing was delivered before (only its restored group holds it). Each test kills the broker
//! with SIGKILL (`Child::kill`) and starts the same binary on the same directory.

use std::path::Path;
use std::process::Child;
use std::time::{SystemTime, UNIX_EPOCH};

use baiji::remoting::header::SendHeaderVersion;
use baiji::remoting::message::DecodedMessage;
use baiji::remoting::msgid::decode_offset_msg_id;

use super::restart::{binary_command, free_port, wait_listening, StoreDir};
use super::*;

fn epoch_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).expect("a clock after 1970").as_millis() as u64
}

/// The real binary, killed with SIGKILL when dropped (a failing test leaves no process).
struct Broker(Child);

impl Broker {
    /// The binary on `dir` with `extra` flags, listening on fresh ports; and its address.
    async fn spawn(dir: &Path, extra: &[&str]) -> (Broker, SocketAddr) {
        let addr = SocketAddr::from(([127, 0, 0, 1], free_port()));
        let namesrv = SocketAddr::from(([127, 0, 0, 1], free_port()));
        let mut cmd = binary_command(dir, addr, namesrv);
        cmd.args(extra);
        let mut child = cmd.spawn().expect("spawn the baiji binary");
        let exited = wait_listening(&mut child, addr, Duration::from_secs(30)).await;
        assert!(exited.is_none(), "the broker process exited before listening: {exited:?}");
        (Broker(child), addr)
    }

    /// SIGKILL, and waits for the process to be gone.
    fn kill(mut self) {
        self.0.kill().expect("SIGKILL the broker");
        self.0.wait().expect("reap it");
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A SEND_MESSAGE_V2 of `body` to `queue` of `topic` with `props` (whole `k\u{1}v\u{2}` pairs).
fn send_with(topic: &str, queue: i32, props: &str, body: &str) -> RemotingCommand {
    let to = ("state_producer", topic, queue, 1);
    common::raw::send(SendHeaderVersion::V2, to, props, body.as_bytes().to_vec())
}

async fn send_ok(conn: &mut Conn, req: RemotingCommand) -> RemotingCommand {
    let r = conn.call(req).await;
    assert_eq!(r.code, code::SUCCESS, "the send is stored: {r:?}");
    r
}

/// Everything in `queue` of `topic`.
async fn pull_all(conn: &mut Conn, topic: &str, queue: i32) -> Vec<DecodedMessage> {
    let mut out = Vec::new();
    let mut offset = 0i64;
    loop {
        let r = conn
            .call(pull_request(
                "state_reader",
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

fn body_of(m: &DecodedMessage) -> String {
    String::from_utf8_lossy(&m.body).into_owned()
}

fn prop<'a>(m: &'a DecodedMessage, key: &str) -> Option<&'a str> {
    baiji::remoting::properties::find(&m.properties, key)
}

/// The bodies in queue 0 of `topic`, sorted.
async fn bodies(conn: &mut Conn, topic: &str) -> Vec<String> {
    let mut b: Vec<String> = pull_all(conn, topic, 0).await.iter().map(body_of).collect();
    b.sort();
    b
}

/// Waits until queue 0 of `topic` holds a message with `body`; returns it.
async fn wait_for(conn: &mut Conn, topic: &str, body: &str, patience: Duration) -> DecodedMessage {
    let deadline = Instant::now() + patience;
    loop {
        if let Some(m) = pull_all(conn, topic, 0).await.into_iter().find(|m| body_of(m) == body) {
            return m;
        }
        assert!(Instant::now() < deadline, "{body} arrives on {topic} within {patience:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A timer message to queue 0 of `topic` with `UNIQ_KEY` = `body` and one timer property.
fn timer(topic: &str, body: &str, key: &str, value: u64) -> RemotingCommand {
    let props = format!("TAGS\u{1}T\u{2}UNIQ_KEY\u{1}{body}\u{2}{key}\u{1}{value}\u{2}");
    send_with(topic, 0, &props, body)
}

/// What the previous run left on the real topic must be there once, the restored message
/// arrive once at or after `due`, and nothing arrive twice within a second more.
async fn assert_delivered_once(conn: &mut Conn, topic: &str, restored: &str, due: u64) {
    let m = wait_for(conn, topic, restored, Duration::from_secs(30)).await;
    assert!(
        u64::try_from(m.store_timestamp).unwrap_or(0) >= due,
        "{restored} is delivered at or after its due time {due}: stored at {}",
        m.store_timestamp
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
}

#[tokio::test]
async fn given_a_waiting_timer_when_the_broker_is_killed_should_deliver_it_once_after_the_restart_never_early(
) {
    let dir = StoreDir::new("state-timer");
    let (broker, addr) = Broker::spawn(&dir.0, &[]).await;
    let mut conn = Conn::open(addr).await;
    let r = conn.call(create_topic_request("StateTimer", 1)).await;
    assert_eq!(r.code, code::SUCCESS, "the topic is created: {r:?}");
    let t0 = epoch_ms();
    let due = t0 + 4_000;
    send_ok(&mut conn, timer("StateTimer", "early", "TIMER_DELIVER_MS", t0 + 300)).await;
    send_ok(&mut conn, timer("StateTimer", "waiting", "TIMER_DELIVER_MS", due)).await;
    wait_for(&mut conn, "StateTimer", "early", Duration::from_secs(20)).await;
    // Its release is recorded right after its delivery: give it a moment.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(bodies(&mut conn, "StateTimer").await, ["early"], "the other one still waits");
    assert!(epoch_ms() < due, "killed before the waiting one is due");
    broker.kill();

    let (broker, addr) = Broker::spawn(&dir.0, &[]).await;
    let mut conn = Conn::open(addr).await;
    assert_delivered_once(&mut conn, "StateTimer", "waiting", due).await;
    assert_eq!(
        bodies(&mut conn, "StateTimer").await,
        ["early", "waiting"],
        "each timer message once: the one delivered before the kill is not delivered again"
    );
    broker.kill();
}

#[tokio::test]
async fn given_a_timer_delivered_ahead_of_an_older_one_when_the_broker_is_killed_should_deliver_neither_twice(
) {
    // Both in the timer topic's band of delays [7.445 s, 9.306 s), so one queue: the second
    // one, due first, is delivered while the first (a lower offset) waits, so the release
    // cannot commit it; only its journaled done offset says it was delivered.
    let dir = StoreDir::new("state-timer-order");
    let (broker, addr) = Broker::spawn(&dir.0, &[]).await;
    let mut conn = Conn::open(addr).await;
    let r = conn.call(create_topic_request("StateTimerOrder", 1)).await;
    assert_eq!(r.code, code::SUCCESS, "the topic is created: {r:?}");
    let t0 = epoch_ms();
    send_ok(&mut conn, timer("StateTimerOrder", "older-later", "TIMER_DELAY_MS", 9_200)).await;
    send_ok(&mut conn, timer("StateTimerOrder", "newer-sooner", "TIMER_DELAY_MS", 7_500)).await;
    wait_for(&mut conn, "StateTimerOrder", "newer-sooner", Duration::from_secs(30)).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(bodies(&mut conn, "StateTimerOrder").await, ["newer-sooner"], "one still waits");
    broker.kill();

    let (broker, addr) = Broker::spawn(&dir.0, &[]).await;
    let mut conn = Conn::open(addr).await;
    assert_delivered_once(&mut conn, "StateTimerOrder", "older-later", t0 + 9_200).await;
    assert_eq!(
        bodies(&mut conn, "StateTimerOrder").await,
        ["newer-sooner", "older-later"],
        "each once: the one delivered out of order before the kill is not delivered again"
    );
    broker.kill();
}

/// A send of `body` to queue 0 of `topic` at delay level `level`.
fn delayed(topic: &str, body: &str, level: u32) -> RemotingCommand {
    send_with(topic, 0, &format!("TAGS\u{1}T\u{2}DELAY\u{1}{level}\u{2}"), body)
}

#[tokio::test]
async fn given_a_delay_level_message_when_the_broker_is_killed_should_deliver_it_once_after_the_restart(
) {
    let dir = StoreDir::new("state-delay");
    let (broker, addr) = Broker::spawn(&dir.0, &[]).await;
    let mut conn = Conn::open(addr).await;
    let r = conn.call(create_topic_request("StateDelay", 1)).await;
    assert_eq!(r.code, code::SUCCESS, "the topic is created: {r:?}");
    let sent = epoch_ms();
    send_ok(&mut conn, delayed("StateDelay", "five-seconds", 2)).await;
    send_ok(&mut conn, delayed("StateDelay", "one-second", 1)).await;
    wait_for(&mut conn, "StateDelay", "one-second", Duration::from_secs(20)).await;
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    assert_eq!(bodies(&mut conn, "StateDelay").await, ["one-second"], "level 2 still waits");
    assert!(epoch_ms() < sent + 5_000, "killed before level 2 is due");
    broker.kill();

    let (broker, addr) = Broker::spawn(&dir.0, &[]).await;
    let mut conn = Conn::open(addr).await;
    assert_delivered_once(&mut conn, "StateDelay", "five-seconds", sent + 5_000).await;
    assert_eq!(
        bodies(&mut conn, "StateDelay").await,
        ["five-seconds", "one-second"],
        "each once: the level-1 message delivered before the kill is not delivered again"
    );
    broker.kill();
}

#[tokio::test]
async fn given_a_delay_level_message_and_a_short_retention_when_killed_before_any_delivery_should_keep_and_deliver_it(
) {
    // Nothing was delivered before the kill, so the schedule group committed nothing but its
    // start; by the restart the waiting message is older than the one-second retention, so
    // only the group's hold, restored with the store, keeps it from being freed at once.
    let flags = ["--retention-secs", "1"];
    let dir = StoreDir::new("state-delay-held");
    let (broker, addr) = Broker::spawn(&dir.0, &flags).await;
    let mut conn = Conn::open(addr).await;
    let r = conn.call(create_topic_request("StateDelayHeld", 1)).await;
    assert_eq!(r.code, code::SUCCESS, "the topic is created: {r:?}");
    let sent = epoch_ms();
    send_ok(&mut conn, delayed("StateDelayHeld", "held", 2)).await;
    tokio::time::sleep(Duration::from_millis(2_000)).await;
    assert!(epoch_ms() < sent + 5_000, "killed before level 2 is due");
    broker.kill();

    let (broker, addr) = Broker::spawn(&dir.0, &flags).await;
    let mut conn = Conn::open(addr).await;
    // A consumer group holds what arrives (the retention would free it within a second).
    let r = conn.call(heartbeat_request("127.0.0.1@held", "held_reader", "StateDelayHeld")).await;
    assert_eq!(r.code, code::SUCCESS, "the consumer heartbeat is accepted: {r:?}");
    assert_delivered_once(&mut conn, "StateDelayHeld", "held", sent + 5_000).await;
    assert_eq!(bodies(&mut conn, "StateDelayHeld").await, ["held"], "delivered once");
    broker.kill();
}

const TX_TOPIC: &str = "StateTx";
const TX_GROUP: &str = "state_tx_group";
const COMMIT: i64 = 8;
const ROLLBACK: i64 = 12;

/// What a half message's send answered: the ids END_TRANSACTION names it by.
#[derive(Debug, Clone)]
struct Half {
    uniq: String,
    queue_offset: i64,
    commit_log_offset: i64,
}

async fn send_half(conn: &mut Conn, uniq: &str) -> Half {
    let props = format!(
        "TAGS\u{1}T\u{2}TRAN_MSG\u{1}true\u{2}PGROUP\u{1}{TX_GROUP}\u{2}UNIQ_KEY\u{1}{uniq}\u{2}"
    );
    let r = send_ok(conn, send_with(TX_TOPIC, 0, &props, uniq)).await;
    let queue_offset = r.ext_fields.get("queueOffset").and_then(|o| o.parse().ok());
    let id = r.ext_fields.get("msgId").and_then(|m| decode_offset_msg_id(m).ok());
    Half {
        uniq: uniq.into(),
        queue_offset: queue_offset.expect("a queueOffset"),
        commit_log_offset: id.expect("an offset msgId").commit_log_offset,
    }
}

/// The one-way END_TRANSACTION a producer sends.
async fn end(conn: &mut Conn, half: &Half, state: i64, from_check: bool) {
    let mut ext = ExtFields::new();
    ext.insert("topic", TX_TOPIC);
    ext.insert("producerGroup", TX_GROUP);
    ext.insert_i64("tranStateTableOffset", half.queue_offset);
    ext.insert_i64("commitLogOffset", half.commit_log_offset);
    ext.insert_i64("commitOrRollback", state);
    ext.insert_bool("fromTransactionCheck", from_check);
    ext.insert("msgId", &half.uniq);
    ext.insert("transactionId", &half.uniq);
    let mut cmd = RemotingCommand::oneway_request(rc::END_TRANSACTION, 0).with_ext_fields(ext);
    cmd.opaque = conn.opaque();
    conn.write(&cmd).await;
}

/// The next CHECK_TRANSACTION_STATE on `conn` within `within`, if any.
async fn next_check(conn: &mut Conn, within: Duration) -> Option<RemotingCommand> {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        let (_, cmd) = conn.read_frame(left).await?;
        if !cmd.is_response() && cmd.code == rc::CHECK_TRANSACTION_STATE {
            return Some(cmd);
        }
    }
}

#[tokio::test]
async fn given_undecided_and_decided_half_messages_when_the_broker_is_killed_should_check_only_the_undecided_and_deliver_each_commit_once(
) {
    // Checked 3 s after it was stored, every 300 ms. The undecided one is sent first and is
    // not checked (nor moved) before the kill, so it holds the decided ones' records in the
    // half queue: after the restart only their journaled decisions keep them from being
    // checked again.
    let flags = [
        "--transaction-time-out",
        "3000",
        "--transaction-check-interval",
        "300",
        "--transaction-check-max",
        "1000",
    ];
    let dir = StoreDir::new("state-tx");
    let (broker, addr) = Broker::spawn(&dir.0, &flags).await;
    let mut conn = Conn::open(addr).await;
    let r = conn.call(create_topic_request(TX_TOPIC, 1)).await;
    assert_eq!(r.code, code::SUCCESS, "the topic is created: {r:?}");
    let sent = epoch_ms();
    let undecided = send_half(&mut conn, "7F000001000100000000000000002601").await;
    let committed = send_half(&mut conn, "7F000001000100000000000000002602").await;
    let rolled_back = send_half(&mut conn, "7F000001000100000000000000002603").await;
    end(&mut conn, &committed, COMMIT, false).await;
    end(&mut conn, &rolled_back, ROLLBACK, false).await;
    wait_for(&mut conn, TX_TOPIC, &committed.uniq, Duration::from_secs(20)).await;
    // The rollback, sent before the commit was seen delivered, is applied by now.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(epoch_ms() < sent + 3_000, "killed before the undecided one is checked");
    broker.kill();

    let (broker, addr) = Broker::spawn(&dir.0, &flags).await;
    let mut producer = Conn::open(addr).await;
    let body = format!(
        r#"{{"clientID":"127.0.0.1@state","producerDataSet":[{{"groupName":"{TX_GROUP}"}}],"consumerDataSet":[],"heartbeatFingerprint":0,"withoutSub":false}}"#
    );
    let heartbeat = request(rc::HEART_BEAT, ExtFields::new()).with_body(body.into_bytes());
    let r = producer.call(heartbeat).await;
    assert_eq!(r.code, code::SUCCESS, "the producer heartbeat is accepted: {r:?}");
    let check = next_check(&mut producer, PATIENCE)
        .await
        .expect("the undecided half message is checked after the restart");
    let field = |k: &str| check.ext_fields.get(k).and_then(|v| v.parse::<i64>().ok());
    let m = &decode_records(&check.body).expect("the check carries the message")[0];
    assert_eq!(prop(m, "UNIQ_KEY"), Some(undecided.uniq.as_str()), "the undecided one: {check:?}");
    assert_eq!(field("tranStateTableOffset"), Some(undecided.queue_offset), "its first ids");
    assert_eq!(field("commitLogOffset"), Some(undecided.commit_log_offset), "its first ids");
    assert!(
        prop(m, "TRANSACTION_CHECK_TIMES").and_then(|n| n.parse::<u32>().ok()).unwrap_or(0) >= 1,
        "checks are counted: {check:?}"
    );
    // The producer decides with the ids its send was answered.
    end(&mut producer, &undecided, COMMIT, true).await;
    let mut conn = Conn::open(addr).await;
    wait_for(&mut conn, TX_TOPIC, &undecided.uniq, Duration::from_secs(20)).await;
    // Several check passes more: nothing else is checked.
    if let Some(extra) = next_check(&mut producer, Duration::from_millis(1_500)).await {
        panic!("a decided half message is checked again: {extra:?}");
    }
    let mut want = vec![committed.uniq.clone(), undecided.uniq.clone()];
    want.sort();
    assert_eq!(
        bodies(&mut conn, TX_TOPIC).await,
        want,
        "each commit delivered once, the rolled-back message never"
    );
    broker.kill();
}

#[tokio::test]
async fn given_an_undecided_half_message_moved_by_checks_before_the_kill_should_be_checked_after_the_restart_by_its_first_ids(
) {
    // Past its 500 ms immunity, every pass before the kill counts a check (no producer is
    // connected) and moves its record to the end of the half queue, releasing the rolled-back
    // one behind it: its position in the queue is no longer the id its producer was given.
    let flags = [
        "--transaction-time-out",
        "500",
        "--transaction-check-interval",
        "300",
        "--transaction-check-max",
        "1000",
    ];
    let dir = StoreDir::new("state-tx-moved");
    let (broker, addr) = Broker::spawn(&dir.0, &flags).await;
    let mut conn = Conn::open(addr).await;
    let r = conn.call(create_topic_request(TX_TOPIC, 1)).await;
    assert_eq!(r.code, code::SUCCESS, "the topic is created: {r:?}");
    let undecided = send_half(&mut conn, "7F000001000100000000000000002611").await;
    let rolled_back = send_half(&mut conn, "7F000001000100000000000000002612").await;
    end(&mut conn, &rolled_back, ROLLBACK, false).await;
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    broker.kill();

    let (broker, addr) = Broker::spawn(&dir.0, &flags).await;
    let mut producer = Conn::open(addr).await;
    let body = format!(
        r#"{{"clientID":"127.0.0.1@moved","producerDataSet":[{{"groupName":"{TX_GROUP}"}}],"consumerDataSet":[],"heartbeatFingerprint":0,"withoutSub":false}}"#
    );
    let heartbeat = request(rc::HEART_BEAT, ExtFields::new()).with_body(body.into_bytes());
    let r = producer.call(heartbeat).await;
    assert_eq!(r.code, code::SUCCESS, "the producer heartbeat is accepted: {r:?}");
    let check = next_check(&mut producer, PATIENCE)
        .await
        .expect("the undecided half message is checked after the restart");
    let field = |k: &str| check.ext_fields.get(k).and_then(|v| v.parse::<i64>().ok());
    let m = &decode_records(&check.body).expect("the check carries the message")[0];
    assert_eq!(prop(m, "UNIQ_KEY"), Some(undecided.uniq.as_str()), "the undecided one: {check:?}");
    assert_eq!(field("tranStateTableOffset"), Some(undecided.queue_offset), "its first ids");
    assert_eq!(field("commitLogOffset"), Some(undecided.commit_log_offset), "its first ids");
    let checks = prop(m, "TRANSACTION_CHECK_TIMES").and_then(|n| n.parse::<u32>().ok());
    assert!(checks.unwrap_or(0) >= 2, "the checks counted before the kill go on: {check:?}");
    // Committed by the ids its send was answered.
    end(&mut producer, &undecided, COMMIT, true).await;
    let mut conn = Conn::open(addr).await;
    wait_for(&mut conn, TX_TOPIC, &undecided.uniq, Duration::from_secs(20)).await;
    if let Some(extra) = next_check(&mut producer, Duration::from_millis(1_500)).await {
        panic!("a decided half message is checked again: {extra:?}");
    }
    assert_eq!(
        bodies(&mut conn, TX_TOPIC).await,
        [undecided.uniq.as_str()],
        "the commit delivered once, the rolled-back message never"
    );
    broker.kill();
}
