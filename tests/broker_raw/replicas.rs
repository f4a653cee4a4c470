//! Replicated broker sets (issue 27): three real `baiji broker` processes with one broker name
//! and `--replica-peers`, registered with a real `baiji namesrv`, driven with raw frames over
//! loopback as a producer and a committing consumer would (each send is answered before the
//! next: the model knows every acknowledged message's queue and offset).
//!
//! The run, with seeded load lengths and kill points (`BAIJI_REPLICA_SEED` replays them; the
//! interleaving of the processes is the machine's):
//! 1. the set elects a leader, which the name server routes as `brokerId 0`, the followers under
//!    their replica ids; a send to a follower is refused with `SERVICE_NOT_AVAILABLE`, and a
//!    POP on the leader is refused (POP state is not replicated yet);
//! 2. the leader is stopped (SIGSTOP: a partition); the producer finds the new `brokerId 0` in
//!    the route and goes on; the old leader, continued, follows and catches up;
//! 3. five times, the leader is killed (SIGKILL) a seeded 0–300 ms into a burst of sends; the
//!    producer goes on with the new leader; a new, empty replica is started under the next id
//!    with `--replica-replaces` the dead one, the leader catches it up (snapshot marks every 50
//!    entries, so from an image of the set's state) and makes it a voter in the dead one's place;
//!    then every live replica is checked;
//! 4. a follower is stopped (SIGSTOP) while 30 sends are acknowledged by the other two, then
//!    continued and caught up; a follower is killed and replaced the same way as a leader;
//! 5. every live replica holds every acknowledged message at its queue and offset, each message
//!    once unless a send of it went unanswered (at-least-once), identical queues, and every
//!    acknowledged commit; the name server routes `brokerId 0` and the two followers;
//! 6. with both followers stopped the set is below quorum: a send is refused with
//!    `SERVICE_NOT_AVAILABLE` (which producers retry on another broker), and taken again once
//!    they continue; the replicas are identical again.
//! 7. `baiji replica status` through a follower's port names the leader and the voters,
//!    `baiji replica remove` refuses an unknown id and, with a wrong secret, gets nothing; it
//!    takes a follower out through the leader (metrics count 2 voters), and the two left still
//!    hold every send.
//!
//! From step 2 to the end the real rocketmq-client-rust 1.0.0 runs beside the raw frames: a
//! producer (one message every 20 ms, each sent again after a failure it reports) and a push
//! consumer, given only the name server's address, finding each new leader through their own
//! route polls. At the end the producer must be acknowledged again by itself, every message it
//! was told `SEND_OK` must be at its reported queue and offset on every replica (no message
//! stored more often than the client sent it), and the consumer must receive each of them there.
//!
//! A failed run keeps the processes' logs and names their directory.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use baiji::remoting::client::Connection;
use baiji::remoting::header::{PopMessageRequestHeader, UpdateConsumerOffsetRequestHeader};

use super::restart::{free_port, wait_listening};
use super::*;

use super::crash_suite::rng::Rng;

const DEFAULT_SEED: u64 = 0x0027_5EED;
/// The set's `replica-secret`: every replica port checks it.
const SECRET: &str = "failover-suite-secret";
const TOPIC: &str = "RepA";
/// A topic an admin creates (UPDATE_AND_CREATE_TOPIC, 6 queues) before anything is sent to it.
const ADMIN_TOPIC: &str = "RepAdmin";

/// A subscription group config an admin creates (UPDATE_AND_CREATE_SUBSCRIPTIONGROUP).
const ADMIN_GROUP: &str = "rep_admin_group";

/// Whether the replica at `addr` has `ADMIN_GROUP`'s config with its retry count.
async fn has_admin_group(addr: SocketAddr) -> bool {
    let Ok(c) = Connection::connect(addr, CALL).await else { return false };
    let mut c = c.with_call_timeout(CALL);
    let mut ext = ExtFields::new();
    ext.insert("group", ADMIN_GROUP);
    let Ok(r) = c.call(request(rc::GET_SUBSCRIPTIONGROUP_CONFIG, ext)).await else { return false };
    r.code == code::SUCCESS && String::from_utf8_lossy(&r.body).contains("\"retryMaxTimes\":7")
}

/// Whether the replica at `addr` has `ADMIN_TOPIC` with 6 queues: its queue 5 answers
/// GET_MAX_OFFSET and queue 6 is refused (an unknown topic answers 0 for any queue).
async fn has_admin_topic(addr: SocketAddr) -> bool {
    let Ok(c) = Connection::connect(addr, CALL).await else { return false };
    let mut c = c.with_call_timeout(CALL);
    let fifth = c.call(max_offset_request(ADMIN_TOPIC, 5)).await.map(|r| r.code);
    let sixth = c.call(max_offset_request(ADMIN_TOPIC, 6)).await.map(|r| r.code);
    matches!((fifth, sixth), (Ok(a), Ok(b)) if a == code::SUCCESS && b != code::SUCCESS)
}
const QUEUES: i32 = 4;
const GROUP: &str = "rep_group";
const BROKER_NAME: &str = "rep-set";
/// How long a call may wait: a stopped process never answers.
const CALL: Duration = Duration::from_secs(5);
/// How long a new leader may take to be routed as `brokerId 0`.
const FAILOVER: Duration = Duration::from_secs(20);

struct Replica {
    child: Option<Child>,
    addr: SocketAddr,
    /// Its replica id.
    id: u64,
    /// Its replica port's address.
    raft: String,
    /// Its Prometheus endpoint.
    metrics: SocketAddr,
}

struct Set {
    replicas: Vec<Replica>,
    /// The consumer's heartbeat connections, one per replica (a RocketMQ client heartbeats
    /// every broker of a set), kept open so the group stays known.
    _heartbeats: Vec<Connection>,
    namesrv: Child,
    namesrv_addr: SocketAddr,
    /// The processes' logs: removed after a pass, kept after a failure.
    logs: std::path::PathBuf,
    /// Flags every replica gets besides the harness's own.
    extra: Vec<String>,
}

