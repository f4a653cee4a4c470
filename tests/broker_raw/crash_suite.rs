//! The restart suite of issue 26: the real binary on a `--store-path-root-dir`, under a mixed
//! load of raw frames from concurrent connections (sync sends, batches, commits, queries and
//! read-back pulls), is killed with SIGKILL at seeded points and started again with the same
//! command on the same directory and ports, 22 times in one run. A model keeps everything the
//! broker acknowledged; after every restart each acknowledged message must be at its queue and
//! offset, intact (body, flag, the properties sent, born time, and the store time and msgId first
//! read), every acknowledged commit must read back, a batch must be whole or absent, a send that
//! got no answer may be present only intact and once, and no new send may take an offset that
//! held an acknowledged message. The load's groups subscribe to the topics and commit, so the
//! broker runs with `--keep-acknowledged-secs` (and `--retention-secs`) of an hour: nothing it
//! acknowledged may be freed during the run, before or after a restart.
//!
//! Each kill waits, once the cycle's seeded load time has passed, for the next send (or pop, or
//! POP ack) to be written, then SIGKILLs the broker a seeded 0–600 µs later from the sender's thread: while the
//! broker reads, stores or answers that send. Cycle 0 checks the model against the live broker
//! before any kill (the harness's own sanity check). `BAIJI_CRASH_SEED` (decimal or `0x` hex)
//! replays a run's choices (load mix, kill points; the interleaving of the connections is the
//! machine's), `BAIJI_CRASH_KILLS` changes the number of kills (22).
//!
//! The load also sends what the broker delivers later, from its own tables: timer messages
//! (`TIMER_DELAY_MS` or `TIMER_DELIVER_MS`, 0.3 to 3 s ahead) and delay-level-1 messages (1 s) to
//! `CrashTimed`, and half messages to `CrashTx` from a producer connection that heartbeats its
//! group and answers `CHECK_TRANSACTION_STATE` from the model. Each transaction's fate is drawn
//! at its send: committed or rolled back by an `END_TRANSACTION` right after the answer, or by
//! the answer to its first check, or left unknown at its first check and committed at the next.
//! After every restart each record of `CrashTimed` and `CrashTx` must be a delivery of a message
//! the suite sent, in the queue it was sent to and intact (body, flag, born time, the properties
//! sent but the scheduling ones); a timer or delay-level message stored no earlier than its due
//! time (the clock read before its send was written plus its delay, and its `TIMER_OUT_MS`); never
//! a rolled-back transaction; and every delivery read by an earlier check still at its place with
//! its store time. A message delivered twice is allowed only as docs/restarts.md's at-least-once
//! window (a crash between a delivery's append and its journal record): its first copy stored
//! before a restart and its second after it, the first being the last delivery of its kind
//! (timers, delay levels, commits) stored before that kill, and at most one such duplicate per
//! kind per kill. The last cycle ends with a settle phase (the producer connected again, up to
//! 30 s) after which every answered timer and delay-level message and every answered transaction
//! meant to commit must have been delivered.
//!
//! POP with acknowledgements runs beside the sends on its own connection: the group
//! `crash_pop` pops every queue of `CrashPop` (one of the topics the load sends to) with raw
//! `POP_MESSAGE` frames, a 2–4 s invisible time and up to 16 messages at a time, acknowledges
//! 85 % of what it pops at once (`ACK_MESSAGE` by the receipt) and leaves the rest to come back
//! (from the group's retry topic); its pops and acks fire an armed kill too. Each delivery is
//! checked as it is read, against every earlier one of its UNIQ_KEY, so the first pops after a
//! restart check what the restart kept: a copy (topic, queue, offset) whose ack was answered
//! SUCCESS more than 100 ms (`POP_SLACK_MS`) before its invisible time ended is never popped
//! again, nor another copy of that message unless both are retry copies stored on both sides of
//! a restart (docs/restarts.md's revive made twice across a crash, counted); a message popped
//! and not acknowledged (left, or its ack cut by a kill) is not popped again before its pop time
//! (the answer's `popTime`) plus its invisible time, less 100 ms of slack, measured at the
//! moment the redelivering pop's answer was read; an ack of a current receipt within its
//! invisible time is not refused. The settle phase also pops until every message held in
//! `CrashPop` has been popped at least once, which the last check requires.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::path::Path;
use std::process::Child;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use baiji::remoting::header::{
    AckMessageRequestHeader, FromExtFields, PopMessageRequestHeader, PopMessageResponseHeader,
    SendMessageRequestHeader, UpdateConsumerOffsetRequestHeader,
};
use baiji::remoting::message::{encode_batch_entry, sys_flag, DecodedMessage};
use baiji::remoting::msgid::decode_offset_msg_id;
use bytes::Bytes;

use super::restart::{binary_command, free_port, wait_listening, StoreDir};
use super::*;

#[path = "../common/rng.rs"]
pub(super) mod rng;
use rng::Rng;

const DEFAULT_SEED: u64 = 0x0026_C0DE_5EED;
const DEFAULT_KILLS: usize = 22;
/// The topic the POP group consumes (the load sends to it as to the others).
const POP_TOPIC: &str = "CrashPop";
/// The topics and their queues.
const TOPICS: [(&str, i32); 4] = [("CrashA", 4), ("CrashB", 3), ("CrashC", 2), (POP_TOPIC, 2)];
/// The POP consumer group, and its retry topic (where an expired message is revived).
const POP_GROUP: &str = "crash_pop";
const POP_RETRY: &str = "%RETRY%crash_pop_CrashPop";
/// Clock slack of the POP checks (ms): a message is early only if it came back more than this
/// before its pop time plus invisible time, and an ack proves something only if it was
/// answered more than this before it.
const POP_SLACK_MS: i64 = 100;
/// Percent of the POP deliveries acknowledged (the others are left to come back).
const POP_ACK_PERCENT: u64 = 85;
/// Where timer and delay-level messages are delivered, and its queues.
const TIMED: (&str, i32) = ("CrashTimed", 2);
/// Where committed transactions are delivered, and its queues.
const TX: (&str, i32) = ("CrashTx", 2);
/// The transactions' producer group.
const TX_GROUP: &str = "crash_tx_producer";
/// Properties a delivery may drop or rewrite: not compared with the send.
const SCHEDULING: [&str; 5] = ["DELAY", "TIMER_DELAY_MS", "TIMER_DELIVER_MS", "TRAN_MSG", "PGROUP"];
/// Concurrent connections sending (each also commits for its own group and reads back).
const WORKERS: u64 = 3;
/// Flags beyond `binary_command`'s: nothing is freed by age or by acknowledgement while the
/// suite runs, and a check pulls up to 1024 messages at once. An undecided half message is
/// checked 1 s after its store, passes run every 500 ms, and no check count moves one away.
const BROKER_FLAGS: [&str; 14] = [
    "--retention-secs",
    "3600",
    "--keep-acknowledged-secs",
    "3600",
    "--max-transfer-count-on-message-in-memory",
    "1024",
    "--max-transfer-bytes-on-message-in-memory",
    "8m",
    "--transaction-time-out",
    "1000",
    "--transaction-check-interval",
    "500",
    "--transaction-check-max",
    "1000000",
];
/// Longest the settle phase waits for the last deliveries.
const SETTLE: Duration = Duration::from_secs(30);
/// Messages asked per pull of a check.
const SCAN_BATCH: i32 = 1024;
const READER_GROUP: &str = "crash_reader";

/// Where the suite is, for every message it prints.
#[derive(Clone, Copy)]
struct Ctx {
    seed: u64,
    cycle: usize,
}

impl Ctx {
    /// "after restart" or, in cycle 0, "on the live broker before any kill".
    fn when(&self) -> String {
        if self.cycle == 0 {
            "on the live broker before any kill".into()
        } else {
            "after restart".into()
        }
    }
}

impl fmt::Display for Ctx {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "seed {:#x}, cycle {}", self.seed, self.cycle)
    }
}

/// One message as it was sent.
#[derive(Debug, Clone)]
struct Sent {
    uniq: String,
    topic: &'static str,
    queue: i32,
    body: Bytes,
    flag: i32,
    born: i64,
    /// The properties sent (the broker may add its own).
    props: Vec<(String, String)>,
    cycle: usize,
    /// `(index, length)` of its batch.
    batch: Option<(usize, usize)>,
}

impl Sent {
    fn describe(&self) -> String {
        let batch = match self.batch {
            Some((i, n)) => format!(", message {} of a batch of {n}", i + 1),
            None => String::new(),
        };
        format!("UNIQ_KEY {}, sent in cycle {}{batch}", self.uniq, self.cycle)
    }
}

/// A message the model knows the broker holds.
#[derive(Debug)]
struct Held {
    sent: Sent,
    /// The msgId of the send's answer (`None`: the send was not answered, the message was
    /// found after a restart).
    msg_id: Option<String>,
    /// The store timestamp of its first read.
    store_ts: Option<i64>,
}

impl Held {
    fn describe(&self) -> String {
        match &self.msg_id {
            Some(id) => format!("{}, answered msgId {id}", self.sent.describe()),
            None => format!("{} (not answered; found after a restart)", self.sent.describe()),
        }
    }
}

/// The last acknowledged commit of a (group, topic, queue), and one sent but not answered.
#[derive(Debug, Clone, Copy, Default)]
struct Commit {
    acked: Option<i64>,
    pending: Option<i64>,
}

/// What delivers a message later: the kinds of the at-least-once window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum Kind {
    Timer,
    Level,
    Commit,
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Kind::Timer => "timer",
            Kind::Level => "delay-level",
            Kind::Commit => "transaction commit",
        })
    }
}

/// A timer or delay-level message sent.
#[derive(Debug)]
struct Timed {
    sent: Sent,
    kind: Kind,
    /// Epoch ms before it was earliest due: the clock read before its send was written plus
    /// its delay (or its `TIMER_DELIVER_MS`).
    due: i64,
    answered: bool,
}

/// How a transaction ends (drawn at its send).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fate {
    /// `END_TRANSACTION` commit right after the answer (and commit at any check).
    EndCommit,
    /// `END_TRANSACTION` rollback right after the answer (and rollback at any check).
    EndRollback,
    /// Committed by the answer to its first check.
    CheckCommit,
    /// Rolled back by the answer to its first check.
    CheckRollback,
    /// Unknown at its first check, committed at the next.
    UnknownThenCommit,
}

impl Fate {
    fn commits(self) -> bool {
        matches!(self, Fate::EndCommit | Fate::CheckCommit | Fate::UnknownThenCommit)
    }
}

/// A half message sent.
#[derive(Debug)]
struct Tx {
    sent: Sent,
    fate: Fate,
    answered: bool,
    /// Its first check was answered unknown.
    unknown_given: bool,
    /// A check found its committed copy.
    delivered: bool,
}

/// Where a delivered copy is: topic, queue, offset.
type Place = (&'static str, i32, i64);

/// A delivered copy a check read.
#[derive(Debug)]
struct Delivered {
    uniq: String,
    kind: Kind,
    store_ts: i64,
    /// The cycle of the check that first read it.
    seen: usize,
}

/// What became of a POP delivery's receipt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ack {
    /// Left unacknowledged on purpose: it must come back, not before its invisible time.
    Left,
    /// Written but not answered (the broker was killed): it may come back or not.
    InFlight,
    /// Answered SUCCESS at this epoch ms, more than [`POP_SLACK_MS`] before its invisible time
    /// ended: that copy must never be popped again.
    Acked(i64),
    /// Answered only near or after the end of its invisible time: proves nothing.
    Late,
}

