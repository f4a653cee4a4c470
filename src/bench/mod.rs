//! Benchmarks over the wire: a load generator for any RocketMQ name server (and, through the
//! [`Driver`] trait, any other broker a driver is written for).
//!
//! The generator is split in three:
//!
//! | part | module | what it does |
//! |---|---|---|
//! | workload | [`BenchArgs`], [`Workload`] | what to run: producers, lanes, groups, members, size, rate, duration |
//! | drivers | [`raw`], `grpc` (feature `grpc`), `client` (feature `bench-client`) and the peers crate under `benches/wire/` | connect, create the topic, send, receive |
//! | runner | [`run`] | paces producers, checks every delivery, records histograms, prints and writes the results |
//!
//! Every message carries a 24-byte stamp (`producer`, `seq`, send time) at the start of its
//! payload; consumers decode it, so loss, duplication and reordering are *checked* per group,
//! and end-to-end latency is measured against the same clock (one process, one monotonic
//! anchor). The send round trip is timed around each acknowledged send.

#[cfg(feature = "bench-client")]
pub mod client;
#[cfg(feature = "grpc")]
pub mod grpc;
mod payload;
mod proc_stat;
pub mod raw;
mod runner;
mod stats;
mod tcp_probe;

use std::future::Future;
use std::time::Duration;

use bytes::Bytes;
use clap::{Args, ValueEnum};

pub use payload::{now_ns, read as read_stamp, stamp, Stamp, STAMP_LEN};
pub use runner::run;
pub use stats::{BenchReport, GroupReport, Percentiles, ProcReport, SecondSample};

/// Why a benchmark could not run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BenchError {
    /// A socket failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The system under test answered with an error or something unexpected.
    #[error("{0}")]
    Protocol(String),
    /// The arguments do not make a workload.
    #[error("invalid arguments: {0}")]
    Args(String),
    /// Waiting for an answer took too long.
    #[error("timed out: {0}")]
    Timeout(String),
}

impl BenchError {
    /// An I/O error with what was being done.
    pub fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        BenchError::Io { context: context.into(), source }
    }
}

/// Result of a benchmark step.
pub type BenchResult<T> = Result<T, BenchError>;

/// How producers send.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SendMode {
    /// One message per request, one request in flight per producer.
    Sync,
    /// One message per request, `--inflight` requests in flight per producer (pipelined on its
    /// connection).
    Async,
    /// `--batch` messages per request, one request in flight per producer.
    Batch,
}

/// How consumers read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ConsumeMode {
    /// `PULL_MESSAGE` with the commit-offset flag.
    Pull,
    /// `POP_MESSAGE` and `BATCH_ACK_MESSAGE`.
    Pop,
}

