//! What TLS and ACL add per request on the remoting port, measured so that a noisy shared
//! machine cannot fake or hide it: paired, interleaved runs, and CPU time as well as latency.
//!
//! Two brokers run on ONE dedicated broker thread (a current-thread tokio runtime):
//! * broker P, `tls-mode permissive`: a plaintext and a TLS connection (rustls/aws-lc-rs,
//!   TLS 1.3, an ECDSA P-256 certificate generated here) reach the same port and the same
//!   connection code;
//! * broker A, `acl-file` with one account: a plaintext connection whose requests are signed as
//!   the Java `AclClientRPCHook` signs them (the broker verifies each one).
//!
//! The client is ONE other thread (the main thread, a current-thread runtime) doing one
//! synchronous round trip at a time (SEND_MESSAGE, answered). Threads: 2 busy (broker, client)
//! plus the engine's reaper, mostly asleep.
//!
//! A round runs a block of `BLOCK` round trips under each condition (`plain`, `tls`, `acl`), in
//! an order that rotates through all six permutations, so slow phases of the machine fall on
//! every condition alike. Per block it records, per request: wall time, the broker thread's
//! CPU time and the client thread's (`/proc/self/task/<tid>/schedstat`, nanoseconds of
//! on-CPU time: time the thread spent waiting for a CPU taken by other processes is not in
//! it). The cost of TLS is then the median over rounds of the paired difference
//! `tls - plain` (same round, minutes apart at most), with its interquartile range; same for
//! `acl - plain`. Last, handshakes: blocks of fresh connections (connect + one request),
//! plaintext vs TLS (full handshake, no resumption), paired the same way.
//!
//! `cargo bench --bench tls_cost` (release). `BAIJI_TLS_COST_ROUNDS` sets the rounds (default
//! 150). Output: a Markdown report on stdout (benches/results/security/tls_cost.md keeps one).

use std::sync::mpsc;
use std::sync::Arc;
use std::time::Instant;

use baiji::broker::{BrokerConfig, TlsMode};
use baiji::remoting::code::request_code as rc;
use baiji::remoting::header::{SendHeaderVersion, SendMessageRequestHeader};
use baiji::remoting::{ExtFields, RemotingCommand};
use bytes::{Bytes, BytesMut};
use rcgen::{CertificateParams, KeyPair};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::rustls::crypto::aws_lc_rs;
use tokio_rustls::rustls::pki_types::{CertificateDer, ServerName};
use tokio_rustls::rustls::{ClientConfig, RootCertStore};
use tokio_rustls::TlsConnector;

/// Round trips per condition per round.
const BLOCK: u32 = 100;
/// Fresh connections per condition per handshake round.
const HANDSHAKE_BLOCK: u32 = 10;
const AK: &str = "bench";
const SK: &str = "bench-secret";

fn send_frame(body: &Bytes, signed: bool) -> BytesMut {
    let h = SendMessageRequestHeader {
        producer_group: "bench_producer",
        topic: "TlsBench",
        default_topic: "TBW102",
        default_topic_queue_nums: 4,
        queue_id: 0,
        sys_flag: 0,
        born_timestamp: 1_700_000_000_000,
        flag: 0,
        properties: "TAGS\u{1}TagA\u{2}",
        reconsume_times: 0,
        unit_mode: false,
        max_reconsume_times: None,
        batch: false,
        broker_name: None,
    };
    let mut ext = ExtFields::new();
    h.write_ext_fields_as(&mut ext, SendHeaderVersion::V1);
    let mut cmd =
        RemotingCommand::request(rc::SEND_MESSAGE, 1).with_ext_fields(ext).with_body(body.clone());
    if signed {
        baiji::broker::acl::Credentials { access_key: AK.into(), secret_key: SK.into() }
            .sign(&mut cmd);
    }
    let mut out = BytesMut::new();
    cmd.encode(&mut out).expect("encodable");
    out
}

/// Writes `frame` and reads one answer.
async fn round_trip<S: AsyncRead + AsyncWrite + Unpin>(
    s: &mut S,
    frame: &[u8],
    buf: &mut BytesMut,
) {
    s.write_all(frame).await.expect("write");
    s.flush().await.expect("flush");
    loop {
        if let Some(resp) = RemotingCommand::decode(buf).expect("a frame") {
            assert_eq!(resp.code, 0, "the send succeeds: {resp:?}");
            return;
        }
        assert!(s.read_buf(buf).await.expect("read") > 0, "the broker answers");
    }
}

/// This thread's id, from `/proc/thread-self` (`<pid>/task/<tid>`).
fn own_tid() -> u32 {
    let link = std::fs::read_link("/proc/thread-self").expect("/proc/thread-self");
    link.file_name().and_then(|s| s.to_str()).and_then(|s| s.parse().ok()).expect("a tid")
}