/// One delivery of a message by POP.
#[derive(Debug, Clone)]
struct Delivery {
    /// Where the popped copy is (`CrashPop` or the group's retry topic).
    place: Place,
    store_ts: i64,
    cycle: usize,
    /// The pop time of its pop's answer (the receipt's; the broker's clock, epoch ms).
    pop_time: i64,
    invisible: i64,
    /// Epoch ms when the pop's answer was read.
    read_at: i64,
    ack: Ack,
}

impl Delivery {
    /// When it may come back.
    fn deadline(&self) -> i64 {
        self.pop_time + self.invisible
    }

    fn describe(&self) -> String {
        let (t, q, o) = self.place;
        let ack = match self.ack {
            Ack::Left => "left unacknowledged".to_owned(),
            Ack::InFlight => "its ack unanswered at a kill".to_owned(),
            Ack::Acked(at) => format!("acknowledged, answered SUCCESS at {at}"),
            Ack::Late => "acknowledged late".to_owned(),
        };
        format!(
            "popped from {t}/{q} offset {o} in cycle {} with pop time {} and invisible time {} ms \
             (until {}), {ack}",
            self.cycle,
            self.pop_time,
            self.invisible,
            self.deadline()
        )
    }
}

/// Two copies of a message in the retry topic, stored on both sides of a restart: the
/// revive copy docs/restarts.md allows to be made twice across a crash.
fn revived_twice(a: &Delivery, b: &Delivery, restarts: &[(usize, i64)]) -> bool {
    let (lo, hi) = (a.store_ts.min(b.store_ts), a.store_ts.max(b.store_ts));
    a.place.0 == POP_RETRY
        && b.place.0 == POP_RETRY
        && a.place != b.place
        && restarts.iter().any(|&(_, spawned)| lo < spawned && spawned <= hi)
}

#[derive(Debug, Default)]
struct Stats {
    sends: u64,
    batches: u64,
    batch_messages: u64,
    commits: u64,
    reads: u64,
    queries: u64,
    timers: u64,
    levels: u64,
    halves: u64,
    ends: u64,
    checks: u64,
    unknown_answers: u64,
    /// Checks of a transaction whose committed copy a check had found (the window's case).
    checks_after_delivery: u64,
    /// POP requests answered with messages, the messages they delivered, and of those the
    /// redeliveries, the acks answered in time, the late ones and those left unacknowledged.
    pops: u64,
    popped: u64,
    pop_redeliveries: u64,
    pop_acks: u64,
    pop_late_acks: u64,
    pop_left: u64,
    /// Retry copies of one message made on both sides of a restart (the revive window).
    pop_revived_twice: u64,
}