/// The command line of `baiji bench` (and of the peers' runner, which reuses it).
#[derive(Debug, Clone, Args, serde::Serialize)]
pub struct BenchArgs {
    /// Address of the system under test: a RocketMQ name server `host:port` (baiji's embedded
    /// one, rocketmq-namesrv, ...), or the server of a peer driver.
    #[arg(long, default_value = "127.0.0.1:9876")]
    pub namesrv: String,
    /// Driver: `raw` (baiji's own protocol driver, minimal and the same for every RocketMQ
    /// broker), `grpc` (RocketMQ 5's gRPC MessagingService at `--grpc-endpoint`: SendMessage,
    /// SimpleConsumer ReceiveMessage/AckMessage; needs the `grpc` cargo feature) or `client`
    /// (rocketmq-client-rust; needs the `bench-client` cargo feature).
    #[arg(long, default_value = "raw")]
    pub driver: String,
    /// The broker's gRPC endpoint `host:port` (driver `grpc`); the topic is still created
    /// through `--namesrv`.
    #[arg(long, default_value = "127.0.0.1:8081")]
    pub grpc_endpoint: String,
    /// Label of the system under test, written to the results (e.g. baiji, rocketmq-rust).
    #[arg(long, default_value = "baiji")]
    pub system: String,
    /// Label of the workload, written to the results.
    #[arg(long, default_value = "custom")]
    pub workload: String,
    /// Topic to use; created with `--queues` queues if it does not exist. Default: a fresh
    /// `bench_<pid>_<time>` topic per run.
    #[arg(long)]
    pub topic: Option<String>,
    /// Queues of the topic (RocketMQ read/write queue count; Redis: streams; NATS: subjects).
    #[arg(long, default_value_t = 4)]
    pub queues: u32,
    /// Producers, each with its own connection.
    #[arg(long, short = 'p', default_value_t = 1)]
    pub producers: usize,
    /// How producers send: sync (1 in flight), async (`--inflight` in flight), batch.
    #[arg(long, value_enum, default_value_t = SendMode::Sync)]
    pub mode: SendMode,
    /// Requests in flight per producer in `async` mode.
    #[arg(long, default_value_t = 32)]
    pub inflight: usize,
    /// Messages per request in `batch` mode.
    #[arg(long, default_value_t = 32)]
    pub batch: usize,
    /// Consumer groups; each receives every message (fan-out).
    #[arg(long, short = 'g', default_value_t = 1)]
    pub groups: usize,
    /// Members per consumer group, each with its own connection; queues are divided among them.
    #[arg(long, short = 'k', default_value_t = 1)]
    pub members: usize,
    /// Payload bytes per message (at least 24: the stamp).
    #[arg(long, short = 's', default_value_t = 128)]
    pub size: usize,
    /// Target rate, messages per second over all producers (paced); 0 sends as fast as
    /// acknowledgements allow.
    #[arg(long, default_value_t = 0)]
    pub rate: u64,
    /// Seconds to send after the warm-up (ignored when `--count` is given).
    #[arg(long, default_value_t = 10.0)]
    pub duration: f64,
    /// Messages to send in total after the warm-up, instead of a duration.
    #[arg(long)]
    pub count: Option<u64>,
    /// Seconds of sending before measuring (checked for loss, not recorded in histograms).
    #[arg(long, default_value_t = 2.0)]
    pub warmup: f64,
    /// Backlog mode: consumers join, then everything is sent, the broker's memory sampled, and
    /// only then consumed (workload d).
    #[arg(long)]
    pub backlog: bool,
    /// How consumers read (raw driver): `pull` (long-polling pulls, offsets committed in the
    /// next pull) or `pop` (RocketMQ 5 POP: long-polling pops, each batch acknowledged with a
    /// `BATCH_ACK_MESSAGE`). Queues are divided among members the same way in both modes.
    #[arg(long, value_enum, default_value_t = ConsumeMode::Pull)]
    pub consume: ConsumeMode,
    /// Seconds to wait after sending for consumers to receive everything.
    #[arg(long, default_value_t = 20.0)]
    pub drain_timeout: f64,
    /// PID of the broker process: samples its RSS and CPU time (idle, peak, after consumption,
    /// CPU per message).
    #[arg(long)]
    pub broker_pid: Option<u32>,
    /// Extra PIDs whose CPU time counts as the broker's (e.g. a separate name server).
    #[arg(long, value_delimiter = ',')]
    pub extra_pid: Vec<u32>,
    /// Loopback TCP round trips (size-byte ping-pong against an in-process echo thread)
    /// measured before the run as the floor, back to back and, for a paced workload, at its
    /// rate; 0 skips.
    #[arg(long, default_value_t = 2000)]
    pub tcp_probe: usize,
    /// Seconds a backlog run waits after consumption before sampling RSS again.
    #[arg(long, default_value_t = 3.0)]
    pub settle: f64,
    /// Write the results as JSON to this file.
    #[arg(long)]
    pub json: Option<std::path::PathBuf>,
    /// No live progress line.
    #[arg(long, short = 'q')]
    pub quiet: bool,
}

