//! Replicated broker sets (issue 27, its first step): three real `baiji broker` processes with
//! one broker name and `--replica-peers`, registered with a real `baiji namesrv`, driven with raw
//! frames over loopback as a producer and a committing consumer would.
//!
//! The run, with seeded load lengths (`BAIJI_REPLICA_SEED` replays them):
//! 1. the set elects a leader, which the name server routes as `brokerId 0`, the followers under
//!    their replica ids; sends to a follower are refused with `SERVICE_NOT_AVAILABLE`;
//! 2. the leader is stopped (SIGSTOP: a partition); the producer finds the new `brokerId 0` in
//!    the route and goes on; the old leader, continued, follows and catches up;
//! 3. the leader is killed (SIGKILL) while the producer sends; the producer goes on with the new
//!    leader;
//! 4. every acknowledged message is at its queue and offset on both survivors, once (a message
//!    whose send got no answer may be there twice: at-least-once), both survivors hold identical
//!    queues, and every acknowledged commit reads back;
//! 5. with one of the two survivors stopped the set is below quorum: a send is refused with
//!    `SERVICE_NOT_AVAILABLE` (which producers retry on another broker), and taken again once it
//!    continues.

use std::collections::{BTreeMap, HashSet};
use std::path::Path;
use std::process::{Child, Command, Stdio};

use baiji::remoting::client::Connection;
use baiji::remoting::header::{SendMessageRequestHeader, UpdateConsumerOffsetRequestHeader};

use super::restart::{free_port, wait_listening, StoreDir};
use super::*;

use super::crash_suite::rng::Rng;

const DEFAULT_SEED: u64 = 0x0027_5EED;
const TOPIC: &str = "RepA";
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
}