type QueueKey = (&'static str, i32);
type CommitKey = (String, &'static str, i32);

/// Everything the broker acknowledged, and what is still undecided.
#[derive(Debug, Default)]
struct Model {
    queues: BTreeMap<QueueKey, BTreeMap<i64, Held>>,
    /// Where each held message is, by UNIQ_KEY.
    at: HashMap<String, (QueueKey, i64)>,
    /// Sends (one message or a whole batch) that got no answer before a kill.
    unknown: Vec<Vec<Sent>>,
    /// Unanswered sends found absent after a restart (by UNIQ_KEY: the cycle of that check):
    /// they must never show up later.
    lost: HashMap<String, usize>,
    commits: BTreeMap<CommitKey, Commit>,
    /// Timer and delay-level messages, by UNIQ_KEY.
    timed: HashMap<String, Timed>,
    /// Half messages, by UNIQ_KEY.
    txs: HashMap<String, Tx>,
    /// Every delivered copy a check read.
    copies: BTreeMap<Place, Delivered>,
    /// Each restart's cycle and the epoch ms at which it was spawned.
    restarts: Vec<(usize, i64)>,
    /// Every POP delivery, by UNIQ_KEY, in the order they were read.
    pops: HashMap<String, Vec<Delivery>>,
    /// What the load found wrong on the live broker.
    problems: Vec<Problem>,
    stats: Stats,
}

impl Model {
    fn hold(&mut self, ctx: Ctx, offset: i64, held: Held) {
        let key = (held.sent.topic, held.sent.queue);
        let uniq = held.sent.uniq.clone();
        let now = held.sent.describe();
        if let Some(old) = self.queues.entry(key).or_default().insert(offset, held) {
            self.problems.push(Problem::new(
                ctx,
                "an offset that held an acknowledged message was given to another",
                key,
                offset,
                format!("it held {} and now answers for {now}", old.sent.describe()),
            ));
            self.at.remove(&old.sent.uniq);
        }
        self.at.insert(uniq, (key, offset));
    }

    fn next_offset(&self, key: QueueKey) -> i64 {
        self.queues.get(&key).and_then(|q| q.keys().next_back()).map_or(0, |o| o + 1)
    }

    /// Records a POP delivery of `uniq` and checks it against the earlier ones: no copy whose
    /// ack was answered in time is popped again (another copy only as a revive made twice
    /// across a kill), and nothing comes back before the last delivery's pop time plus
    /// invisible time (less [`POP_SLACK_MS`]).
    fn popped(&mut self, ctx: Ctx, uniq: &str, d: Delivery) {
        let (t, q, o) = d.place;
        let prev = self.pops.entry(uniq.to_owned()).or_default();
        let mut revived_twice_now = false;
        for p in prev.iter() {
            let Ack::Acked(at) = p.ack else { continue };
            if revived_twice(p, &d, &self.restarts) {
                revived_twice_now = true;
                continue;
            }
            let kind = if p.place == d.place {
                "a message whose ack was answered SUCCESS was popped again"
            } else {
                "a message whose ack was answered SUCCESS was popped again as another copy"
            };
            let what = format!(
                "UNIQ_KEY {uniq}: earlier {}; popped again (answer read at {}, {} ms after the \
                 ack) in cycle {}",
                p.describe(),
                d.read_at,
                d.read_at - at,
                d.cycle
            );
            self.problems.push(Problem::new(ctx, kind, (t, q), o, what));
        }
        if let Some(last) = prev.last() {
            let early = last.deadline() - (d.read_at + POP_SLACK_MS);
            let acked = matches!(last.ack, Ack::Acked(_));
            if early > 0 && !acked && !revived_twice(last, &d, &self.restarts) {
                let what = format!(
                    "UNIQ_KEY {uniq}: earlier {}; popped again in cycle {} with its answer \
                     read at {}, {} ms before it was due (slack {POP_SLACK_MS} ms)",
                    last.describe(),
                    d.cycle,
                    d.read_at,
                    last.deadline() - d.read_at
                );
                let kind = "a popped, unacknowledged message came back before its invisible time";
                self.problems.push(Problem::new(ctx, kind, (t, q), o, what));
            }
            self.stats.pop_redeliveries += 1;
        }
        self.stats.pop_revived_twice += u64::from(revived_twice_now);
        self.stats.popped += 1;
        self.pops.entry(uniq.to_owned()).or_default().push(d);
    }
}

/// One thing found wrong.
#[derive(Debug)]
struct Problem {
    kind: String,
    line: String,
}

impl Problem {
    fn new(ctx: Ctx, kind: &str, (topic, queue): QueueKey, offset: i64, what: String) -> Problem {
        Problem {
            kind: kind.to_owned(),
            line: format!("{ctx}: {kind}: topic {topic} queue {queue} offset {offset}: {what}"),
        }
    }

    fn other(ctx: Ctx, kind: &str, what: String) -> Problem {
        Problem { kind: kind.to_owned(), line: format!("{ctx}: {kind}: {what}") }
    }
}

/// Panics with every problem (counted by kind, the first ones in full) if there is any.
fn assert_no_problems(ctx: Ctx, problems: &[Problem], checked: &Checked) {
    if problems.is_empty() {
        return;
    }
    let mut kinds: BTreeMap<&str, usize> = BTreeMap::new();
    for p in problems {
        *kinds.entry(&p.kind).or_default() += 1;
    }
    let counts: Vec<String> = kinds.iter().map(|(k, n)| format!("{n} × {k}")).collect();
    let first: Vec<&str> = problems.iter().take(15).map(|p| p.line.as_str()).collect();
    let missing = if checked.missing.is_empty() {
        String::new()
    } else {
        format!("\nmissing, by queue:\n  {}", checked.missing.join("\n  "))
    };
    panic!(
        "{ctx} (replay: BAIJI_CRASH_SEED={:#x}): {} problems {} ({checked}): {}{missing}\n\
         first ones:\n  {}",
        ctx.seed,
        problems.len(),
        ctx.when(),
        counts.join(", "),
        first.join("\n  ")
    );
}

/// A connection that may die with the broker: every call answers or says `Lost`.
struct Link {
    stream: TcpStream,
    buf: BytesMut,
    opaque: i32,
    /// `CHECK_TRANSACTION_STATE` requests read and not handled yet.
    checks: Vec<RemotingCommand>,
}

#[derive(Debug)]
struct Lost;

impl Link {
    async fn open(addr: SocketAddr) -> Result<Link, Lost> {
        let stream = TcpStream::connect(addr).await.map_err(|_| Lost)?;
        let _ = stream.set_nodelay(true);
        Ok(Link { stream, buf: BytesMut::new(), opaque: 0, checks: Vec::new() })
    }

    async fn call(&mut self, cmd: RemotingCommand) -> Result<RemotingCommand, Lost> {
        let opaque = self.send(cmd).await?;
        self.answer(opaque).await
    }

    /// Writes `cmd` with a fresh opaque, which it returns.
    async fn send(&mut self, mut cmd: RemotingCommand) -> Result<i32, Lost> {
        self.opaque += 1;
        cmd.opaque = self.opaque;
        let mut out = BytesMut::new();
        cmd.encode(&mut out).expect("an encodable command");
        self.stream.write_all(&out).await.map_err(|_| Lost)?;
        Ok(cmd.opaque)
    }

    /// The answer to the request written with `opaque` (the last one written).
    async fn answer(&mut self, opaque: i32) -> Result<RemotingCommand, Lost> {
        loop {
            if let Some(r) =
                RemotingCommand::decode(&mut self.buf).expect("the broker sends valid frames")
            {
                if r.is_response() {
                    assert_eq!(r.opaque, opaque, "an answer echoes its request's opaque");
                    return Ok(r);
                }
                self.keep_check(r);
                continue;
            }
            match tokio::time::timeout(PATIENCE, self.stream.read_buf(&mut self.buf)).await {
                Err(_) => panic!("request {opaque} was not answered within {PATIENCE:?}"),
                Ok(Ok(0) | Err(_)) => return Err(Lost),
                Ok(Ok(_)) => {}
            }
        }
    }

    /// Keeps a broker's request if it is a check (others, e.g. consumer notices, are dropped).
    fn keep_check(&mut self, r: RemotingCommand) {
        if r.code == rc::CHECK_TRANSACTION_STATE {
            self.checks.push(r);
        }
    }

    /// Reads what the broker sends for `within`, keeping its checks.
    async fn poll(&mut self, within: Duration) -> Result<(), Lost> {
        let until = tokio::time::Instant::now() + within;
        loop {
            while let Some(r) =
                RemotingCommand::decode(&mut self.buf).expect("the broker sends valid frames")
            {
                if !r.is_response() {
                    self.keep_check(r);
                }
            }
            match tokio::time::timeout_at(until, self.stream.read_buf(&mut self.buf)).await {
                Err(_) => return Ok(()),
                Ok(Ok(0) | Err(_)) => return Err(Lost),
                Ok(Ok(_)) => {}
            }
        }
    }
}

/// Where the kill waits: once armed, the next send written SIGKILLs the broker `delay` later,
/// from the sender's own thread, so the kill lands while the broker reads, stores or answers it.
#[derive(Default)]
struct Trip {
    /// The broker's pid and the delay.
    armed: Mutex<Option<(u32, Duration)>>,
    fired: tokio::sync::Notify,
}

impl Trip {
    fn sent(&self) {
        let Some((pid, delay)) = self.armed.lock().map(|mut a| a.take()).unwrap_or_default() else {
            return;
        };
        let until = std::time::Instant::now() + delay;
        while std::time::Instant::now() < until {
            std::hint::spin_loop();
        }
        let pid = libc::pid_t::try_from(pid).expect("a pid");
        // SAFETY: kill(2) with a pid of our own unreaped child (the caller reaps it after
        // `fired`) and a valid signal; it touches no memory of this process.
        let killed = unsafe { libc::kill(pid, libc::SIGKILL) };
        assert_eq!(killed, 0, "SIGKILL the broker (pid {pid})");
        self.fired.notify_one();
    }
}

/// The properties string of `props` (`k\u{1}v\u{2}` each).
fn props_string(props: &[(String, String)]) -> String {
    props.iter().map(|(k, v)| format!("{k}\u{1}{v}\u{2}")).collect()
}

fn parse_props(bytes: &[u8]) -> HashMap<String, String> {
    String::from_utf8_lossy(bytes)
        .split('\u{2}')
        .filter_map(|p| p.split_once('\u{1}'))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

fn uniq_of(r: &DecodedMessage) -> Option<String> {
    parse_props(&r.properties).remove("UNIQ_KEY")
}

/// A record read back, its properties parsed.
struct Rec {
    m: DecodedMessage,
    props: HashMap<String, String>,
}

impl Rec {
    fn new(m: DecodedMessage) -> Rec {
        let props = parse_props(&m.properties);
        Rec { m, props }
    }

    fn uniq(&self) -> Option<&str> {
        self.props.get("UNIQ_KEY").map(String::as_str)
    }
}

/// A SEND_MESSAGE_V2 (310) or SEND_BATCH_MESSAGE (320) with the V2 (one-letter) header.
fn send_cmd(code: i32, m: &Sent, properties: &str, body: Bytes) -> RemotingCommand {
    let h = SendMessageRequestHeader {
        producer_group: "crash_producer",
        topic: m.topic,
        default_topic: "TBW102",
        default_topic_queue_nums: 4,
        queue_id: m.queue,
        sys_flag: 0,
        born_timestamp: m.born,
        flag: if code == rc::SEND_BATCH_MESSAGE { 0 } else { m.flag },
        properties,
        reconsume_times: 0,
        unit_mode: false,
        max_reconsume_times: None,
        batch: code == rc::SEND_BATCH_MESSAGE,
        broker_name: None,
    };
    let mut ext = ExtFields::new();
    h.write_ext_fields_as(&mut ext, SendHeaderVersion::V2);
    request(code, ext).with_body(body)
}

fn pull_cmd(topic: &str, queue: i32, offset: i64, max: i32) -> RemotingCommand {
    let mut cmd = pull_request(READER_GROUP, topic, queue, offset, 0, pull_sys_flag::SUBSCRIPTION);
    cmd.ext_fields.insert_i64("maxMsgNums", i64::from(max));
    cmd
}

fn query_cmd(group: &str, topic: &str, queue: i32) -> RemotingCommand {
    let mut ext = ExtFields::new();
    ext.insert("consumerGroup", group);
    ext.insert("topic", topic);
    ext.insert_i64("queueId", i64::from(queue));
    ext.insert("setZeroIfNotFound", "false");
    request(rc::QUERY_CONSUMER_OFFSET, ext)
}

/// A heartbeat making `group` a clustering consumer of every topic of the suite.
fn heartbeat_cmd(client: &str, group: &str) -> RemotingCommand {
    let subs: Vec<String> = TOPICS
        .iter()
        .map(|(t, _)| {
            format!(
                r#"{{"classFilterMode":false,"topic":"{t}","subString":"*","tagsSet":[],"codeSet":[],"subVersion":1,"expressionType":"TAG"}}"#
            )
        })
        .collect();
    let body = format!(
        r#"{{"clientID":"{client}","producerDataSet":[{{"groupName":"crash_producer"}}],"consumerDataSet":[{{"groupName":"{group}","consumeType":"CONSUME_PASSIVELY","messageModel":"CLUSTERING","consumeFromWhere":"CONSUME_FROM_FIRST_OFFSET","subscriptionDataSet":[{}],"unitMode":false}}],"heartbeatFingerprint":0,"withoutSub":false}}"#,
        subs.join(",")
    );
    request(rc::HEART_BEAT, ExtFields::new()).with_body(body.into_bytes())
}

fn number(r: &RemotingCommand, key: &str) -> Option<i64> {
    r.ext_fields.get(key).and_then(|v| v.parse().ok())
}

fn epoch_ms() -> i64 {
    let since = SystemTime::now().duration_since(UNIX_EPOCH).expect("a clock after 1970");
    i64::try_from(since.as_millis()).expect("milliseconds in an i64")
}

/// UNIQ_KEYs unique in the run: 32 hex digits.
fn next_uniq(seed: u64) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!("{:016X}{:016X}", seed, NEXT.fetch_add(1, Ordering::Relaxed))
}

/// A message of the load to `key`: a random body (now and then of a few KiB), flag, tags, keys
/// and properties (some non-ASCII), its UNIQ_KEY unique in the run.
fn new_message(
    rng: &mut Rng,
    ctx: Ctx,
    worker: u64,
    (topic, queue): QueueKey,
    born: i64,
    batch: Option<(usize, usize)>,
) -> Sent {
    let uniq = next_uniq(ctx.seed);
    let len = if rng.below(20) == 0 { 2048 + rng.below(16_384) } else { 1 + rng.below(300) };
    let mut body = Vec::with_capacity(len as usize + 8);
    while body.len() < len as usize {
        body.extend_from_slice(&rng.next().to_le_bytes());
    }
    body.truncate(len as usize);
    let mut props = vec![
        ("TAGS".to_owned(), format!("Tag{}", rng.below(5))),
        ("KEYS".to_owned(), format!("k{} k{}", rng.below(1000), rng.below(1000))),
        ("UNIQ_KEY".to_owned(), uniq.clone()),
        ("WAIT".to_owned(), "true".to_owned()),
        ("crash_cycle".to_owned(), ctx.cycle.to_string()),
        ("crash_worker".to_owned(), worker.to_string()),
    ];
    for i in 0..rng.below(3) {
        let accent = if rng.below(4) == 0 { "-ünï€" } else { "" };
        props.push((format!("p{i}"), format!("{:x}{accent}", rng.next())));
    }
    if let Some((i, n)) = batch {
        props.push(("crash_batch".to_owned(), format!("{}/{n}", i + 1)));
    }
    Sent {
        uniq,
        topic,
        queue,
        body: Bytes::from(body),
        flag: rng.next() as i32,
        born,
        props,
        cycle: ctx.cycle,
        batch,
    }
}

fn born(rng: &mut Rng) -> i64 {
    1_600_000_000_000 + rng.below(300_000_000_000) as i64
}

/// One load connection.
struct Worker {
    id: u64,
    ctx: Ctx,
    rng: Rng,
    link: Link,
    group: String,
    model: Arc<Mutex<Model>>,
    trip: Arc<Trip>,
}

impl Worker {
    fn model(&self) -> std::sync::MutexGuard<'_, Model> {
        self.model.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn problem(&self, p: Problem) {
        self.model().problems.push(p);
    }

    fn pick(&mut self) -> QueueKey {
        let (topic, queues) = TOPICS[self.rng.below(TOPICS.len() as u64) as usize];
        (topic, self.rng.below(queues as u64) as i32)
    }

    fn message(&mut self, key: QueueKey, born: i64, batch: Option<(usize, usize)>) -> Sent {
        new_message(&mut self.rng, self.ctx, self.id, key, born, batch)
    }

    fn born(&mut self) -> i64 {
        born(&mut self.rng)
    }

    async fn run(mut self, stop: Arc<AtomicBool>) {
        let client = format!("127.0.0.1@crash{}", self.id);
        match self.link.call(heartbeat_cmd(&client, &self.group)).await {
            Err(Lost) => return,
            Ok(r) if r.code != code::SUCCESS => {
                let p = Problem::other(self.ctx, "heartbeat refused", format!("{r:?}"));
                return self.problem(p);
            }
            Ok(_) => {}
        }
        while !stop.load(Ordering::Relaxed) {
            // POP with acknowledgements runs beside this mix on its own connection (`PopWorker`),
            // consuming what the sends put into `CrashPop`.
            let step = match self.rng.below(100) {
                0..=49 => self.single().await,
                50..=72 => self.batch().await,
                73..=86 => self.commit().await,
                87..=91 => self.query().await,
                92..=96 => self.timed(Kind::Timer).await,
                _ => self.timed(Kind::Level).await,
            };
            if step.is_err() {
                return;
            }
            // Paced, so that a run's messages stay few enough to check them all after each
            // restart (about 1,000 per second of load; 20,000 to 25,000 in a run).
            tokio::time::sleep(Duration::from_millis(1 + self.rng.below(4))).await;
        }
    }

    /// Writes a send (firing an armed kill) and reads its answer.
    async fn send(&mut self, cmd: RemotingCommand) -> Result<RemotingCommand, Lost> {
        let opaque = self.link.send(cmd).await?;
        self.trip.sent();
        self.link.answer(opaque).await
    }

    /// A SEND_MESSAGE_V2, then a pull of it.
    async fn single(&mut self) -> Result<(), Lost> {
        let key = self.pick();
        let born = self.born();
        let m = self.message(key, born, None);
        let cmd = send_cmd(rc::SEND_MESSAGE_V2, &m, &props_string(&m.props), m.body.clone());
        let r = match self.send(cmd).await {
            Ok(r) => r,
            Err(Lost) => {
                self.model().unknown.push(vec![m]);
                return Err(Lost);
            }
        };
        let Some(offset) = self.answered(&r, key, 1) else { return Ok(()) };
        let msg_id = r.ext_fields.get("msgId").unwrap_or_default().to_owned();
        let uniq = m.uniq.clone();
        {
            let mut model = self.model();
            model.stats.sends += 1;
            model.hold(self.ctx, offset, Held { sent: m, msg_id: Some(msg_id), store_ts: None });
        }
        self.read_back(key, offset, &[uniq]).await
    }

    /// A timer message (`TIMER_DELAY_MS` or `TIMER_DELIVER_MS`, 0.3 to 3 s ahead) or a
    /// delay-level-1 message (1 s) to `CrashTimed`.
    async fn timed(&mut self, kind: Kind) -> Result<(), Lost> {
        let key = (TIMED.0, self.rng.below(TIMED.1 as u64) as i32);
        let born = self.born();
        let mut m = self.message(key, born, None);
        let delay = if kind == Kind::Level { 1000 } else { 300 + self.rng.below(2700) as i64 };
        let now = epoch_ms();
        let due = now + delay;
        m.props.push(match kind {
            Kind::Level => ("DELAY".to_owned(), "1".to_owned()),
            _ if self.rng.below(2) == 0 => ("TIMER_DELAY_MS".to_owned(), delay.to_string()),
            _ => ("TIMER_DELIVER_MS".to_owned(), due.to_string()),
        });
        let uniq = m.uniq.clone();
        let cmd = send_cmd(rc::SEND_MESSAGE_V2, &m, &props_string(&m.props), m.body.clone());
        self.model().timed.insert(uniq.clone(), Timed { sent: m, kind, due, answered: false });
        let r = self.send(cmd).await?;
        let mut model = self.model();
        if r.code == code::SUCCESS {
            match kind {
                Kind::Level => model.stats.levels += 1,
                _ => model.stats.timers += 1,
            }
            if let Some(t) = model.timed.get_mut(&uniq) {
                t.answered = true;
            }
        } else {
            let what = format!("the {kind} message UNIQ_KEY {uniq} was answered {r:?}");
            model.problems.push(Problem::other(self.ctx, "a send was refused", what));
        }
        Ok(())
    }

    /// A SEND_BATCH_MESSAGE of 2 to 6 messages, then a pull of them.
    async fn batch(&mut self) -> Result<(), Lost> {
        let key = self.pick();
        let born = self.born();
        let n = 2 + self.rng.below(5) as usize;
        let msgs: Vec<Sent> = (0..n).map(|i| self.message(key, born, Some((i, n)))).collect();
        let mut body = BytesMut::new();
        for m in &msgs {
            encode_batch_entry(&mut body, m.flag, &m.body, props_string(&m.props).as_bytes())
                .expect("an encodable batch entry");
        }
        let cmd = send_cmd(rc::SEND_BATCH_MESSAGE, &msgs[0], "WAIT\u{1}true\u{2}", body.freeze());
        let r = match self.send(cmd).await {
            Ok(r) => r,
            Err(Lost) => {
                self.model().unknown.push(msgs);
                return Err(Lost);
            }
        };
        let Some(first) = self.answered(&r, key, n) else { return Ok(()) };
        let ids: Vec<String> =
            r.ext_fields.get("msgId").unwrap_or_default().split(',').map(str::to_owned).collect();
        if ids.len() != n {
            let what = format!("the answer has {} msgIds for {n} messages: {r:?}", ids.len());
            self.problem(Problem::new(
                self.ctx,
                "a batch's answer is incomplete",
                key,
                first,
                what,
            ));
        }
        let uniqs: Vec<String> = msgs.iter().map(|m| m.uniq.clone()).collect();
        {
            let mut model = self.model();
            model.stats.batches += 1;
            model.stats.batch_messages += n as u64;
            for (i, m) in msgs.into_iter().enumerate() {
                let held = Held { sent: m, msg_id: ids.get(i).cloned(), store_ts: None };
                model.hold(self.ctx, first + i as i64, held);
            }
        }
        self.read_back(key, first, &uniqs).await
    }

    /// The offset a send was stored at, or `None` (a problem noted) if it was refused or
    /// answered oddly.
    fn answered(&self, r: &RemotingCommand, key: QueueKey, n: usize) -> Option<i64> {
        let offset = number(r, "queueOffset");
        let queue = number(r, "queueId");
        match offset {
            Some(o) if r.code == code::SUCCESS && queue == Some(i64::from(key.1)) => Some(o),
            _ => {
                let what = format!("a send of {n} message(s) was answered {r:?}");
                self.problem(Problem::other(self.ctx, "a send was refused", what));
                None
            }
        }
    }

    /// Pulls what was just acknowledged at `first..` and keeps its store timestamp.
    async fn read_back(&mut self, key: QueueKey, first: i64, uniqs: &[String]) -> Result<(), Lost> {
        let n = uniqs.len() as i32;
        let r = self.link.call(pull_cmd(key.0, key.1, first, n)).await?;
        let records = if r.code == code::SUCCESS {
            decode_records(&r.body).expect("a valid pull body")
        } else {
            Vec::new()
        };
        let mut model = self.model();
        model.stats.reads += 1;
        for (i, uniq) in uniqs.iter().enumerate() {
            let offset = first + i as i64;
            let found = records.iter().find(|m| m.queue_offset == offset);
            match found {
                Some(m) if uniq_of(m).as_deref() == Some(uniq.as_str()) => {
                    if let Some(h) = model.queues.get_mut(&key).and_then(|q| q.get_mut(&offset)) {
                        if h.sent.uniq == *uniq && h.store_ts.is_none() {
                            h.store_ts = Some(m.store_timestamp);
                        }
                    }
                }
                other => {
                    let what = format!(
                        "UNIQ_KEY {uniq}: the pull right after its send answered {} and found {:?}",
                        r.code,
                        other.map(uniq_of)
                    );
                    let kind = "an acknowledged message is not readable right after its send";
                    model.problems.push(Problem::new(self.ctx, kind, key, offset, what));
                }
            }
        }
        Ok(())
    }

    /// An UPDATE_CONSUMER_OFFSET of this worker's group (only this worker commits for it).
    async fn commit(&mut self) -> Result<(), Lost> {
        let key = self.pick();
        let end = self.model().next_offset(key);
        let offset =
            if self.rng.below(2) == 0 { end } else { self.rng.below(end as u64 + 1) as i64 };
        let ck = (self.group.clone(), key.0, key.1);
        self.model().commits.entry(ck.clone()).or_default().pending = Some(offset);
        let h = UpdateConsumerOffsetRequestHeader {
            consumer_group: &self.group,
            topic: key.0,
            queue_id: key.1,
            commit_offset: offset,
        };
        let r = self.link.call(request(rc::UPDATE_CONSUMER_OFFSET, h.to_ext_fields())).await?;
        let mut model = self.model();
        let c = model.commits.entry(ck).or_default();
        c.pending = None;
        if r.code == code::SUCCESS {
            c.acked = Some(offset);
            model.stats.commits += 1;
        } else {
            let what = format!("group {} commit {offset}: {r:?}", self.group);
            model.problems.push(Problem::new(self.ctx, "a commit was refused", key, offset, what));
        }
        Ok(())
    }

    /// A QUERY_CONSUMER_OFFSET of one of this worker's acknowledged commits.
    async fn query(&mut self) -> Result<(), Lost> {
        let key = self.pick();
        let ck = (self.group.clone(), key.0, key.1);
        let Some(Commit { acked: Some(want), pending: None }) =
            self.model().commits.get(&ck).copied()
        else {
            return Ok(());
        };
        let r = self.link.call(query_cmd(&self.group, key.0, key.1)).await?;
        let mut model = self.model();
        model.stats.queries += 1;
        if r.code != code::SUCCESS || number(&r, "offset") != Some(want) {
            let what = format!("group {} committed {want}, the broker answers {r:?}", self.group);
            let kind = "a committed offset reads back otherwise on the live broker";
            model.problems.push(Problem::new(self.ctx, kind, key, want, what));
        }
        Ok(())
    }
}

/// The transactions' producer connection: sends half messages (when `sending`), decides them
/// as their fate says, and answers every `CHECK_TRANSACTION_STATE` from the model.
struct TxWorker {
    ctx: Ctx,
    rng: Rng,
    link: Link,
    model: Arc<Mutex<Model>>,
    trip: Arc<Trip>,
    sending: bool,
}

/// `commitOrRollback` of an unknown state (RocketMQ's `TRANSACTION_NOT_TYPE`).
const TX_UNKNOWN: i32 = 0;

/// A one-way END_TRANSACTION of the half message `uniq`.
fn end_cmd(
    uniq: &str,
    table_offset: i64,
    log_offset: i64,
    state: i32,
    check: bool,
) -> RemotingCommand {
    let mut ext = ExtFields::new();
    ext.insert("topic", TX.0);
    ext.insert("producerGroup", TX_GROUP);
    ext.insert_i64("tranStateTableOffset", table_offset);
    ext.insert_i64("commitLogOffset", log_offset);
    ext.insert_i64("commitOrRollback", i64::from(state));
    ext.insert_bool("fromTransactionCheck", check);
    ext.insert("msgId", uniq);
    ext.insert("transactionId", uniq);
    RemotingCommand::oneway_request(rc::END_TRANSACTION, 0).with_ext_fields(ext)
}

impl TxWorker {
    fn model(&self) -> std::sync::MutexGuard<'_, Model> {
        lock(&self.model)
    }

    fn problem(&self, p: Problem) {
        self.model().problems.push(p);
    }

    async fn run(mut self, stop: Arc<AtomicBool>) {
        let body = format!(
            r#"{{"clientID":"127.0.0.1@crashtx{}","producerDataSet":[{{"groupName":"{TX_GROUP}"}}],"consumerDataSet":[],"heartbeatFingerprint":0,"withoutSub":false}}"#,
            self.ctx.cycle
        );
        let heartbeat = request(rc::HEART_BEAT, ExtFields::new()).with_body(body.into_bytes());
        match self.link.call(heartbeat).await {
            Err(Lost) => return,
            Ok(r) if r.code != code::SUCCESS => {
                let p = Problem::other(self.ctx, "producer heartbeat refused", format!("{r:?}"));
                return self.problem(p);
            }
            Ok(_) => {}
        }
        while !stop.load(Ordering::Relaxed) {
            if self.sending && self.half().await.is_err() {
                return;
            }
            let pause = if self.sending { 5 + self.rng.below(15) } else { 50 };
            if self.link.poll(Duration::from_millis(pause)).await.is_err()
                || self.answer_checks().await.is_err()
            {
                return;
            }
        }
    }

    /// Writes a request that gets no answer (firing an armed kill).
    async fn write(&mut self, cmd: RemotingCommand) -> Result<(), Lost> {
        self.link.send(cmd).await?;
        self.trip.sent();
        Ok(())
    }

    /// A half message to `CrashTx`; ended at once if its fate says so.
    async fn half(&mut self) -> Result<(), Lost> {
        let key = (TX.0, self.rng.below(TX.1 as u64) as i32);
        let born = born(&mut self.rng);
        let mut m = new_message(&mut self.rng, self.ctx, WORKERS, key, born, None);
        m.props.push(("TRAN_MSG".to_owned(), "true".to_owned()));
        m.props.push(("PGROUP".to_owned(), TX_GROUP.to_owned()));
        let fate = match self.rng.below(100) {
            0..=34 => Fate::EndCommit,
            35..=54 => Fate::EndRollback,
            55..=74 => Fate::CheckCommit,
            75..=84 => Fate::CheckRollback,
            _ => Fate::UnknownThenCommit,
        };
        let uniq = m.uniq.clone();
        let cmd = send_cmd(rc::SEND_MESSAGE_V2, &m, &props_string(&m.props), m.body.clone());
        let tx = Tx { sent: m, fate, answered: false, unknown_given: false, delivered: false };
        self.model().txs.insert(uniq.clone(), tx);
        let opaque = self.link.send(cmd).await?;
        self.trip.sent();
        let r = self.link.answer(opaque).await?;
        let ids = number(&r, "queueOffset")
            .zip(r.ext_fields.get("msgId").and_then(|id| decode_offset_msg_id(id).ok()));
        let Some((table_offset, id)) = ids.filter(|_| r.code == code::SUCCESS) else {
            let what = format!("the half message UNIQ_KEY {uniq} was answered {r:?}");
            self.problem(Problem::other(self.ctx, "a send was refused", what));
            return Ok(());
        };
        {
            let mut model = self.model();
            model.stats.halves += 1;
            if let Some(t) = model.txs.get_mut(&uniq) {
                t.answered = true;
            }
        }
        let state = match fate {
            Fate::EndCommit => sys_flag::TRANSACTION_COMMIT,
            Fate::EndRollback => sys_flag::TRANSACTION_ROLLBACK,
            _ => return Ok(()),
        };
        let end = end_cmd(&uniq, table_offset, id.commit_log_offset, state, false);
        self.write(end).await?;
        self.model().stats.ends += 1;
        Ok(())
    }

    /// Answers the checks read so far.
    async fn answer_checks(&mut self) -> Result<(), Lost> {
        for check in std::mem::take(&mut self.link.checks) {
            if let Some(end) = self.decide(&check) {
                self.write(end).await?;
            }
        }
        Ok(())
    }

    /// The answer to a check, from the model (`None`, a problem noted, for a check of no
    /// transaction the suite sent or of a message not its own).
    fn decide(&self, check: &RemotingCommand) -> Option<RemotingCommand> {
        let ctx = self.ctx;
        let field = |k: &str| check.ext_fields.get(k).unwrap_or_default().to_owned();
        let uniq = field("transactionId");
        let ids = number(check, "tranStateTableOffset").zip(number(check, "commitLogOffset"));
        let record = decode_records(&check.body).ok().and_then(|mut v| v.pop());
        let mut model = self.model();
        model.stats.checks += 1;
        let kind = "a check names no transaction of the suite";
        let Some(tx) = model.txs.get_mut(&uniq) else {
            let what = format!("transactionId {uniq:?}: {check:?}");
            model.problems.push(Problem::other(ctx, kind, what));
            return None;
        };
        let carried = record.as_ref().map(|r| (uniq_of(r), r.body.clone()));
        if ids.is_none() || carried != Some((Some(uniq.clone()), tx.sent.body.clone())) {
            let what = format!(
                "the check of UNIQ_KEY {uniq} ({}) carries {:?} (ids {ids:?})",
                tx.sent.describe(),
                carried.map(|(u, b)| (u, b.len()))
            );
            model.problems.push(Problem::other(ctx, "a check carries another message", what));
            return None;
        }
        let (table_offset, log_offset) = ids?;
        let delivered = tx.delivered;
        let state = match tx.fate {
            Fate::EndCommit | Fate::CheckCommit => sys_flag::TRANSACTION_COMMIT,
            Fate::EndRollback | Fate::CheckRollback => sys_flag::TRANSACTION_ROLLBACK,
            Fate::UnknownThenCommit if !tx.unknown_given => {
                tx.unknown_given = true;
                TX_UNKNOWN
            }
            Fate::UnknownThenCommit => sys_flag::TRANSACTION_COMMIT,
        };
        if delivered {
            model.stats.checks_after_delivery += 1;
        }
        if state == TX_UNKNOWN {
            model.stats.unknown_answers += 1;
        }
        Some(end_cmd(&uniq, table_offset, log_offset, state, true))
    }
}

/// A `POP_MESSAGE` of [`POP_GROUP`] on [`POP_TOPIC`], every queue (and the retry topic).
fn pop_cmd(max: i32, invisible: i64) -> RemotingCommand {
    let h = PopMessageRequestHeader {
        consumer_group: POP_GROUP,
        topic: POP_TOPIC,
        queue_id: -1,
        max_msg_nums: max,
        invisible_time: invisible,
        poll_time: 0,
        born_time: epoch_ms(),
        init_mode: 0,
        exp_type: Some("TAG"),
        exp: Some("*"),
        order: false,
        attempt_id: None,
    };
    request(rc::POP_MESSAGE, h.to_ext_fields())
}

/// An `ACK_MESSAGE` of a popped copy at `place` by its receipt.
fn pop_ack_cmd((topic, queue, offset): Place, extra_info: &str) -> RemotingCommand {
    let h = AckMessageRequestHeader {
        consumer_group: POP_GROUP,
        topic,
        queue_id: queue,
        extra_info,
        offset,
    };
    request(rc::ACK_MESSAGE, h.to_ext_fields())
}

/// A pop's answer: its pop time and invisible time, and each message with its receipt
/// (`extraInfo`, built as rocketmq-client-rust's `processPopResponse` builds it); or what is
/// wrong with it.
type Receipts = (i64, i64, Vec<(DecodedMessage, String)>);

fn receipts(r: &RemotingCommand) -> Result<Receipts, String> {
    let h = PopMessageResponseHeader::from_ext_fields(&r.ext_fields)
        .map_err(|e| format!("its header: {e:?}"))?;
    let starts = h.start_offset_info.clone().ok_or("it has no startOffsetInfo")?;
    let msgs = decode_records(&r.body).map_err(|e| format!("its body: {e:?}"))?;
    let mut out = Vec::with_capacity(msgs.len());
    for m in msgs {
        let flag = if m.topic.starts_with("%RETRY%") { "1" } else { "0" };
        let q = m.queue_id.to_string();
        let start = starts
            .split(';')
            .find_map(|e| {
                let f: Vec<&str> = e.split(' ').collect();
                (f.len() == 3 && f[0] == flag && f[1] == q).then(|| f[2].to_owned())
            })
            .ok_or_else(|| format!("startOffsetInfo {starts:?} names no queue {flag}@{q}"))?;
        let extra = format!(
            "{start} {} {} {} {flag} baiji-a {q} {}",
            h.pop_time, h.invisible_time, h.revive_qid, m.queue_offset
        );
        out.push((m, extra));
    }
    Ok((h.pop_time as i64, h.invisible_time as i64, out))
}

/// The POP consumer: pops every queue of [`POP_TOPIC`] with a short invisible time (2–4 s),
/// acknowledges most of what it pops right away and leaves the rest to come back; every
/// delivery and ack goes to the model, which checks it ([`Model::popped`]). Its pops and acks
/// fire an armed kill too.
struct PopWorker {
    ctx: Ctx,
    rng: Rng,
    link: Link,
    model: Arc<Mutex<Model>>,
    trip: Arc<Trip>,
}

impl PopWorker {
    fn model(&self) -> std::sync::MutexGuard<'_, Model> {
        lock(&self.model)
    }

    async fn run(mut self, stop: Arc<AtomicBool>) {
        while !stop.load(Ordering::Relaxed) {
            let pause = match self.pop().await {
                Err(Lost) => return,
                Ok(0) => 20 + self.rng.below(30),
                Ok(_) => 1 + self.rng.below(10),
            };
            tokio::time::sleep(Duration::from_millis(pause)).await;
        }
    }

    /// One pop, and the acks of what it delivered; returns how many messages it delivered.
    async fn pop(&mut self) -> Result<usize, Lost> {
        let ctx = self.ctx;
        let invisible = 2000 + self.rng.below(2001) as i64;
        let max = 1 + self.rng.below(16) as i32;
        let opaque = self.link.send(pop_cmd(max, invisible)).await?;
        self.trip.sent();
        let r = self.link.answer(opaque).await?;
        let read_at = epoch_ms();
        if r.code == code::PULL_NOT_FOUND || r.code == code::POLLING_TIMEOUT {
            return Ok(0);
        }
        if r.code != code::SUCCESS {
            let what = format!("a pop of {POP_GROUP} was answered {r:?}");
            self.model().problems.push(Problem::other(ctx, "a pop was refused", what));
            return Ok(0);
        }
        let (pop_time, invisible, msgs) = match receipts(&r) {
            Ok(got) => got,
            Err(e) => {
                let what = format!("{e}: {r:?}");
                self.model().problems.push(Problem::other(
                    ctx,
                    "a pop's answer is malformed",
                    what,
                ));
                return Ok(0);
            }
        };
        let n = msgs.len();
        let acked: Vec<bool> = msgs.iter().map(|_| self.rng.below(100) < POP_ACK_PERCENT).collect();
        let mut acks = Vec::new();
        {
            let mut model = lock(&self.model);
            model.stats.pops += 1;
            for ((m, extra), ack_it) in msgs.into_iter().zip(acked) {
                let topic = match m.topic.as_str() {
                    POP_TOPIC => POP_TOPIC,
                    POP_RETRY => POP_RETRY,
                    other => {
                        let what = format!("a pop of {POP_TOPIC} delivered a message of {other}");
                        let place = (POP_TOPIC, m.queue_id);
                        let kind = "a pop delivered another topic";
                        model.problems.push(Problem::new(ctx, kind, place, m.queue_offset, what));
                        continue;
                    }
                };
                let place = (topic, m.queue_id, m.queue_offset);
                let Some(uniq) = uniq_of(&m) else {
                    let what = format!("properties {:?}", String::from_utf8_lossy(&m.properties));
                    let kind = "a popped message has no UNIQ_KEY";
                    model.problems.push(Problem::new(ctx, kind, (topic, place.1), place.2, what));
                    continue;
                };
                let ack = if ack_it {
                    acks.push((uniq.clone(), place, extra));
                    Ack::InFlight
                } else {
                    model.stats.pop_left += 1;
                    Ack::Left
                };
                let d = Delivery {
                    place,
                    store_ts: m.store_timestamp,
                    cycle: ctx.cycle,
                    pop_time,
                    invisible,
                    read_at,
                    ack,
                };
                model.popped(ctx, &uniq, d);
            }
        }
        for (uniq, place, extra) in acks {
            let opaque = self.link.send(pop_ack_cmd(place, &extra)).await?;
            self.trip.sent();
            let r = self.link.answer(opaque).await?;
            let at = epoch_ms();
            let in_time = at + POP_SLACK_MS < pop_time + invisible;
            let ack = match (r.code == code::SUCCESS, in_time) {
                (true, true) => Ack::Acked(at),
                _ => Ack::Late,
            };
            let mut model = self.model();
            let deliveries = model.pops.get_mut(&uniq);
            let Some(d) = deliveries.and_then(|v| v.iter_mut().rev().find(|d| d.place == place))
            else {
                continue;
            };
            d.ack = ack;
            let refused = (r.code != code::SUCCESS && in_time)
                .then(|| format!("UNIQ_KEY {uniq}: {}: the ack was answered {r:?}", d.describe()));
            if let Some(what) = refused {
                let kind = "an ack within the invisible time was refused";
                model.problems.push(Problem::new(ctx, kind, (place.0, place.1), place.2, what));
            }
            match ack {
                Ack::Acked(_) => model.stats.pop_acks += 1,
                _ => model.stats.pop_late_acks += 1,
            }
        }
        Ok(n)
    }
}