impl BenchArgs {
    /// Checks the arguments and resolves defaults into a [`Workload`].
    ///
    /// # Errors
    ///
    /// [`BenchError::Args`] naming the first argument that makes no workload.
    pub fn workload(&self) -> BenchResult<Workload> {
        let bad = |m: &str| Err(BenchError::Args(m.to_string()));
        if self.size < STAMP_LEN {
            return bad(&format!("--size must be at least {STAMP_LEN} (the stamp)"));
        }
        if self.producers == 0 || self.queues == 0 {
            return bad("--producers and --queues must be at least 1");
        }
        if self.groups > 0 && self.members == 0 {
            return bad("--members must be at least 1");
        }
        if self.mode == SendMode::Async && self.inflight == 0 {
            return bad("--inflight must be at least 1");
        }
        if self.mode == SendMode::Batch && self.batch == 0 {
            return bad("--batch must be at least 1");
        }
        if self.backlog && self.count.is_none() {
            return bad("--backlog needs --count");
        }
        if !(self.duration >= 0.0 && self.warmup >= 0.0 && self.drain_timeout >= 0.0) {
            return bad("durations must be non-negative");
        }
        let lanes = if self.mode == SendMode::Async { self.inflight } else { 1 };
        let per_request = if self.mode == SendMode::Batch { self.batch } else { 1 };
        let topic = self.topic.clone().unwrap_or_else(|| {
            let t = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_millis())
                .unwrap_or(0);
            format!("bench_{}_{}", std::process::id(), t % 1_000_000_000)
        });
        Ok(Workload {
            topic,
            queues: self.queues,
            producers: self.producers,
            lanes,
            per_request,
            groups: self.groups,
            members: self.members,
            size: self.size,
            rate: self.rate,
            duration: Duration::from_secs_f64(self.duration),
            count: self.count,
            warmup: Duration::from_secs_f64(self.warmup),
            backlog: self.backlog,
            drain_timeout: Duration::from_secs_f64(self.drain_timeout),
            consume: self.consume,
        })
    }
}

/// Runs `baiji bench`: picks the driver named by `--driver`, runs, prints the table.
///
/// # Errors
///
/// As [`run`]; also an unknown driver, or `client` without the `bench-client` feature.
pub async fn run_cli(args: &BenchArgs) -> BenchResult<BenchReport> {
    let report = match args.driver.as_str() {
        "raw" => run(args, raw::RawDriver::new(&args.namesrv)).await?,
        #[cfg(feature = "grpc")]
        "grpc" => run(args, grpc::GrpcDriver::new(&args.namesrv, &args.grpc_endpoint)).await?,
        #[cfg(not(feature = "grpc"))]
        "grpc" => {
            return Err(BenchError::Args(
                "the gRPC driver is not built in; rebuild with feature `grpc`".into(),
            ))
        }
        #[cfg(feature = "bench-client")]
        "client" => run(args, client::ClientDriver::new(&args.namesrv)).await?,
        #[cfg(not(feature = "bench-client"))]
        "client" => {
            return Err(BenchError::Args(
                "the client driver (rocketmq-client-rust) is not built in; rebuild with \
                 `cargo run --release --features bench-client -- bench --driver client ...` \
                 (about 280 more crates, ~10 min)"
                    .into(),
            ))
        }
        other => {
            return Err(BenchError::Args(format!(
                "unknown driver `{other}`: use raw, grpc or client (Redis and NATS drivers live in \
                 benches/wire)"
            )))
        }
    };
    println!("{}", report.table());
    Ok(report)
}

/// A resolved workload, what drivers see.
#[derive(Debug, Clone)]
pub struct Workload {
    /// Topic (stream, subject prefix) name.
    pub topic: String,
    /// Queues of the topic.
    pub queues: u32,
    /// Producers (connections).
    pub producers: usize,
    /// Requests in flight per producer connection.
    pub lanes: usize,
    /// Messages per request.
    pub per_request: usize,
    /// Consumer groups.
    pub groups: usize,
    /// Members per group.
    pub members: usize,
    /// Payload bytes.
    pub size: usize,
    /// Target messages per second over all producers; 0 for max rate.
    pub rate: u64,
    /// Sending time after warm-up.
    pub duration: Duration,
    /// Messages after warm-up, instead of `duration`.
    pub count: Option<u64>,
    /// Sending time before measuring.
    pub warmup: Duration,
    /// Send everything, then consume.
    pub backlog: bool,
    /// Longest wait for consumers after sending.
    pub drain_timeout: Duration,
    /// How consumers read.
    pub consume: ConsumeMode,
}