/// Nanoseconds thread `tid` of this process has run on a CPU.
fn cpu_ns(tid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/self/task/{tid}/schedstat")).expect("schedstat");
    s.split_whitespace().next().and_then(|v| v.parse().ok()).expect("on-CPU ns")
}

/// One block's figures, per request: wall, broker CPU, client CPU (ns).
#[derive(Debug, Clone, Copy, Default)]
struct Sample {
    wall: f64,
    broker: f64,
    client: f64,
}

struct Meter {
    broker_tid: u32,
    client_tid: u32,
}

impl Meter {
    /// Runs `n` repetitions of `f` and returns the per-repetition figures.
    fn measure(&self, n: u32, f: impl FnOnce()) -> Sample {
        let (b0, c0) = (cpu_ns(self.broker_tid), cpu_ns(self.client_tid));
        let t0 = Instant::now();
        f();
        let wall = t0.elapsed().as_nanos() as f64;
        let (b1, c1) = (cpu_ns(self.broker_tid), cpu_ns(self.client_tid));
        let n = f64::from(n);
        Sample {
            wall: wall / n,
            broker: b1.saturating_sub(b0) as f64 / n,
            client: c1.saturating_sub(c0) as f64 / n,
        }
    }
}

/// The six orders of three conditions; round `r` uses `ORDERS[r % 6]`.
const ORDERS: [[usize; 3]; 6] = [[0, 1, 2], [1, 2, 0], [2, 0, 1], [0, 2, 1], [2, 1, 0], [1, 0, 2]];

/// `/proc/loadavg`'s 1, 5 and 15-minute figures.
fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let pos = q * (sorted.len() - 1) as f64;
    let (lo, hi) = (pos.floor() as usize, pos.ceil() as usize);
    sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - lo as f64)
}

/// `median [p25, p75]` of `v`, in µs.
fn summary(mut v: Vec<f64>) -> String {
    v.sort_by(f64::total_cmp);
    format!(
        "{:.2} [{:.2}, {:.2}]",
        quantile(&v, 0.5) / 1e3,
        quantile(&v, 0.25) / 1e3,
        quantile(&v, 0.75) / 1e3
    )
}

fn report(title: &str, names: &[&str], rounds: &[Vec<Sample>]) {
    println!("\n### {title}\n");
    println!("Per request, µs: median [p25, p75] over {} rounds.\n", rounds.len());
    println!("| condition | wall | broker thread CPU | client thread CPU |");
    println!("|---|---|---|---|");
    let col = |i: usize, f: fn(&Sample) -> f64| rounds.iter().map(|r| f(&r[i])).collect();
    for (i, name) in names.iter().enumerate() {
        println!(
            "| {name} | {} | {} | {} |",
            summary(col(i, |s| s.wall)),
            summary(col(i, |s| s.broker)),
            summary(col(i, |s| s.client))
        );
    }
    let diff = |i: usize, f: fn(&Sample) -> f64| -> Vec<f64> {
        rounds.iter().map(|r| f(&r[i]) - f(&r[0])).collect()
    };
    for (i, name) in names.iter().enumerate().skip(1) {
        println!(
            "| **{name} − {}** (paired) | {} | {} | {} |",
            names[0],
            summary(diff(i, |s| s.wall)),
            summary(diff(i, |s| s.broker)),
            summary(diff(i, |s| s.client))
        );
    }
}