/// The broker process; killed when dropped (a failing suite leaves nothing running).
struct Broker {
    child: Child,
}

impl Drop for Broker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The last `n` lines of `log`.
fn log_tail(log: &Path, n: usize) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// Starts the binary on `dir` and the given ports (again), its output appended to `log`.
/// Tries a few times: a port of the killed process may still be held for a moment.
async fn start(
    ctx: Ctx,
    dir: &Path,
    (addr, namesrv): (SocketAddr, SocketAddr),
    log: &Path,
) -> Broker {
    let mut exits = Vec::new();
    for _ in 0..5 {
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .expect("open the broker's log");
        let err = out.try_clone().expect("the log again");
        let mut child = binary_command(dir, addr, namesrv)
            .args(BROKER_FLAGS)
            .stdout(out)
            .stderr(err)
            .spawn()
            .expect("spawn the baiji binary");
        // Recovery of a debug build may take seconds: more patience than for a first start.
        match wait_listening(&mut child, addr, Duration::from_secs(60)).await {
            None => return Broker { child },
            Some(status) => exits.push(status),
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    panic!(
        "{ctx}: the broker did not start again on {addr} ({exits:?}); its log ends with:\n{}",
        log_tail(log, 30)
    );
}

/// How a load phase ends.
enum End<'a> {
    /// Every request is answered.
    Drain,
    /// SIGKILL `broker` `delay` after the first send written once `load` has passed.
    Kill { broker: &'a mut Broker, delay: Duration },
}

/// Runs the load for `load`, then ends it as `end` says; returns the sends left unanswered.
async fn run_load(
    ctx: Ctx,
    addr: SocketAddr,
    model: &Arc<Mutex<Model>>,
    load: Duration,
    end: End<'_>,
) -> usize {
    let stop = Arc::new(AtomicBool::new(false));
    let trip = Arc::new(Trip::default());
    let before = lock(model).unknown.len();
    let mut handles = Vec::new();
    for id in 0..WORKERS {
        let link = Link::open(addr).await.unwrap_or_else(|_| panic!("{ctx}: connect to {addr}"));
        let w = Worker {
            id,
            ctx,
            rng: Rng(
                ctx.seed ^ (((ctx.cycle as u64) << 8) | id).wrapping_mul(0x9E37_79B9_7F4A_7C15)
            ),
            link,
            group: format!("crash_g{id}"),
            model: Arc::clone(model),
            trip: Arc::clone(&trip),
        };
        handles.push(tokio::spawn(w.run(Arc::clone(&stop))));
    }
    let link = Link::open(addr).await.unwrap_or_else(|_| panic!("{ctx}: connect to {addr}"));
    let tx = TxWorker {
        ctx,
        rng: Rng(ctx.seed ^ ((ctx.cycle as u64) << 8 | 0xFF).wrapping_mul(0x9E37_79B9_7F4A_7C15)),
        link,
        model: Arc::clone(model),
        trip: Arc::clone(&trip),
        sending: true,
    };
    handles.push(tokio::spawn(tx.run(Arc::clone(&stop))));
    let link = Link::open(addr).await.unwrap_or_else(|_| panic!("{ctx}: connect to {addr}"));
    let pop = PopWorker {
        ctx,
        rng: Rng(ctx.seed ^ ((ctx.cycle as u64) << 8 | 0xFE).wrapping_mul(0x9E37_79B9_7F4A_7C15)),
        link,
        model: Arc::clone(model),
        trip: Arc::clone(&trip),
    };
    handles.push(tokio::spawn(pop.run(Arc::clone(&stop))));
    tokio::time::sleep(load).await;
    if let End::Kill { broker, delay } = end {
        *trip.armed.lock().expect("the trip") = Some((broker.child.id(), delay));
        let fired = tokio::time::timeout(Duration::from_secs(2), trip.fired.notified()).await;
        if fired.is_err() {
            // A load that sent nothing for so long is killed all the same.
            trip.armed.lock().expect("the trip").take();
            broker.child.kill().expect("SIGKILL the broker");
        }
        broker.child.wait().expect("reap the broker");
    }
    stop.store(true, Ordering::Relaxed);
    for h in handles {
        if let Err(e) = tokio::time::timeout(PATIENCE, h).await.expect("the load stops") {
            std::panic::resume_unwind(e.into_panic());
        }
    }
    lock(model).unknown.len() - before
}

fn lock(model: &Mutex<Model>) -> std::sync::MutexGuard<'_, Model> {
    model.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

async fn must(ctx: Ctx, link: &mut Link, cmd: RemotingCommand) -> RemotingCommand {
    let code = cmd.code;
    link.call(cmd)
        .await
        .unwrap_or_else(|_| panic!("{ctx}: the broker went away during the check (request {code})"))
}

/// Every record of a queue (offset → record), and the queue's end.
async fn scan(ctx: Ctx, link: &mut Link, (topic, queue): QueueKey) -> (i64, BTreeMap<i64, Rec>) {
    let r = must(ctx, link, max_offset_request(topic, queue)).await;
    let end =
        number(&r, "offset").unwrap_or_else(|| panic!("{ctx}: the end of {topic}/{queue}: {r:?}"));
    let mut records = BTreeMap::new();
    let mut offset = 0;
    while offset < end {
        let r = must(ctx, link, pull_cmd(topic, queue, offset, SCAN_BATCH)).await;
        if r.code == code::SUCCESS {
            for m in decode_records(&r.body).expect("a valid pull body") {
                records.insert(m.queue_offset, Rec::new(m));
            }
        }
        // Holes (offsets of sends never answered) and a moved first offset are stepped over.
        let moves = [
            code::SUCCESS,
            code::PULL_OFFSET_MOVED,
            code::PULL_RETRY_IMMEDIATELY,
            code::PULL_NOT_FOUND,
        ];
        let next = number(&r, "nextBeginOffset").unwrap_or(offset);
        if moves.contains(&r.code) && next > offset {
            offset = next;
            continue;
        }
        assert!(
            r.code == code::PULL_NOT_FOUND,
            "{ctx}: reading {topic}/{queue} at {offset} (end {end}) is answered {r:?}"
        );
        break;
    }
    (end, records)
}

/// What differs between a held message and the record read at its place.
fn differences(h: &Held, rec: &Rec) -> Vec<String> {
    let (s, r) = (&h.sent, &rec.m);
    let mut d = Vec::new();
    if r.topic != s.topic || r.queue_id != s.queue {
        d.push(format!("it is of {}/{}", r.topic, r.queue_id));
    }
    if r.body != s.body {
        let at = r.body.iter().zip(s.body.iter()).position(|(a, b)| a != b);
        d.push(format!(
            "body differs (sent {} bytes, read {}, first difference at {at:?})",
            s.body.len(),
            r.body.len()
        ));
    }
    if !r.body_crc_matches() {
        d.push("its body CRC does not match".into());
    }
    if r.flag != s.flag {
        d.push(format!("flag {} (sent {})", r.flag, s.flag));
    }
    if r.born_timestamp != s.born {
        d.push(format!("born timestamp {} (sent {})", r.born_timestamp, s.born));
    }
    for (k, v) in &s.props {
        match rec.props.get(k) {
            None => d.push(format!("property {k} missing (sent {v:?})")),
            Some(g) if g != v => d.push(format!("property {k} is {g:?} (sent {v:?})")),
            Some(_) => {}
        }
    }
    if let Some(ts) = h.store_ts {
        if r.store_timestamp != ts {
            d.push(format!("store timestamp {} (first read {ts})", r.store_timestamp));
        }
    }
    if let Some(id) = &h.msg_id {
        let now = r.offset_msg_id();
        if now != *id {
            d.push(format!("msgId {now} (the send was answered {id})"));
        }
    }
    d
}

/// `0..=14, 20, 31..=40` for sorted offsets.
fn ranges(offsets: &[i64]) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < offsets.len() {
        let mut j = i;
        while j + 1 < offsets.len() && offsets[j + 1] == offsets[j] + 1 {
            j += 1;
        }
        parts.push(if i == j {
            offsets[i].to_string()
        } else {
            format!("{}..={}", offsets[i], offsets[j])
        });
        i = j + 1;
    }
    if parts.len() > 8 {
        let more = parts.len() - 8;
        parts.truncate(8);
        parts.push(format!("and {more} more ranges"));
    }
    parts.join(", ")
}

/// Counts of one check, for the progress line.
#[derive(Default)]
struct Checked {
    held: usize,
    records: usize,
    unknown_present: usize,
    unknown_absent: usize,
    commits: usize,
    /// Per queue with missing messages: which, and the groups' commits there.
    missing: Vec<String>,
    /// Timer and delay-level messages delivered, of those sent.
    timed_delivered: usize,
    timed_sent: usize,
    /// Transactions delivered, of those sent meaning to commit.
    tx_delivered: usize,
    tx_commits: usize,
    /// Messages delivered twice across a kill (the at-least-once window).
    duplicates: usize,
    /// Messages held in `CrashPop`, those popped at least once, the deliveries acknowledged in
    /// time, and the retry copies made twice across a kill.
    pop_held: usize,
    pop_popped: usize,
    pop_acked: usize,
    pop_revived_twice: usize,
}

impl fmt::Display for Checked {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} messages held, {} records read, unanswered sends: {} messages present, {} absent; \
             {} commits; timers and delay levels: {} of {} delivered; transactions: {} of {} \
             meant to commit delivered; {} delivered twice across a kill; POP: {} of {} popped, \
             {} acked, {} revived twice across a kill",
            self.held,
            self.records,
            self.unknown_present,
            self.unknown_absent,
            self.commits,
            self.timed_delivered,
            self.timed_sent,
            self.tx_delivered,
            self.tx_commits,
            self.duplicates,
            self.pop_popped,
            self.pop_held,
            self.pop_acked,
            self.pop_revived_twice
        )
    }
}