impl Drop for Set {
    fn drop(&mut self) {
        for r in &mut self.replicas {
            if let Some(c) = r.child.as_mut() {
                signal(c, libc_sig::CONT);
                let _ = c.kill();
                let _ = c.wait();
            }
        }
        let _ = self.namesrv.kill();
        let _ = self.namesrv.wait();
        if std::thread::panicking() {
            // Kept for the failure's diagnosis.
            eprintln!("replicas: logs kept in {}", self.logs.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.logs);
        }
    }
}

/// The signals the run sends (numbers as Linux has them).
mod libc_sig {
    pub(super) const STOP: &str = "STOP";
    pub(super) const CONT: &str = "CONT";
}

fn signal(child: &Child, sig: &str) {
    let ok = Command::new("kill")
        .args([format!("-{sig}"), child.id().to_string()])
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    assert!(ok, "kill -{sig} {} succeeds", child.id());
}

/// A process's log file, for its standard output and error (where its logs go).
fn log_file(dir: &Path, name: &str) -> (Stdio, Stdio) {
    std::fs::create_dir_all(dir).expect("the log directory");
    let f = std::fs::File::create(dir.join(name)).expect("a log file");
    let g = f.try_clone().expect("a second handle");
    (Stdio::from(f), Stdio::from(g))
}

async fn start_set() -> Set {
    start_set_with(Vec::new(), "").await
}