fn main() {
    let rounds: usize =
        std::env::var("BAIJI_TLS_COST_ROUNDS").ok().and_then(|v| v.parse().ok()).unwrap_or(150);
    let dir = std::env::temp_dir().join(format!("baiji-tls-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    let key = KeyPair::generate().expect("a key");
    let cert = CertificateParams::new(vec!["localhost".to_string()])
        .expect("params")
        .self_signed(&key)
        .expect("a certificate");
    std::fs::write(dir.join("cert.pem"), cert.pem()).expect("write");
    std::fs::write(dir.join("key.pem"), key.serialize_pem()).expect("write");
    std::fs::write(
        dir.join("plain_acl.yml"),
        format!(
            "accounts:\n  - accessKey: {AK}\n    secretKey: {SK}\n    defaultTopicPerm: PUB\n    \
             defaultGroupPerm: SUB\n"
        ),
    )
    .expect("write");
    let base = BrokerConfig {
        core: baiji::broker::CoreConfig {
            // The bench's sends are never consumed; keep them from filling the budget.
            retention_bytes: 4 * 1024 * 1024,
            ..Default::default()
        },
        remoting: baiji::broker::RemotingConfig {
            listen: "127.0.0.1:0".parse().expect("an address"),
            namesrv_listen: None,
            ..Default::default()
        },
        ..BrokerConfig::default()
    };
    let tls_config = BrokerConfig {
        security: baiji::broker::SecurityConfig {
            tls_mode: TlsMode::Permissive,
            tls_cert: Some(dir.join("cert.pem")),
            tls_key: Some(dir.join("key.pem")),
            ..base.security.clone()
        },
        ..base.clone()
    };
    let acl_config = BrokerConfig {
        security: baiji::broker::SecurityConfig {
            acl_file: Some(dir.join("plain_acl.yml")),
            ..base.security.clone()
        },
        ..base
    };

    // The broker thread: both brokers on one current-thread runtime, until `stop` fires.
    let (ready_tx, ready_rx) = mpsc::channel();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let broker_thread = std::thread::Builder::new()
        .name("broker".into())
        .spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime");
            rt.block_on(async move {
                let p = baiji::broker::start(tls_config).await.expect("broker P starts");
                let a = baiji::broker::start(acl_config).await.expect("broker A starts");
                let addrs = (
                    p.broker_addr().expect("an address"),
                    a.broker_addr().expect("an address"),
                    own_tid(),
                );
                ready_tx.send(addrs).expect("the client waits");
                let _ = stop_rx.await;
                p.shutdown().await;
                a.shutdown().await;
            });
        })
        .expect("the broker thread");
    let (p_addr, a_addr, broker_tid) = ready_rx.recv().expect("the brokers start");
    let meter = Meter { broker_tid, client_tid: own_tid() };

    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    let mut roots = RootCertStore::empty();
    roots.add(CertificateDer::from(cert.der().to_vec())).expect("a root");
    let connector = TlsConnector::from(Arc::new(
        ClientConfig::builder_with_provider(Arc::new(aws_lc_rs::default_provider()))
            .with_safe_default_protocol_versions()
            .expect("versions")
            .with_root_certificates(roots)
            .with_no_client_auth(),
    ));
    let connect_plain = |addr| async move {
        let tcp = TcpStream::connect(addr).await.expect("connect");
        tcp.set_nodelay(true).expect("nodelay");
        tcp
    };
    let connect_tls = || async {
        let tcp = connect_plain(p_addr).await;
        let name = ServerName::try_from("localhost").expect("a name");
        connector.connect(name, tcp).await.expect("a handshake")
    };
    let mut plain = rt.block_on(connect_plain(p_addr));
    let mut tls = rt.block_on(connect_tls());
    let mut acl = rt.block_on(connect_plain(a_addr));
    let mut buf = BytesMut::new();

    println!("## TLS and ACL cost per request (benches/tls_cost.rs)\n");
    println!(
        "{rounds} rounds × {BLOCK} round trips per condition (handshakes: {} rounds × \
         {HANDSHAKE_BLOCK} connections), conditions interleaved in rotating order; threads: \
         broker 1, client 1 (plus the engine's reaper). Machine: {} CPUs online, load average \
         at start {}.",
        rounds / 2,
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        loadavg()
    );
    for (label, size) in
        [("SEND_MESSAGE, 128 B body", 128usize), ("SEND_MESSAGE, 16 KiB body", 16 * 1024)]
    {
        let body = Bytes::from(vec![b'x'; size]);
        let (frame, signed) = (send_frame(&body, false), send_frame(&body, true));
        let mut all = Vec::with_capacity(rounds);
        // Round 0 warms up (connections, allocator, caches) and is dropped.
        for r in 0..=rounds {
            let mut samples = [Sample::default(); 3];
            for &cond in &ORDERS[r % 6] {
                samples[cond] = meter.measure(BLOCK, || {
                    rt.block_on(async {
                        for _ in 0..BLOCK {
                            match cond {
                                0 => round_trip(&mut plain, &frame, &mut buf).await,
                                1 => round_trip(&mut tls, &frame, &mut buf).await,
                                _ => round_trip(&mut acl, &signed, &mut buf).await,
                            }
                        }
                    })
                });
            }
            if r > 0 {
                all.push(samples.to_vec());
            }
        }
        report(label, &["plain", "tls", "acl"], &all);
    }

    let frame = send_frame(&Bytes::from_static(&[b'x'; 128]), false);
    let mut all = Vec::new();
    for r in 0..=rounds / 2 {
        let mut samples = [Sample::default(); 2];
        let order: [usize; 2] = if r % 2 == 0 { [0, 1] } else { [1, 0] };
        for cond in order {
            samples[cond] = meter.measure(HANDSHAKE_BLOCK, || {
                rt.block_on(async {
                    for _ in 0..HANDSHAKE_BLOCK {
                        let mut b = BytesMut::new();
                        if cond == 0 {
                            round_trip(&mut connect_plain(p_addr).await, &frame, &mut b).await;
                        } else {
                            round_trip(&mut connect_tls().await, &frame, &mut b).await;
                        }
                    }
                })
            });
        }
        if r > 0 {
            all.push(samples.to_vec());
        }
    }
    report("New connection + one 128 B send (TLS: full handshake)", &["plain", "tls"], &all);

    println!("\nLoad average at the end: {}.", loadavg());
    let _ = stop_tx.send(());
    broker_thread.join().expect("the broker thread ends");
    let _ = std::fs::remove_dir_all(&dir);
}