/// Reads every queue and every commit back and compares them with the model; resolves the
/// unanswered sends (present: held from now on; absent: must never appear); checks what timers,
/// delay levels and commits delivered ([`check_delivered`], with `complete` also that every
/// answered one was). Returns the problems (the load's included).
async fn check(
    ctx: Ctx,
    addr: SocketAddr,
    model: &Mutex<Model>,
    complete: bool,
) -> (Vec<Problem>, Checked) {
    let mut m = std::mem::take(&mut *lock(model));
    let mut problems = std::mem::take(&mut m.problems);
    let mut c = Checked::default();
    let mut link = Link::open(addr).await.unwrap_or_else(|_| panic!("{ctx}: connect to {addr}"));
    let when = ctx.when();
    // Every record of every queue, by UNIQ_KEY.
    let mut all: HashMap<QueueKey, BTreeMap<i64, Rec>> = HashMap::new();
    let mut by_uniq: HashMap<String, (QueueKey, i64)> = HashMap::new();
    for (topic, queues) in TOPICS {
        for queue in 0..queues {
            let key = (topic, queue);
            let (end, records) = scan(ctx, &mut link, key).await;
            let want = m.next_offset(key);
            if end < want {
                let what = format!("the queue ends at {end}, acknowledged messages reach {want}");
                let kind = format!("a queue's end went back {when}");
                problems.push(Problem::new(ctx, &kind, key, end, what));
            }
            for (offset, r) in &records {
                c.records += 1;
                let Some(uniq) = r.uniq() else {
                    let props = String::from_utf8_lossy(&r.m.properties);
                    let what = format!("properties {props:?}");
                    problems.push(Problem::new(
                        ctx,
                        "a record without UNIQ_KEY",
                        key,
                        *offset,
                        what,
                    ));
                    continue;
                };
                if let Some((k, o)) = by_uniq.insert(uniq.to_owned(), (key, *offset)) {
                    let what = format!("UNIQ_KEY {uniq} is also at {}/{} offset {o}", k.0, k.1);
                    problems.push(Problem::new(
                        ctx,
                        "a message is stored twice",
                        key,
                        *offset,
                        what,
                    ));
                }
            }
            all.insert(key, records);
        }
    }
    // Every held message at its place, intact.
    for (key, held) in &mut m.queues {
        let records = all.get(key).expect("every queue was read");
        let mut missing = Vec::new();
        for (offset, h) in held.iter_mut() {
            c.held += 1;
            let Some(r) = records.get(offset) else {
                missing.push(*offset);
                let kind = format!("acknowledged message missing {when}");
                problems.push(Problem::new(ctx, &kind, *key, *offset, h.describe()));
                continue;
            };
            let d = differences(h, r);
            if !d.is_empty() {
                let kind = format!("acknowledged message differs {when}");
                let what = format!("{}: {}", h.describe(), d.join("; "));
                problems.push(Problem::new(ctx, &kind, *key, *offset, what));
            } else if h.store_ts.is_none() {
                h.store_ts = Some(r.m.store_timestamp);
            }
        }
        if !missing.is_empty() {
            let commits: Vec<String> = m
                .commits
                .iter()
                .filter(|((_, t, q), _)| (*t, *q) == *key)
                .filter_map(|((g, _, _), c)| c.acked.map(|o| format!("{g} {o}")))
                .collect();
            c.missing.push(format!(
                "{}/{}: {} of {} missing at {}; first record {:?}, committed: {}",
                key.0,
                key.1,
                missing.len(),
                held.len(),
                ranges(&missing),
                records.keys().next(),
                if commits.is_empty() { "nothing".into() } else { commits.join(", ") }
            ));
        }
    }
    // Every record is a held message, or an unanswered send (whole and intact), nothing else.
    let undecided: HashMap<&str, &Sent> =
        m.unknown.iter().flatten().map(|s| (s.uniq.as_str(), s)).collect();
    for (key, records) in &all {
        for (offset, r) in records {
            let Some(uniq) = r.uniq() else { continue };
            let held_here = m.at.get(uniq) == Some(&(*key, *offset));
            if held_here || undecided.contains_key(uniq) {
                continue;
            }
            let what = if let Some((k, o)) = m.at.get(uniq) {
                format!("UNIQ_KEY {uniq}, held at {}/{} offset {o}, is (also) here", k.0, k.1)
            } else if let Some(cycle) = m.lost.get(uniq) {
                format!("UNIQ_KEY {uniq} was absent after restart {cycle} and is back")
            } else {
                format!("UNIQ_KEY {uniq}: a record no send of the suite made")
            };
            problems.push(Problem::new(ctx, "an unexpected record", *key, *offset, what));
        }
    }
    for sends in std::mem::take(&mut m.unknown) {
        let found: Vec<Option<(QueueKey, i64)>> =
            sends.iter().map(|s| by_uniq.get(&s.uniq).copied()).collect();
        let first = &sends[0];
        let key = (first.topic, first.queue);
        if found.iter().all(Option::is_none) {
            c.unknown_absent += sends.len();
            for s in &sends {
                m.lost.insert(s.uniq.clone(), ctx.cycle);
            }
            continue;
        }
        let base = found.iter().flatten().next().map_or(0, |(_, o)| *o)
            - found.iter().position(Option::is_some).unwrap_or(0) as i64;
        let whole = found.iter().enumerate().all(|(i, f)| *f == Some((key, base + i as i64)));
        if !whole {
            let places: Vec<String> = found
                .iter()
                .map(|f| f.map_or("absent".into(), |(k, o)| format!("{}/{} offset {o}", k.0, k.1)))
                .collect();
            let what = format!("{}: its messages are at [{}]", first.describe(), places.join(", "));
            let kind = format!("an unanswered send is not whole or not where it was sent {when}");
            problems.push(Problem::new(ctx, &kind, key, base, what));
            continue;
        }
        c.unknown_present += sends.len();
        for (i, s) in sends.into_iter().enumerate() {
            let offset = base + i as i64;
            let r = &all[&key][&offset];
            let h = Held { sent: s, msg_id: None, store_ts: Some(r.m.store_timestamp) };
            let d = differences(&h, r);
            if !d.is_empty() {
                let kind = format!("an unanswered send is stored altered {when}");
                let what = format!("{}: {}", h.sent.describe(), d.join("; "));
                problems.push(Problem::new(ctx, &kind, key, offset, what));
            }
            m.hold(ctx, offset, h);
        }
    }
    problems.append(&mut m.problems);
    // Every acknowledged commit reads back (or the one in flight at the kill).
    for ((group, topic, queue), commit) in &mut m.commits {
        let Commit { acked, pending } = *commit;
        if acked.is_none() && pending.is_none() {
            continue;
        }
        c.commits += 1;
        let r = must(ctx, &mut link, query_cmd(group, topic, *queue)).await;
        let got = (r.code == code::SUCCESS).then(|| number(&r, "offset")).flatten();
        match got {
            Some(o) if Some(o) == acked || Some(o) == pending => {
                *commit = Commit { acked: Some(o), pending: None };
            }
            None if acked.is_none() => *commit = Commit::default(),
            _ => {
                let kind = format!("committed offset lost or changed {when}");
                let what = format!(
                    "group {group} committed {acked:?} (in flight at the kill: {pending:?}), \
                     the broker answers {} {got:?} ({:?})",
                    r.code, r.remark
                );
                problems.push(Problem::new(ctx, &kind, (topic, *queue), acked.unwrap_or(-1), what));
            }
        }
    }
    check_delivered(ctx, &mut link, &mut m, &mut problems, &mut c, complete).await;
    check_popped(ctx, &m, &mut problems, &mut c, complete);
    *lock(model) = m;
    (problems, c)
}