/// A set whose replicas get the flags `extra` too; `tag` names its log directory.
async fn start_set_with(extra: Vec<String>, tag: &str) -> Set {
    let logs = std::env::temp_dir().join(format!("baiji-replicas{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&logs);
    let namesrv_addr = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let (out, err) = log_file(&logs, "namesrv.log");
    let mut namesrv = Command::new(env!("CARGO_BIN_EXE_baiji"))
        .args(["namesrv", "--listen", &namesrv_addr.to_string()])
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .spawn()
        .expect("spawn the name server");
    assert!(wait_listening(&mut namesrv, namesrv_addr, PATIENCE).await.is_none());
    let mut set =
        Set { replicas: Vec::new(), _heartbeats: Vec::new(), namesrv, namesrv_addr, logs, extra };
    let raft: Vec<String> = (0..3).map(|_| format!("127.0.0.1:{}", free_port())).collect();
    let peers: Vec<(u64, String)> = (0..3).map(|i| (i as u64 + 1, raft[i].clone())).collect();
    for (id, _) in &peers {
        set.spawn(*id, &peers, None);
    }
    for i in 0..3 {
        set.ready(i).await;
    }
    set
}

impl Set {
    /// Starts replica `id` of `peers` (its own entry among them), joining in place of
    /// `replaces` if given; returns its index.
    fn spawn(&mut self, id: u64, peers: &[(u64, String)], replaces: Option<u64>) -> usize {
        let addr = SocketAddr::from(([127, 0, 0, 1], free_port()));
        let metrics = SocketAddr::from(([127, 0, 0, 1], free_port()));
        let raft = peers.iter().find(|(i, _)| *i == id).expect("its own entry").1.clone();
        let list: Vec<String> = peers.iter().map(|(i, a)| format!("{i}={a}")).collect();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_baiji"));
        cmd.arg("broker")
            .args(["--listen", &addr.to_string(), "--no-namesrv"])
            .args(["--namesrv-addr", &self.namesrv_addr.to_string()])
            .args(["--grpc-listen", "off", "--fast-listen-port", "0"])
            .args(["--metrics-listen", &metrics.to_string()])
            .args(["--broker-name", BROKER_NAME])
            .args(["--replica-id", &id.to_string(), "--replica-peers", &list.join(";")])
            // Snapshot marks every 50 entries: a replica that joins later gets an image of the
            // set's state, not the whole log.
            .args(["--replica-snapshot-logs", "50"])
            // Every replica port checks the secret: the joins and Raft traffic below pass it.
            .args(["--replica-secret", SECRET])
            .args(["--retention-secs", "3600", "--keep-acknowledged-secs", "3600"]);
        if let Some(r) = replaces {
            cmd.args(["--replica-replaces", &r.to_string()]);
        }
        cmd.args(&self.extra);
        let (out, err) = log_file(&self.logs, &format!("replica-{id}.log"));
        let child = cmd
            .env("RUST_LOG", "info,openraft=warn")
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .expect("spawn a replica");
        self.replicas.push(Replica { child: Some(child), addr, id, raft, metrics });
        self.replicas.len() - 1
    }

    /// Waits until replica `i` listens, and heartbeats it as the consumer.
    async fn ready(&mut self, i: usize) {
        let r = &mut self.replicas[i];
        let child = r.child.as_mut().expect("a started replica");
        assert!(wait_listening(child, r.addr, PATIENCE).await.is_none(), "replica listens");
        let mut c = Connection::connect(r.addr, CALL).await.expect("a connection");
        let hb = c.call(heartbeat_request("rep_consumer", GROUP, TOPIC)).await.expect("answered");
        assert_eq!(hb.code, code::SUCCESS, "a heartbeat is taken: {hb:?}");
        self._heartbeats.push(c);
    }

    /// Starts a new replica, empty, under the next id, in place of replica `dead`, beside the
    /// live replicas `live`; waits until it holds what the leader holds. Returns its index.
    async fn rejoin(&mut self, dead: usize, live: &[usize]) -> usize {
        let id = self.replicas.iter().map(|r| r.id).max().unwrap_or(0) + 1;
        let mut peers: Vec<(u64, String)> =
            live.iter().map(|i| (self.replicas[*i].id, self.replicas[*i].raft.clone())).collect();
        peers.push((id, format!("127.0.0.1:{}", free_port())));
        let i = self.spawn(id, &peers, Some(self.replicas[dead].id));
        self.ready(i).await;
        let leader = self.leader(live).await;
        caught_up(self, i, leader).await;
        i
    }

    /// The broker ids the name server routes, with their addresses.
    async fn routed(&self) -> BTreeMap<u64, String> {
        let Ok(mut ns) = Connection::connect(self.namesrv_addr, CALL).await else {
            return BTreeMap::new();
        };
        let mut ext = ExtFields::new();
        ext.insert("topic", "TBW102");
        let Ok(r) = ns.call(request(rc::GET_ROUTEINFO_BY_TOPIC, ext)).await else {
            return BTreeMap::new();
        };
        if r.code != code::SUCCESS {
            return BTreeMap::new();
        }
        let route = TopicRouteData::from_json_slice(&r.body).expect("a route body");
        route
            .broker_datas
            .into_iter()
            .find(|b| b.broker_name == BROKER_NAME)
            .map(|b| b.broker_addrs)
            .unwrap_or_default()
    }

    /// The replica the name server routes as `brokerId 0`, once it is one of `among`.
    async fn leader(&self, among: &[usize]) -> usize {
        let deadline = Instant::now() + FAILOVER;
        loop {
            let routed = self.routed().await;
            if let Some(addr) = routed.get(&0) {
                if let Some(i) =
                    among.iter().copied().find(|i| self.replicas[*i].addr.to_string() == *addr)
                {
                    return i;
                }
            }
            assert!(
                Instant::now() < deadline,
                "a replica of {among:?} is routed as brokerId 0 within {FAILOVER:?}; routes: {routed:?}; logs in {}",
                self.logs.display()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    fn child(&self, i: usize) -> &Child {
        self.replicas[i].child.as_ref().expect("a live replica")
    }
}

/// What a send came to.
#[derive(Debug)]
enum Outcome {
    Stored {
        queue: i32,
        offset: i64,
    },
    Refused(i32, String),
    /// No answer (the replica stopped or died): it may be stored.
    Unknown,
}

fn send_cmd(queue: i32, body: &str) -> RemotingCommand {
    let props = format!("UNIQ_KEY\u{1}{body}\u{2}");
    let to = ("rep_producer", TOPIC, queue, QUEUES);
    common::raw::send(SendHeaderVersion::V2, to, &props, body.as_bytes().to_vec())
}

async fn send_to(addr: SocketAddr, queue: i32, body: &str) -> Outcome {
    let Ok(c) = Connection::connect(addr, CALL).await else { return Outcome::Unknown };
    let mut c = c.with_call_timeout(CALL);
    match c.call(send_cmd(queue, body)).await {
        Ok(r) if r.code == code::SUCCESS => Outcome::Stored {
            queue: r.ext_fields.get("queueId").and_then(|v| v.parse().ok()).unwrap_or(-1),
            offset: r.ext_fields.get("queueOffset").and_then(|v| v.parse().ok()).unwrap_or(-1),
        },
        Ok(r) => Outcome::Refused(r.code, r.remark.unwrap_or_default()),
        Err(_) => Outcome::Unknown,
    }
}

/// The producer's view: what was acknowledged where, and what may be stored twice.
#[derive(Default)]
struct Model {
    acked: BTreeMap<String, (i32, i64)>,
    /// When each acknowledgement was read, in order.
    acked_at: Vec<Instant>,
    /// The replica that answered the last acknowledged send (it led then).
    last_acked_by: usize,
    unsure: HashSet<String>,
    commits: BTreeMap<i32, i64>,
    next: u64,
}

impl Model {
    /// Sends `n` new messages through whichever replica is routed as `brokerId 0` (among
    /// `live`), as a producer does: a send without an answer or refused as unavailable is sent
    /// again, after a route refresh. Every 16th message commits the group's offset of its queue.
    async fn send(&mut self, set: &Set, live: &[usize], n: u64) {
        for _ in 0..n {
            let body = format!("rep-{:06}", self.next);
            let queue = (self.next % QUEUES as u64) as i32;
            self.next += 1;
            let deadline = Instant::now() + FAILOVER;
            loop {
                let leader = set.leader(live).await;
                match send_to(set.replicas[leader].addr, queue, &body).await {
                    Outcome::Stored { queue: q, offset } => {
                        assert_eq!(q, queue, "stored in the queue asked for");
                        self.acked.insert(body.clone(), (q, offset));
                        self.acked_at.push(Instant::now());
                        self.last_acked_by = leader;
                        break;
                    }
                    Outcome::Unknown => {
                        self.unsure.insert(body.clone());
                    }
                    Outcome::Refused(c, remark) => {
                        assert_eq!(
                            c,
                            code::SERVICE_NOT_AVAILABLE,
                            "only a replica that cannot take sends refuses: {remark}"
                        );
                    }
                }
                assert!(Instant::now() < deadline, "{body} is stored within {FAILOVER:?}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            if self.next % 7 == 0 {
                let (q, offset) = self.acked[&body];
                self.commit(set, live, q, offset + 1).await;
            }
        }
    }

    async fn commit(&mut self, set: &Set, live: &[usize], queue: i32, offset: i64) {
        let deadline = Instant::now() + FAILOVER;
        let mut last = None;
        loop {
            let leader = set.leader(live).await;
            let h = UpdateConsumerOffsetRequestHeader {
                consumer_group: GROUP,
                topic: TOPIC,
                queue_id: queue,
                commit_offset: offset,
            };
            if let Ok(c) = Connection::connect(set.replicas[leader].addr, CALL).await {
                let mut c = c.with_call_timeout(CALL);
                if let Ok(r) = c.call(request(rc::UPDATE_CONSUMER_OFFSET, h.to_ext_fields())).await
                {
                    if r.code == code::SUCCESS {
                        self.commits.insert(queue, offset);
                        return;
                    }
                    last = Some((r.code, r.remark));
                }
            }
            assert!(Instant::now() < deadline, "a commit is held within {FAILOVER:?}: {last:?}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// Every message of every queue of the raw producer's topic on the replica at `addr`:
/// queue → offset → body.
async fn contents(addr: SocketAddr) -> BTreeMap<i32, BTreeMap<i64, String>> {
    contents_of(addr, TOPIC, QUEUES).await
}

/// Every message of queues `0..queues` of `topic` on the replica at `addr` (a queue the topic
/// does not have reads as empty).
async fn contents_of(
    addr: SocketAddr,
    topic: &str,
    queues: i32,
) -> BTreeMap<i32, BTreeMap<i64, String>> {
    let mut c =
        Connection::connect(addr, CALL).await.expect("a live replica").with_call_timeout(CALL);
    let mut out = BTreeMap::new();
    for q in 0..queues {
        let mut queue = BTreeMap::new();
        let mut at = 0i64;
        loop {
            let mut cmd = pull_request("rep_reader", topic, q, at, 0, pull_sys_flag::SUBSCRIPTION);
            cmd.ext_fields.insert_i64("maxMsgNums", 256);
            let r = c.call(cmd).await.expect("a pull is answered");
            if r.code != code::SUCCESS {
                break;
            }
            let records = decode_records(&r.body).expect("records");
            if records.is_empty() {
                break;
            }
            for m in records {
                at = m.queue_offset + 1;
                queue.insert(m.queue_offset, String::from_utf8_lossy(&m.body).into_owned());
            }
        }
        out.insert(q, queue);
    }
    out
}

async fn committed(addr: SocketAddr, queue: i32) -> Option<i64> {
    let mut c = Connection::connect(addr, CALL).await.ok()?.with_call_timeout(CALL);
    let mut ext = ExtFields::new();
    ext.insert("consumerGroup", GROUP);
    ext.insert("topic", TOPIC);
    ext.insert_i64("queueId", i64::from(queue));
    ext.insert("setZeroIfNotFound", "false");
    let r = c.call(request(rc::QUERY_CONSUMER_OFFSET, ext)).await.ok()?;
    (r.code == code::SUCCESS).then(|| r.ext_fields.get("offset")?.parse().ok()).flatten()
}

/// What `topic`'s queues `0..queues` hold on the replica at `addr` once `done` says so, or
/// after `FAILOVER` (a follower applies an entry after the leader answered it: it learns the
/// commit with the next append or heartbeat); the caller's assertions then say what is missing.
async fn held_once(
    addr: SocketAddr,
    topic: &str,
    queues: i32,
    done: impl Fn(&BTreeMap<i32, BTreeMap<i64, String>>) -> bool,
) -> BTreeMap<i32, BTreeMap<i64, String>> {
    let deadline = Instant::now() + FAILOVER;
    let mut held = contents_of(addr, topic, queues).await;
    while Instant::now() < deadline && !done(&held) {
        tokio::time::sleep(Duration::from_millis(100)).await;
        held = contents_of(addr, topic, queues).await;
    }
    held
}

/// Checks the replica routed as leader among `live` against the model, then every other one
/// once it has caught up: the same checks, and queues identical to the leader's (`what` says
/// when). Returns the leader.
async fn check_identical(set: &Set, live: &[usize], model: &Model, what: &str) -> usize {
    let leader = set.leader(live).await;
    let held = check(set, leader, model).await;
    for i in live.iter().copied().filter(|i| *i != leader) {
        caught_up(set, i, leader).await;
        assert_eq!(check(set, i, model).await, held, "{what}");
    }
    leader
}

/// Checks the replica at `i` against the model: every acknowledged message at its place, each
/// message once unless its send went unanswered, every acknowledged commit held (waiting up to
/// `FAILOVER` for a follower to apply the last entries).
async fn check(set: &Set, i: usize, model: &Model) -> BTreeMap<i32, BTreeMap<i64, String>> {
    // A follower applies an entry after the leader answered it (it learns the commit with the
    // next append or heartbeat): wait until it holds every acknowledged message, or fail below.
    let held = held_once(set.replicas[i].addr, TOPIC, QUEUES, |held| {
        model.acked.iter().all(|(body, (q, o))| held.get(q).and_then(|m| m.get(o)) == Some(body))
    })
    .await;
    let mut seen: HashSet<&str> = HashSet::new();
    for (q, queue) in &held {
        for (offset, body) in queue {
            assert!(
                seen.insert(body.as_str()) || model.unsure.contains(body),
                "replica {}: {body} is stored twice though every send of it was answered (queue {q}, offset {offset})",
                i + 1
            );
        }
    }
    for (body, (q, offset)) in &model.acked {
        let found = held.get(q).and_then(|queue| queue.get(offset));
        if found != Some(body) {
            let around: Vec<_> = held
                .get(q)
                .map(|queue| queue.range(offset.saturating_sub(3)..offset + 4).collect())
                .unwrap_or_default();
            eprintln!(
                "replicas: replica {} queue {q} around {offset}: {around:?}",
                set.replicas[i].id
            );
        }
        assert_eq!(
            found.map(String::as_str),
            Some(body.as_str()),
            "replica {}: acknowledged {body} is at queue {q} offset {offset}",
            i + 1
        );
    }
    for (q, offset) in &model.commits {
        let deadline = Instant::now() + FAILOVER;
        loop {
            let got = committed(set.replicas[i].addr, *q).await;
            if got == Some(*offset) {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "replica {}: the acknowledged commit {offset} of queue {q} reads back (got {got:?})",
                i + 1
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    held
}

/// Waits until the replica at `i` holds what the one at `like` holds.
async fn caught_up(set: &Set, i: usize, like: usize) {
    let deadline = Instant::now() + FAILOVER;
    loop {
        let (a, b) =
            (contents(set.replicas[i].addr).await, contents(set.replicas[like].addr).await);
        if a == b {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "replica {} catches up with replica {}",
            i + 1,
            like + 1
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The real client's topic, created by its producer's first send (through `TBW102`, as a
/// RocketMQ producer's topic is).
const CLIENT_TOPIC: &str = "RepClient";
/// Queues read back from the real client's topic (more than it has: the rest read as empty).
const CLIENT_QUEUES: i32 = 16;
/// Sends of one message the real producer makes per call: its first and its 2 retries.
const CLIENT_TRIES: u32 = 3;

/// What the real producer was told, message by message.
#[derive(Debug, Default)]
struct ClientLog {
    /// Number → (queue, offset) its acknowledged send reported.
    acked: BTreeMap<u64, (i32, i64)>,
    /// Number → sends of it the client reported failed (each after its own retries).
    failed: BTreeMap<u64, u32>,
    /// The first number not sent.
    next: u64,
}

/// The real producer's share of the load: one message at a time (its body is its number), one
/// every 20 ms, each sent again 100 ms after a failure the client reports, until `stop`. The
/// client finds each new leader by itself (its route poll) and retries as it does by default.
async fn client_load(
    producer: rocketmq_client_rust::DefaultMQProducer,
    stop: Arc<AtomicBool>,
    progress: Arc<AtomicU64>,
) -> (rocketmq_client_rust::DefaultMQProducer, ClientLog) {
    use rocketmq_client_rust::SendStatus;
    use rocketmq_model::common::message::message_single::Message;
    let mut log = ClientLog::default();
    // Relaxed: a flag read between sends; nothing else is published through it.
    'load: while !stop.load(Ordering::Relaxed) {
        let seq = log.next;
        log.next += 1;
        loop {
            let msg = Message::builder()
                .topic(CLIENT_TOPIC)
                .body_slice(seq.to_string().as_bytes())
                .build()
                .expect("a message");
            match producer.send(msg).await {
                Ok(Some(r)) if r.send_status == SendStatus::SendOk => {
                    let mq = r.message_queue.expect("a send result names its queue");
                    assert_eq!(mq.broker_name().as_str(), BROKER_NAME, "stored by the set");
                    log.acked.insert(seq, (mq.queue_id(), r.queue_offset as i64));
                    // Relaxed: a count the suite reads to see progress; the log is returned.
                    progress.fetch_add(1, Ordering::Relaxed);
                    break;
                }
                _ => {
                    *log.failed.entry(seq).or_default() += 1;
                    if stop.load(Ordering::Relaxed) {
                        break 'load;
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    (producer, log)
}

/// Checks the real client's topic on replica `i`: every acknowledged message at the queue and
/// offset its send reported, nothing stored that was not sent, and no message stored more often
/// than the client sent it (at-least-once: a send whose answer was lost is tried again, by the
/// client's retries or after a reported failure).
async fn check_client(
    set: &Set,
    i: usize,
    log: &ClientLog,
) -> BTreeMap<i32, BTreeMap<i64, String>> {
    let addr = set.replicas[i].addr;
    let id = set.replicas[i].id;
    let held = held_once(addr, CLIENT_TOPIC, CLIENT_QUEUES, |held| {
        log.acked.iter().all(|(seq, (q, o))| {
            held.get(q).and_then(|m| m.get(o)).map(String::as_str) == Some(seq.to_string().as_str())
        })
    })
    .await;
    for (seq, (q, o)) in &log.acked {
        let found = held.get(q).and_then(|m| m.get(o));
        assert_eq!(
            found.cloned(),
            Some(seq.to_string()),
            "replica {id}: the client's acknowledged message {seq} is at queue {q} offset {o}"
        );
    }
    let mut copies: BTreeMap<u64, u32> = BTreeMap::new();
    for (q, queue) in &held {
        for (o, body) in queue {
            let seq: u64 =
                body.parse().unwrap_or_else(|_| panic!("replica {id}: {body:?} at {q}/{o}"));
            assert!(seq < log.next, "replica {id}: message {seq} was never sent ({q}/{o})");
            *copies.entry(seq).or_default() += 1;
        }
    }
    for (seq, n) in &copies {
        let calls =
            u32::from(log.acked.contains_key(seq)) + log.failed.get(seq).copied().unwrap_or(0);
        assert!(
            *n <= calls * CLIENT_TRIES,
            "replica {id}: message {seq} stored {n} times from {calls} sends of it"
        );
    }
    held
}

/// Leaders killed (SIGKILL) at seeded points of the load, each replaced by a new replica.
const LEADER_KILLS: usize = 5;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_broker_set_of_three_when_leaders_are_stopped_and_killed_should_keep_every_acknowledged_message_and_commit(
) {
    let seed = std::env::var("BAIJI_REPLICA_SEED")
        .ok()
        .and_then(|s| match s.strip_prefix("0x") {
            Some(hex) => u64::from_str_radix(hex, 16).ok(),
            None => s.parse().ok(),
        })
        .unwrap_or(DEFAULT_SEED);
    eprintln!("replicas: seed {seed:#x} (BAIJI_REPLICA_SEED replays it)");
    let mut rng = Rng(seed);
    let mut set = start_set().await;
    let all = [0usize, 1, 2];
    let mut model = Model::default();

    // 1. A leader, routed as brokerId 0; the followers under their replica ids.
    model.send(&set, &all, 40 + rng.below(40)).await;
    // The replica that answers sends leads (the route may name a deposed one for a moment).
    let first = model.last_acked_by;
    let followers: Vec<u64> =
        all.iter().filter(|i| **i != first).map(|i| set.replicas[*i].id).collect();
    routed_as(&set, &followers).await;
    // Each replica's metrics say its role and the membership (a follower that started after
    // the leader's first attempts learns it at the next one).
    for i in all {
        let leading = if i == first { "1" } else { "0" };
        let want =
            (Some(leading.to_owned()), Some("3".to_owned()), Some(set.replicas[i].id.to_string()));
        let deadline = Instant::now() + FAILOVER;
        loop {
            let (_, text) = super::metrics::http_get(set.replicas[i].metrics, "/metrics").await;
            let value = |name: &str| {
                text.lines()
                    .find(|l| l.starts_with(&format!("{name}{{")))
                    .and_then(|l| l.rsplit(' ').next())
                    .map(str::to_owned)
            };
            let got = (
                value("baiji_replica_leader"),
                value("baiji_replica_voters"),
                value("baiji_replica_id"),
            );
            if got == want {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "replica {i}: (leader, voters, id) {got:?}, not {want:?}:\n{text}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    // A topic an admin creates is created on every replica (through the set).
    let mut c = Connection::connect(set.replicas[first].addr, CALL).await.expect("a connection");
    let r = c.call(create_topic_request(ADMIN_TOPIC, 6)).await.expect("answered");
    assert_eq!(r.code, code::SUCCESS, "the set creates the topic: {r:?}");
    for i in all {
        let deadline = Instant::now() + FAILOVER;
        while !has_admin_topic(set.replicas[i].addr).await {
            assert!(Instant::now() < deadline, "replica {i} has the admin's topic's 6 queues");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    // So is a subscription group config.
    let body = format!(r#"{{"groupName":"{ADMIN_GROUP}","retryMaxTimes":7}}"#);
    let r = c
        .call(
            request(rc::UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, ExtFields::new())
                .with_body(body.into_bytes()),
        )
        .await
        .expect("answered");
    assert_eq!(r.code, code::SUCCESS, "the set creates the group config: {r:?}");
    for i in all {
        let deadline = Instant::now() + FAILOVER;
        while !has_admin_group(set.replicas[i].addr).await {
            assert!(Instant::now() < deadline, "replica {i} has the admin's group config");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    // POP state is not replicated yet: the leader refuses a pop rather than keep it alone.
    let h = PopMessageRequestHeader {
        consumer_group: GROUP,
        topic: TOPIC,
        queue_id: -1,
        max_msg_nums: 4,
        invisible_time: 5_000,
        poll_time: 0,
        born_time: 1,
        init_mode: 0,
        exp_type: Some("TAG"),
        exp: Some("*"),
        order: false,
        attempt_id: None,
    };
    let mut c = Connection::connect(set.replicas[first].addr, CALL).await.expect("a connection");
    let r = c.call(request(rc::POP_MESSAGE, h.to_ext_fields())).await.expect("answered");
    assert!(
        r.code != code::SUCCESS
            && r.remark.as_deref().is_some_and(|m| m.contains("not replicated")),
        "a set refuses POP, saying why: {r:?}"
    );
    let follower = all.iter().copied().find(|i| *i != first).expect("a follower");
    match send_to(set.replicas[follower].addr, 0, "to-a-follower").await {
        Outcome::Refused(c, _) => {
            assert_eq!(c, code::SERVICE_NOT_AVAILABLE, "a follower refuses sends")
        }
        other => panic!("a follower refuses sends: {other:?}"),
    }

    // The real client's load beside the raw frames from here to the end: a producer and a
    // push consumer given only the name server's address.
    let nsa = set.namesrv_addr.to_string();
    let rt = super::cluster_support::client_runtime("replica-suite");
    let client = super::cluster_support::producer(&rt, &nsa, "rep_client_producers").await;
    let inbox = Arc::new(super::cluster_support::Inbox::default());
    let mut consumer = super::cluster_support::push_consumer(
        &rt,
        &nsa,
        "rep_client_consumers",
        CLIENT_TOPIC,
        0,
        &inbox,
        None,
    )
    .await;
    let stop = Arc::new(AtomicBool::new(false));
    let progress = Arc::new(AtomicU64::new(0));
    let load = tokio::spawn(client_load(client, Arc::clone(&stop), Arc::clone(&progress)));
    super::cluster_support::eventually(
        "the consumer receives the client's first messages",
        FAILOVER,
        || async { inbox.len() >= 10 },
    )
    .await;

    // 2. The leader stopped: a partition. The others elect a leader; the producer goes on.
    signal(set.child(first), libc_sig::STOP);
    let rest: Vec<usize> = all.iter().copied().filter(|i| *i != first).collect();
    let t = Instant::now();
    model.send(&set, &rest, 1).await;
    eprintln!("replicas: first send answered {:?} after the leader stopped", t.elapsed());
    model.send(&set, &rest, 40 + rng.below(40)).await;
    signal(set.child(first), libc_sig::CONT);
    let leader = set.leader(&rest).await;
    caught_up(&set, first, leader).await;

    // 3. Leaders killed at seeded points while the producer sends, each replaced by a new,
    //    empty replica that the set catches up (from an image of its state) and takes in.
    let mut live: Vec<usize> = all.to_vec();
    for kill in 0..LEADER_KILLS {
        // The replica that just answered a send leads (the route may still name a deposed one
        // for a moment).
        model.send(&set, &live, 1).await;
        let leader = model.last_acked_by;
        let mut child = set.replicas[leader].child.take().expect("the leader");
        let delay = Duration::from_millis(rng.below(300));
        let killer = tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            let _ = child.kill();
            let at = Instant::now();
            let _ = child.wait();
            at
        });
        // Sends go on through the kill: some reach the leader as it dies.
        model.send(&set, &live, 20 + rng.below(30)).await;
        let killed_at = killer.await.expect("the leader killed");
        live.retain(|i| *i != leader);
        model.send(&set, &live, 1).await;
        let back = model.acked_at.iter().find(|t| **t > killed_at).map(|t| *t - killed_at);
        eprintln!(
            "replicas: kill {}: replica {} killed {delay:?} into a burst; first send answered after it: {back:?} later; the real client's acknowledged sends so far: {}",
            kill + 1,
            set.replicas[leader].id,
            progress.load(Ordering::Relaxed),
        );
        let joined = set.rejoin(leader, &live).await;
        live.push(joined);
        model.send(&set, &live, 10 + rng.below(20)).await;
        for i in &live {
            check(&set, *i, &model).await;
        }
    }

    // A stopped (or slow) follower does not hold the leader up: the leader and the other
    // follower are a quorum, and every send is still answered; the stopped one catches up.
    model.send(&set, &live, 1).await;
    let leader = model.last_acked_by;
    let slow = live.iter().copied().find(|i| *i != leader).expect("a follower");
    signal(set.child(slow), libc_sig::STOP);
    let t = Instant::now();
    model.send(&set, &live, 30).await;
    eprintln!(
        "replicas: 30 sends with replica {} stopped took {:?}",
        set.replicas[slow].id,
        t.elapsed()
    );
    signal(set.child(slow), libc_sig::CONT);
    caught_up(&set, slow, leader).await;

    // 4. A follower killed and replaced too.
    model.send(&set, &live, 1).await;
    let leader = model.last_acked_by;
    let follower = live.iter().copied().find(|i| *i != leader).expect("a follower");
    let mut child = set.replicas[follower].child.take().expect("a follower");
    let _ = child.kill();
    let _ = child.wait();
    live.retain(|i| *i != follower);
    model.send(&set, &live, 20 + rng.below(20)).await;
    let joined = set.rejoin(follower, &live).await;
    live.push(joined);
    model.send(&set, &live, 10).await;

    // 5. Every acknowledged message and commit on every replica, identical; routed as a set.
    let leader = check_identical(&set, &live, &model, "every replica holds identical queues").await;
    let followers: Vec<u64> =
        live.iter().filter(|i| **i != leader).map(|i| set.replicas[*i].id).collect();
    routed_as(&set, &followers).await;
    // The admin's topic, created before any of these replicas but the first ones joined, is on
    // every one of them (by log or image) with its 6 queues.
    for i in &live {
        let id = set.replicas[*i].id;
        assert!(has_admin_topic(set.replicas[*i].addr).await, "replica {id} has the admin's topic");
        assert!(has_admin_group(set.replicas[*i].addr).await, "replica {id} has the admin's group");
    }

    // 6. Below quorum: refused, then taken again.
    model.send(&set, &live, 1).await;
    let leader = model.last_acked_by;
    let other = live.iter().copied().find(|i| *i != leader).expect("a follower");
    let third = live.iter().copied().find(|i| *i != leader && *i != other).expect("another");
    signal(set.child(other), libc_sig::STOP);
    signal(set.child(third), libc_sig::STOP);
    eprintln!(
        "replicas: below quorum: replicas {} and {} stopped, a send to {}",
        set.replicas[other].id, set.replicas[third].id, set.replicas[leader].id
    );
    let refused = send_to(set.replicas[leader].addr, 1, "below-quorum").await;
    assert!(
        matches!(refused, Outcome::Refused(c, _) if c == code::SERVICE_NOT_AVAILABLE),
        "a set below quorum refuses a send with SERVICE_NOT_AVAILABLE: {refused:?}"
    );
    model.unsure.insert("below-quorum".into());
    signal(set.child(other), libc_sig::CONT);
    signal(set.child(third), libc_sig::CONT);
    model.send(&set, &live, 10).await;
    let leader = check_identical(&set, &live, &model, "identical after the partition healed").await;

    // The real client: every message it was told SEND_OK is at its queue and offset on every
    // replica (identical there), and its consumer, which went on through every failover by
    // itself, received each of them at that place.
    // The producer goes on by itself after the last failover and the healed partition.
    let before = progress.load(Ordering::Relaxed);
    let resumed = super::cluster_support::eventually(
        "the real producer's sends are acknowledged again",
        Duration::from_secs(60),
        || async { progress.load(Ordering::Relaxed) >= before + 20 },
    )
    .await;
    stop.store(true, Ordering::Relaxed);
    let (mut client, log) = load.await.expect("the client's load");
    let stopped = Instant::now();
    let held = check_client(&set, leader, &log).await;
    for i in live.iter().copied().filter(|i| *i != leader) {
        assert_eq!(
            check_client(&set, i, &log).await,
            held,
            "identical client topic on every replica"
        );
    }
    let want: BTreeSet<(u64, i32, i64)> =
        log.acked.iter().map(|(s, (q, o))| (*s, *q, *o)).collect();
    let took = super::cluster_support::eventually(
        "the consumer receives every acknowledged message of the client",
        Duration::from_secs(90),
        || {
            let (want, inbox) = (&want, &inbox);
            async move {
                let got: BTreeSet<(u64, i32, i64)> =
                    inbox.snapshot().iter().map(|d| (d.seq, d.queue, d.offset)).collect();
                want.is_subset(&got)
            }
        },
    )
    .await;
    let received = super::cluster_support::receipt_counts(&inbox.snapshot());
    eprintln!(
        "replicas: the real client: {} messages acknowledged, {} failures reported (each sent again), all received {:?} after the load stopped ({took:?} of waiting), {} received more than once; 20 more acknowledged {resumed:?} after the end",
        log.acked.len(),
        log.failed.values().sum::<u32>(),
        stopped.elapsed(),
        received.values().filter(|n| **n > 1).count()
    );
    consumer.shutdown().await;
    client.shutdown().await;

    // 7. An admin's view and membership change (`baiji replica`), through a follower's port.
    let leader = set.leader(&live).await;
    let asked = live.iter().copied().find(|i| *i != leader).expect("a follower");
    let removed = live.iter().copied().find(|i| *i != leader && *i != asked).expect("another");
    let (ok, out) = replica_cli(&["status", "--peer", &set.replicas[asked].raft]);
    assert!(ok, "status is answered: {out}");
    eprintln!("replicas: baiji replica status:\n{out}");
    let leader_id = set.replicas[leader].id;
    assert!(
        out.contains(&format!("leader: {leader_id}\n")),
        "the follower knows the leader: {out}"
    );
    let mut ids: Vec<u64> = live.iter().map(|i| set.replicas[*i].id).collect();
    ids.sort_unstable();
    let voters: Vec<String> = ids
        .iter()
        .map(|id| {
            let i = live.iter().copied().find(|i| set.replicas[*i].id == *id).expect("live");
            format!("{id}={}", set.replicas[i].raft)
        })
        .collect();
    assert!(out.contains(&format!("voters: {}\n", voters.join(";"))), "the voters: {out}");
    let (ok, out) = replica_cli(&["remove", "999", "--peer", &set.replicas[asked].raft]);
    assert!(
        !ok && out.contains("replica 999 is not in the set"),
        "an unknown id is refused: {out}"
    );
    let mut wrong = Command::new(env!("CARGO_BIN_EXE_baiji"));
    wrong.args([
        "replica",
        "status",
        "--peer",
        &set.replicas[asked].raft,
        "--replica-secret",
        "wrong",
    ]);
    let o = wrong.output().expect("baiji replica runs");
    assert!(!o.status.success(), "a wrong secret gets no status");
    let removed_id = set.replicas[removed].id;
    let (ok, out) =
        replica_cli(&["remove", &removed_id.to_string(), "--peer", &set.replicas[asked].raft]);
    assert!(ok, "the leader removes replica {removed_id}: {out}");
    let mut left: Vec<u64> = ids.iter().copied().filter(|id| *id != removed_id).collect();
    left.sort_unstable();
    let left: Vec<String> = left.iter().map(u64::to_string).collect();
    assert!(out.contains(&format!("voters: {}", left.join(","))), "two voters left: {out}");
    let deadline = Instant::now() + FAILOVER;
    loop {
        let (_, text) = super::metrics::http_get(set.replicas[leader].metrics, "/metrics").await;
        if text.lines().any(|l| l.starts_with("baiji_replica_voters{") && l.ends_with(" 2")) {
            break;
        }
        assert!(Instant::now() < deadline, "the leader counts 2 voters:\n{text}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Two voters of two: sends are still held (both must answer).
    live.retain(|i| *i != removed);
    model.send(&set, &live, 5).await;
    let held = check(&set, leader, &model).await;
    caught_up(&set, asked, leader).await;
    assert_eq!(check(&set, asked, &model).await, held, "identical after the removal");
    eprintln!(
        "replicas: {} messages acknowledged, {} sent again after no answer, {} commits, {} replicas started",
        model.acked.len(),
        model.unsure.len(),
        model.commits.len(),
        set.replicas.len()
    );
}

/// Runs `baiji replica ARGS` with the suite's secret; whether it succeeded, and its output
/// (standard output, then error).
fn replica_cli(args: &[&str]) -> (bool, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_baiji"))
        .arg("replica")
        .args(args)
        .args(["--replica-secret", SECRET])
        .output()
        .expect("baiji replica runs");
    let text =
        format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    (o.status.success(), text)
}

/// Waits until the name server routes the set as `brokerId 0` and exactly `followers`.
async fn routed_as(set: &Set, followers: &[u64]) {
    let mut want: Vec<u64> = followers.to_vec();
    want.push(0);
    want.sort_unstable();
    let deadline = Instant::now() + FAILOVER;
    loop {
        let routed = set.routed().await;
        let ids: Vec<u64> = routed.keys().copied().collect();
        if ids == want {
            return;
        }
        assert!(Instant::now() < deadline, "the name server routes ids {want:?}: {routed:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// `replica-tls`: the replica ports speak TLS only, with certificates both ways.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_broker_set_with_replica_tls_should_replicate_over_tls_and_refuse_plaintext_peers()
{
    let pki = super::tls::Pki::new();
    let file = |name: &str| pki.dir.join(name).display().to_string();
    let tls = vec![
        "--replica-tls".to_owned(),
        "--tls-cert".to_owned(),
        file("server.pem"),
        "--tls-key".to_owned(),
        file("server.key"),
        "--tls-client-ca".to_owned(),
        file("ca.pem"),
    ];
    let set = start_set_with(tls, "-tls").await;
    let all = [0usize, 1, 2];
    let mut model = Model::default();
    // Acknowledged only once a follower holds it: the Raft traffic goes over TLS.
    model.send(&set, &all, 8).await;
    let leader = model.last_acked_by;
    for i in all.iter().copied().filter(|i| *i != leader) {
        caught_up(&set, i, leader).await;
    }
    check(&set, leader, &model).await;

    // A peer without TLS gets no answer: a status request in a plain frame is answered with a
    // TLS alert record (content type 21) at most, then the connection is closed.
    let mut plain = TcpStream::connect(set.replicas[leader].raft.as_str()).await.expect("connect");
    plain.write_all(&[0, 0, 0, 1, 6]).await.expect("write");
    let mut got = Vec::new();
    let read =
        tokio::time::timeout(CALL, plain.read_to_end(&mut got)).await.expect("closed in time");
    assert!(
        got.is_empty() || got[0] == 21,
        "a plaintext peer gets no answer, only a TLS alert: {got:?} ({read:?})"
    );

    // `baiji replica` with the CA and a certificate from it, and without.
    let raft = set.replicas[leader].raft.clone();
    let args = ["status", "--peer", &raft];
    let (ok, out) = replica_cli(
        &[
            &args[..],
            &["--tls-ca", &file("ca.pem"), "--tls-cert", &file("server.pem")],
            &["--tls-key", &file("server.key")],
        ]
        .concat(),
    );
    assert!(ok && out.contains(": Leader\n"), "status over TLS: {out}");
    let (ok, out) = replica_cli(&args);
    assert!(!ok, "no status without TLS: {out}");
}