struct Set {
    replicas: Vec<Replica>,
    /// The consumer's heartbeat connections, one per replica (a RocketMQ client heartbeats
    /// every broker of a set), kept open so the group stays known.
    _heartbeats: Vec<Connection>,
    namesrv: Child,
    namesrv_addr: SocketAddr,
    logs: StoreDir,
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

fn log_file(dir: &Path, name: &str) -> Stdio {
    std::fs::create_dir_all(dir).expect("the log directory");
    Stdio::from(std::fs::File::create(dir.join(name)).expect("a log file"))
}

async fn start_set() -> Set {
    let logs = StoreDir::new("replicas-logs");
    let namesrv_addr = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let mut namesrv = Command::new(env!("CARGO_BIN_EXE_baiji"))
        .args(["namesrv", "--listen", &namesrv_addr.to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log_file(&logs.0, "namesrv.log"))
        .spawn()
        .expect("spawn the name server");
    assert!(wait_listening(&mut namesrv, namesrv_addr, PATIENCE).await.is_none());
    let raft: Vec<u16> = (0..3).map(|_| free_port()).collect();
    let peers = (0..3).map(|i| format!("{}=127.0.0.1:{}", i + 1, raft[i])).collect::<Vec<_>>();
    let peers = peers.join(";");
    let mut replicas = Vec::new();
    for i in 0..3 {
        let addr = SocketAddr::from(([127, 0, 0, 1], free_port()));
        let child = Command::new(env!("CARGO_BIN_EXE_baiji"))
            .arg("broker")
            .args(["--listen", &addr.to_string(), "--no-namesrv"])
            .args(["--namesrv-addr", &namesrv_addr.to_string()])
            .args(["--grpc-listen", "off", "--fast-listen-port", "0"])
            .args(["--broker-name", BROKER_NAME])
            .args(["--replica-id", &(i + 1).to_string(), "--replica-peers", &peers])
            .args(["--retention-secs", "3600", "--keep-acknowledged-secs", "3600"])
            .env("RUST_LOG", "info,openraft=warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log_file(&logs.0, &format!("replica-{}.log", i + 1)))
            .spawn()
            .expect("spawn a replica");
        replicas.push(Replica { child: Some(child), addr });
    }
    let mut heartbeats = Vec::new();
    for r in &mut replicas {
        let child = r.child.as_mut().expect("a started replica");
        assert!(wait_listening(child, r.addr, PATIENCE).await.is_none(), "replica listens");
        let mut c = Connection::connect(r.addr, CALL).await.expect("a connection");
        let hb = c.call(heartbeat_request("rep_consumer", GROUP, TOPIC)).await.expect("answered");
        assert_eq!(hb.code, code::SUCCESS, "a heartbeat is taken: {hb:?}");
        heartbeats.push(c);
    }
    Set { replicas, _heartbeats: heartbeats, namesrv, namesrv_addr, logs }
}

impl Set {
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
                self.logs.0.display()
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
    let h = SendMessageRequestHeader {
        producer_group: "rep_producer",
        topic: TOPIC,
        default_topic: "TBW102",
        default_topic_queue_nums: QUEUES,
        queue_id: queue,
        sys_flag: 0,
        born_timestamp: 1,
        flag: 0,
        properties: &props,
        reconsume_times: 0,
        unit_mode: false,
        max_reconsume_times: None,
        batch: false,
        broker_name: None,
    };
    let mut ext = ExtFields::new();
    h.write_ext_fields_as(&mut ext, SendHeaderVersion::V2);
    request(rc::SEND_MESSAGE_V2, ext).with_body(body.as_bytes().to_vec())
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

/// Every message of every queue of the topic on the replica at `addr`: queue → offset → body.
async fn contents(addr: SocketAddr) -> BTreeMap<i32, BTreeMap<i64, String>> {
    let mut c =
        Connection::connect(addr, CALL).await.expect("a live replica").with_call_timeout(CALL);
    let mut out = BTreeMap::new();
    for q in 0..QUEUES {
        let mut queue = BTreeMap::new();
        let mut at = 0i64;
        loop {
            let mut cmd = pull_request("rep_reader", TOPIC, q, at, 0, pull_sys_flag::SUBSCRIPTION);
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

/// Checks the replica at `i` against the model: every acknowledged message at its place, each
/// message once unless its send went unanswered, every acknowledged commit held.
async fn check(set: &Set, i: usize, model: &Model) -> BTreeMap<i32, BTreeMap<i64, String>> {
    let held = contents(set.replicas[i].addr).await;
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_broker_set_of_three_when_its_leader_is_stopped_then_killed_should_keep_every_acknowledged_message_and_commit(
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
    let first = set.leader(&all).await;
    model.send(&set, &all, 40 + rng.below(40)).await;
    let deadline = Instant::now() + FAILOVER;
    loop {
        let routed = set.routed().await;
        let ids: Vec<u64> = routed.keys().copied().collect();
        let followers: Vec<u64> =
            all.iter().filter(|i| **i != first).map(|i| *i as u64 + 1).collect();
        if ids == [0, followers[0], followers[1]] {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the name server routes ids 0, {followers:?}: {routed:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let follower = all.iter().copied().find(|i| *i != first).expect("a follower");
    match send_to(set.replicas[follower].addr, 0, "to-a-follower").await {
        Outcome::Refused(c, _) => {
            assert_eq!(c, code::SERVICE_NOT_AVAILABLE, "a follower refuses sends")
        }
        other => panic!("a follower refuses sends: {other:?}"),
    }

    // 2. The leader stopped: a partition. The others elect a leader; the producer goes on.
    signal(set.child(first), libc_sig::STOP);
    let rest: Vec<usize> = all.iter().copied().filter(|i| *i != first).collect();
    let t = Instant::now();
    model.send(&set, &rest, 1).await;
    eprintln!("replicas: first send answered {:?} after the leader stopped", t.elapsed());
    model.send(&set, &rest, 40 + rng.below(40)).await;
    signal(set.child(first), libc_sig::CONT);
    let second = set.leader(&rest).await;
    caught_up(&set, first, second).await;

    // 3. The leader killed while the producer sends.
    let survivors: Vec<usize> = all.iter().copied().filter(|i| *i != second).collect();
    let before = 20 + rng.below(40);
    model.send(&set, &all, before).await;
    let mut killed = set.replicas[second].child.take().expect("the leader");
    let _ = killed.kill();
    let _ = killed.wait();
    let t = Instant::now();
    model.send(&set, &survivors, 1).await;
    eprintln!("replicas: first send answered {:?} after the leader was killed", t.elapsed());
    model.send(&set, &survivors, 40 + rng.below(40)).await;

    // 4. Every acknowledged message and commit on both survivors, identical.
    let third = set.leader(&survivors).await;
    let other = survivors.iter().copied().find(|i| *i != third).expect("a follower");
    caught_up(&set, other, third).await;
    let a = check(&set, third, &model).await;
    let b = check(&set, other, &model).await;
    assert_eq!(a, b, "both survivors hold identical queues");

    // 5. Below quorum: refused, then taken again.
    signal(set.child(other), libc_sig::STOP);
    let refused = send_to(set.replicas[third].addr, 1, "below-quorum").await;
    assert!(
        matches!(refused, Outcome::Refused(c, _) if c == code::SERVICE_NOT_AVAILABLE),
        "a set below quorum refuses a send with SERVICE_NOT_AVAILABLE: {refused:?}"
    );
    model.unsure.insert("below-quorum".into());
    signal(set.child(other), libc_sig::CONT);
    model.send(&set, &survivors, 10).await;
    let a = check(&set, third, &model).await;
    caught_up(&set, other, third).await;
    let b = check(&set, other, &model).await;
    assert_eq!(a, b, "both survivors hold identical queues after the partition healed");
    eprintln!(
        "replicas: {} messages acknowledged, {} sent again after no answer, {} commits",
        model.acked.len(),
        model.unsure.len(),
        model.commits.len()
    );
}