/// Counts what the POP group was given; with `complete` (after the settle phase) every message
/// held in [`POP_TOPIC`] must have been popped at least once. (Each delivery was checked as it
/// was read, [`Model::popped`]: its problems come with the load's.)
fn check_popped(ctx: Ctx, m: &Model, problems: &mut Vec<Problem>, c: &mut Checked, complete: bool) {
    for (&key, held) in m.queues.iter().filter(|((t, _), _)| *t == POP_TOPIC) {
        for (&offset, h) in held {
            c.pop_held += 1;
            if m.pops.contains_key(&h.sent.uniq) {
                c.pop_popped += 1;
            } else if complete {
                let kind = format!(
                    "a message of {POP_TOPIC} was never popped (settle phase of {SETTLE:?})"
                );
                problems.push(Problem::new(ctx, &kind, key, offset, h.describe()));
            }
        }
    }
    let deliveries = m.pops.values().flatten();
    c.pop_acked = deliveries.filter(|d| matches!(d.ack, Ack::Acked(_))).count();
    c.pop_revived_twice = m.stats.pop_revived_twice as usize;
}

/// Every record of `CrashTimed` and `CrashTx`, by place.
async fn scan_delivered(ctx: Ctx, link: &mut Link) -> BTreeMap<Place, Rec> {
    let mut found = BTreeMap::new();
    for (topic, queues) in [TIMED, TX] {
        for queue in 0..queues {
            let (_, records) = scan(ctx, link, (topic, queue)).await;
            found.extend(records.into_iter().map(|(o, r)| ((topic, queue, o), r)));
        }
    }
    found
}