impl Workload {
    /// Name of consumer group `g`.
    #[must_use]
    pub fn group_name(&self, g: usize) -> String {
        format!("{}_g{g}", self.topic)
    }
}

/// A consumer's `poll` over batches its receiving tasks send: waits up to `wait` for one batch,
/// then takes every batch already queued behind it (raw and gRPC drivers).
pub(crate) async fn take_batches(
    rx: &mut tokio::sync::mpsc::Receiver<Vec<Received>>,
    out: &mut Vec<Received>,
    wait: Duration,
) {
    if let Ok(Some(batch)) = tokio::time::timeout(wait, rx.recv()).await {
        out.extend(batch);
        while let Ok(more) = rx.try_recv() {
            out.extend(more);
        }
    }
}

/// One delivered message as a driver hands it to the runner.
#[derive(Debug, Clone)]
pub struct Received {
    /// Queue (stream, subject) it came from; order is checked per queue.
    pub queue: u32,
    /// The payload as sent.
    pub payload: Bytes,
    /// When the consuming task had it decoded ([`now_ns`]); 0 means "when the runner sees it".
    /// Every driver stamps at the same point: once its client (library or connection reader
    /// task) has decoded the reply and the task that consumes it has woken with it — not at the
    /// socket read, which only the raw driver could see. The runner's own hand-off from the
    /// driver is not included.
    pub received_ns: u64,
}

/// Connects producers and consumers to one system under test.
pub trait Driver: Send + Sync + 'static {
    /// A producer's in-flight lane; lanes of one producer may share a connection.
    type Producer: Producer;
    /// One member of a consumer group.
    type Consumer: Consumer;

    /// Creates the topic with `w.queues` queues (and whatever else the system needs) before
    /// anything connects.
    fn prepare(&self, w: &Workload) -> impl Future<Output = BenchResult<()>> + Send;

    /// Opens producer `id` as `w.lanes` lanes sharing one connection.
    fn producer(
        &self,
        w: &Workload,
        id: usize,
    ) -> impl Future<Output = BenchResult<Vec<Self::Producer>>> + Send;

    /// Joins member `member` of group `group`; it must be registered (hold messages) when this
    /// returns, and must not receive before the first [`Consumer::poll`].
    fn consumer(
        &self,
        w: &Workload,
        group: usize,
        member: usize,
    ) -> impl Future<Output = BenchResult<Self::Consumer>> + Send;

    /// Removes what [`Driver::prepare`] created, where the system allows it. Best effort.
    fn cleanup(&self, w: &Workload) -> impl Future<Output = ()> + Send;
}

/// One lane of a producer.
pub trait Producer: Send + 'static {
    /// Sends `msgs` (one message, or one batch) to queue `queue` and waits for the
    /// acknowledgement.
    fn send(&mut self, queue: u32, msgs: &[Bytes]) -> impl Future<Output = BenchResult<()>> + Send;

    /// Closes the lane.
    fn close(self) -> impl Future<Output = ()> + Send;
}

/// One member of a consumer group.
pub trait Consumer: Send + 'static {
    /// Appends what arrives within `wait` (at least one message, or none at the timeout) to
    /// `out`, acknowledging what earlier calls returned.
    fn poll(
        &mut self,
        out: &mut Vec<Received>,
        wait: Duration,
    ) -> impl Future<Output = BenchResult<()>> + Send;

    /// Leaves the group.
    fn close(self) -> impl Future<Output = ()> + Send;
}