/// A send as its delivery must read: without the properties delivery may drop or rewrite.
fn delivered_form(s: &Sent) -> Sent {
    let mut s = s.clone();
    s.props.retain(|(k, _)| !SCHEDULING.contains(&k.as_str()));
    s
}

/// Checks what timers, delay levels and commits delivered (see the module docs): each record
/// is a delivery of a message the suite sent, intact, in its queue, not early, not of a
/// rolled-back transaction; what an earlier check read is still there; a message delivered
/// twice only across a kill, as the last delivery of its kind before it, once per kind and kill.
/// With `complete`, every answered timer and delay-level message and every answered transaction
/// meant to commit must have been delivered.
async fn check_delivered(
    ctx: Ctx,
    link: &mut Link,
    m: &mut Model,
    problems: &mut Vec<Problem>,
    c: &mut Checked,
    complete: bool,
) {
    let when = ctx.when();
    let found = scan_delivered(ctx, link).await;
    // What earlier checks read is still at its place, the same.
    for (&(topic, queue, offset), d) in &m.copies {
        let now = found.get(&(topic, queue, offset));
        if now.is_some_and(|r| r.uniq() == Some(&d.uniq) && r.m.store_timestamp == d.store_ts) {
            continue;
        }
        let kind = format!("a delivered message read before is missing or changed {when}");
        let what = format!(
            "the {} delivery of UNIQ_KEY {} stored at {} (first read in cycle {}) is now {:?}",
            d.kind,
            d.uniq,
            d.store_ts,
            d.seen,
            now.map(|r| (r.uniq(), r.m.store_timestamp))
        );
        problems.push(Problem::new(ctx, &kind, (topic, queue), offset, what));
    }
    // What is new: a delivery of a message sent, intact, on time.
    for (&(topic, queue, offset), r) in &found {
        if m.copies.contains_key(&(topic, queue, offset)) {
            continue;
        }
        let key = (topic, queue);
        let Some(uniq) = r.uniq() else {
            let what = format!("properties {:?}", String::from_utf8_lossy(&r.m.properties));
            problems.push(Problem::new(ctx, "a record without UNIQ_KEY", key, offset, what));
            continue;
        };
        let (sent, kind, due) = if let Some(t) = m.timed.get(uniq) {
            (&t.sent, t.kind, Some(t.due))
        } else if let Some(t) = m.txs.get_mut(uniq) {
            t.delivered = true;
            if !t.fate.commits() {
                let what = format!("{} ({:?})", t.sent.describe(), t.fate);
                let kind = "a rolled-back transaction was delivered";
                problems.push(Problem::new(ctx, kind, key, offset, what));
            }
            (&t.sent, Kind::Commit, None)
        } else {
            let what = format!("UNIQ_KEY {uniq}: a record no send of the suite made");
            problems.push(Problem::new(ctx, "an unexpected record", key, offset, what));
            continue;
        };
        let held = Held { sent: delivered_form(sent), msg_id: None, store_ts: None };
        let d = differences(&held, r);
        if !d.is_empty() {
            let kind = format!("a {kind} delivery differs from its send");
            let what = format!("{}: {}", sent.describe(), d.join("; "));
            problems.push(Problem::new(ctx, &kind, key, offset, what));
        }
        let stored = r.m.store_timestamp;
        if let Some(due) = due {
            let out: Option<i64> = r.props.get("TIMER_OUT_MS").and_then(|v| v.parse().ok());
            let not_before = due.max(out.unwrap_or(i64::MIN));
            if stored < not_before {
                let kind = format!("a {kind} message was delivered early");
                let what = format!(
                    "{}: due at {due} (TIMER_OUT_MS {out:?}), stored at {stored}, {} ms early",
                    sent.describe(),
                    not_before - stored
                );
                problems.push(Problem::new(ctx, &kind, key, offset, what));
            }
        }
        let d = Delivered { uniq: uniq.to_owned(), kind, store_ts: stored, seen: ctx.cycle };
        m.copies.insert((topic, queue, offset), d);
    }
    // Twice only across a kill, as the last delivery of its kind before it; once per kind and
    // kill.
    let mut by_uniq: HashMap<&str, Vec<(i64, Place)>> = HashMap::new();
    for (place, d) in &m.copies {
        by_uniq.entry(&d.uniq).or_default().push((d.store_ts, *place));
    }
    let mut across: BTreeMap<(Kind, usize), Vec<&str>> = BTreeMap::new();
    for (uniq, mut copies) in
        by_uniq.iter().filter(|(_, v)| v.len() > 1).map(|(u, v)| (*u, v.clone()))
    {
        copies.sort_unstable();
        let kind = m.copies[&copies[0].1].kind;
        for pair in copies.windows(2) {
            let ((first, (t, q, o)), (second, at)) = (pair[0], pair[1]);
            let places = format!("stored at {first} ({t}/{q} offset {o}) and at {second}");
            let restart = m.restarts.iter().rev().find(|(_, spawned)| *spawned <= second);
            let Some(&(cycle, spawned)) = restart.filter(|(_, spawned)| first < *spawned) else {
                let kind = format!("a {kind} message was delivered twice with no restart between");
                let what = format!("UNIQ_KEY {uniq}, {places}");
                problems.push(Problem::new(ctx, &kind, (at.0, at.1), at.2, what));
                continue;
            };
            let last = m
                .copies
                .values()
                .filter(|d| d.kind == kind && d.store_ts < spawned)
                .map(|d| d.store_ts)
                .max();
            if last.is_some_and(|l| first < l) {
                let label = format!(
                    "a {kind} message was delivered again after a restart though it was not the \
                     last {kind} delivery before the kill"
                );
                let what = format!(
                    "UNIQ_KEY {uniq}, {places}; the restart of cycle {cycle} was spawned at \
                     {spawned}, the last {kind} delivery before it stored at {last:?}"
                );
                problems.push(Problem::new(ctx, &label, (at.0, at.1), at.2, what));
            }
            across.entry((kind, cycle)).or_default().push(uniq);
        }
    }
    for ((kind, cycle), uniqs) in &across {
        c.duplicates += uniqs.len();
        if uniqs.len() > 1 {
            let kind = format!("more than one {kind} message delivered again after one kill");
            let what = format!("after the kill of cycle {cycle}: UNIQ_KEYs {}", uniqs.join(", "));
            problems.push(Problem::other(ctx, &kind, what));
        }
    }
    // Counts, and with `complete` every answered one delivered.
    let delivered: std::collections::HashSet<&str> =
        m.copies.values().map(|d| d.uniq.as_str()).collect();
    c.timed_sent = m.timed.len();
    c.tx_commits = m.txs.values().filter(|t| t.fate.commits()).count();
    c.timed_delivered = m.timed.keys().filter(|u| delivered.contains(u.as_str())).count();
    c.tx_delivered = m.txs.keys().filter(|u| delivered.contains(u.as_str())).count();
    if !complete {
        return;
    }
    let mut missing: Vec<(&str, String)> = Vec::new();
    for t in m.timed.values().filter(|t| t.answered && !delivered.contains(t.sent.uniq.as_str())) {
        let kind = match t.kind {
            Kind::Level => "an acknowledged delay-level message was never delivered",
            _ => "an acknowledged timer message was never delivered",
        };
        missing.push((kind, format!("{}, due at {}", t.sent.describe(), t.due)));
    }
    for t in m.txs.values() {
        if t.answered && t.fate.commits() && !delivered.contains(t.sent.uniq.as_str()) {
            let kind = "a transaction meant to commit was never delivered";
            let what = format!(
                "{} ({:?}; a check answered unknown: {})",
                t.sent.describe(),
                t.fate,
                t.unknown_given
            );
            missing.push((kind, what));
        }
    }
    for (kind, what) in missing {
        problems.push(Problem::other(ctx, &format!("{kind} (settle phase of {SETTLE:?})"), what));
    }
}

/// The settle phase after the last restart: the transactions' producer connected again
/// (answering checks, sending nothing) and the POP consumer popping until every answered timer
/// and delay-level message and every answered transaction meant to commit is delivered and
/// every message held in [`POP_TOPIC`] was popped, or [`SETTLE`] has passed.
async fn settle(ctx: Ctx, addr: SocketAddr, model: &Arc<Mutex<Model>>) -> Duration {
    let started = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    let tx = TxWorker {
        ctx,
        rng: Rng(ctx.seed),
        link: Link::open(addr).await.unwrap_or_else(|_| panic!("{ctx}: connect to {addr}")),
        model: Arc::clone(model),
        trip: Arc::new(Trip::default()),
        sending: false,
    };
    let producer = tokio::spawn(tx.run(Arc::clone(&stop)));
    let pop = PopWorker {
        ctx,
        rng: Rng(ctx.seed ^ 0xFE),
        link: Link::open(addr).await.unwrap_or_else(|_| panic!("{ctx}: connect to {addr}")),
        model: Arc::clone(model),
        trip: Arc::new(Trip::default()),
    };
    let consumer = tokio::spawn(pop.run(Arc::clone(&stop)));
    let mut link = Link::open(addr).await.unwrap_or_else(|_| panic!("{ctx}: connect to {addr}"));
    loop {
        let found = scan_delivered(ctx, &mut link).await;
        let delivered: std::collections::HashSet<&str> =
            found.values().filter_map(Rec::uniq).collect();
        let waiting = {
            let m = lock(model);
            let timed = m.timed.values().filter(|t| t.answered);
            let txs = m.txs.values().filter(|t| t.answered && t.fate.commits());
            let sent = timed.map(|t| &t.sent).chain(txs.map(|t| &t.sent));
            let to_pop =
                m.queues.iter().filter(|((t, _), _)| *t == POP_TOPIC).flat_map(|(_, q)| q.values());
            sent.filter(|s| !delivered.contains(s.uniq.as_str())).count()
                + to_pop.filter(|h| !m.pops.contains_key(&h.sent.uniq)).count()
        };
        if waiting == 0 || started.elapsed() > SETTLE {
            break;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    stop.store(true, Ordering::Relaxed);
    for task in [producer, consumer] {
        if let Err(e) = tokio::time::timeout(PATIENCE, task).await.expect("the settle load stops") {
            std::panic::resume_unwind(e.into_panic());
        }
    }
    started.elapsed()
}

fn env_number(name: &str) -> Option<u64> {
    let v = std::env::var(name).ok()?;
    let v = v.trim();
    let parsed = match v.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => v.parse(),
    };
    Some(parsed.unwrap_or_else(|_| panic!("{name}={v} is not a number")))
}

#[tokio::test]
async fn given_sigkills_under_load_should_keep_every_acknowledged_message_and_commit() {
    let seed = env_number("BAIJI_CRASH_SEED").unwrap_or(DEFAULT_SEED);
    let kills = env_number("BAIJI_CRASH_KILLS").map_or(DEFAULT_KILLS, |k| k as usize);
    println!("crash suite: seed {seed:#x} (replay: BAIJI_CRASH_SEED={seed:#x}), {kills} kills");
    let dir = StoreDir::new("crash");
    let logs = StoreDir::new("crash-log");
    std::fs::create_dir_all(&logs.0).expect("a log directory");
    let log = logs.0.join("broker.log");
    let ports = (
        SocketAddr::from(([127, 0, 0, 1], free_port())),
        SocketAddr::from(([127, 0, 0, 1], free_port())),
    );
    let addr = ports.0;
    let mut rng = Rng(seed);
    let ctx = Ctx { seed, cycle: 0 };
    let started = Instant::now();
    let mut broker = start(ctx, &dir.0, ports, &log).await;
    println!("{ctx}: listening after {:?}", started.elapsed());
    let mut link = Link::open(addr).await.expect("connect");
    for (topic, queues) in TOPICS.into_iter().chain([TIMED, TX]) {
        let r = must(ctx, &mut link, create_topic_request(topic, queues)).await;
        assert_eq!(r.code, code::SUCCESS, "{ctx}: {topic} is created: {r:?}");
    }
    drop(link);
    let model = Arc::new(Mutex::new(Model::default()));
    // Cycle 0: the harness checked against the live broker, every request answered.
    let unanswered = run_load(ctx, addr, &model, Duration::from_millis(800), End::Drain).await;
    assert_eq!(unanswered, 0, "{ctx}: a live broker answers every request");
    let started = Instant::now();
    let (problems, checked) = check(ctx, addr, &model, false).await;
    assert_no_problems(ctx, &problems, &checked);
    println!("{ctx}: check took {:?}", started.elapsed());
    assert!(checked.held > 0 && checked.commits > 0, "{ctx}: the load did something: {checked}");
    println!("{ctx}: live check passed: {checked}, {:?}", lock(&model).stats);
    let mut in_flight_kills = 0;
    for cycle in 1..=kills {
        let ctx = Ctx { seed, cycle };
        let load = Duration::from_millis(500 + rng.below(1000));
        let delay = Duration::from_micros(rng.below(600));
        let kill = End::Kill { broker: &mut broker, delay };
        let unanswered = run_load(ctx, addr, &model, load, kill).await;
        in_flight_kills += usize::from(unanswered > 0);
        let started = Instant::now();
        lock(&model).restarts.push((cycle, epoch_ms()));
        broker = start(ctx, &dir.0, ports, &log).await;
        let restart = started.elapsed();
        let started = Instant::now();
        let (problems, checked) = check(ctx, addr, &model, false).await;
        assert_no_problems(ctx, &problems, &checked);
        println!(
            "{ctx}: killed {delay:?} after a send, {load:?} into the load, with {unanswered} \
             sends unanswered; listening again after {restart:?}; check took {:?}: {checked}",
            started.elapsed()
        );
    }
    // The last deliveries: every answered timer, delay level and commit must arrive.
    let ctx = Ctx { seed, cycle: kills };
    let waited = settle(ctx, addr, &model).await;
    let (problems, checked) = check(ctx, addr, &model, true).await;
    assert_no_problems(ctx, &problems, &checked);
    println!("{ctx}: settled after {waited:?}: {checked}");
    let stats = &lock(&model).stats;
    println!("crash suite: seed {seed:#x}: passed, {stats:?}");
    assert!(
        in_flight_kills > 0,
        "seed {seed:#x}: at least one of {kills} kills landed while a send was unanswered"
    );
    drop(broker);
}
