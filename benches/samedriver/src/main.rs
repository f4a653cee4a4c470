//! `baiji-samedriver`: the same-driver request-latency benchmark of issue 28.
//!
//! One blocking driver (std only, no async runtime, one thread) sends a request that was
//! encoded once before the loop and waits for its answer, one request in flight, for every
//! system alike: baiji's remoting face (SEND_MESSAGE_V2 as the Java 4.9.7 client writes it),
//! baiji's gRPC face (`MessagingService/SendMessage` over hand-written h2c), Redis (`XADD`),
//! NATS JetStream (publish with ack) and a TCP echo server (the floor: the same loop, socket
//! and payload with no broker work behind it).
//!
//! ```text
//! baiji-samedriver echo-server --port 17000
//! baiji-samedriver run --system redis --addr 127.0.0.1:16379 --requests 20000 --warmup 2000 \
//!     --size 128 --out redis.json
//! ```
//!
//! Per request the loop patches fixed-width fields in place (an opaque, a message id, an h2
//! stream id) *before* it takes the start stamp; the timed part is one `write` of the request
//! bytes and the reads until the whole answer is in and checked. A failure answer aborts the
//! run with the system's own error text; it is never counted.

mod echo;
mod grpc;
mod hpack;
mod json;
mod nats;
mod net;
mod redis;
mod remoting;

use std::fmt::Write as _;
use std::io::Write as _;
use std::net::{SocketAddr, ToSocketAddrs};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Every error is a message for a person; `main` prints it and exits 1.
pub(crate) type Res<T> = Result<T, String>;

/// One system's request/answer exchange on an open connection.
pub(crate) trait Driver {
    /// Patches the fixed-width fields of request number `seq` in place (untimed).
    fn prepare(&mut self, seq: u64);
    /// Writes the request with one write call and reads until its answer is complete and
    /// checked (timed). `keep`: also note what the answer says (an offset, an id) for the
    /// run's record; asked for the first and the last measured request only.
    fn round_trip(&mut self, keep: bool) -> Res<()>;
    /// Bytes of one request on the wire.
    fn request_len(&self) -> usize;
    /// What the kept answers said, as `(key, JSON value)` pairs.
    fn notes(&self) -> Vec<(String, String)>;
}

const USAGE: &str = "\
usage:
  baiji-samedriver echo-server [--port P] [--bind HOST]
  baiji-samedriver run --system SYSTEM --addr HOST:PORT [options]

systems: echo, redis, nats, baiji-remoting, baiji-grpc

run options:
  --requests N        measured requests (default 20000)
  --warmup N          requests before them, not recorded (default 2000)
  --size N            payload bytes (default 128)
  --out FILE          write the result as JSON
  --timeout-ms N      read/connect timeout (default 10000)
  --topic NAME        baiji topic (default samedriver-bench)
  --group NAME        baiji producer group (default samedriver-pg)
  --broker-name NAME  baiji broker name, header field n (default baiji-a)
  --stream NAME       Redis stream key / NATS stream name (default samedriver)
  --subject NAME      NATS subject (default samedriver.bench)
";

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Err(e) = real_main(&args) {
        eprintln!("baiji-samedriver: error: {e}");
        std::process::exit(1);
    }
}

fn real_main(args: &[String]) -> Res<()> {
    match args.get(1).map(String::as_str) {
        Some("echo-server") => {
            let o = Opts::parse(&args[2..])?;
            echo::serve(&o.bind, o.port.ok_or("echo-server needs --port P")?)
        }
        Some("run") => run(&Opts::parse(&args[2..])?, args),
        Some("help" | "--help" | "-h") => {
            print!("{USAGE}");
            Ok(())
        }
        Some(other) => Err(format!("unknown subcommand {other:?}\n{USAGE}")),
        None => Err(format!("no subcommand\n{USAGE}")),
    }
}

/// The command-line options of both subcommands.
#[derive(Debug)]
pub(crate) struct Opts {
    pub(crate) system: Option<String>,
    pub(crate) addr: Option<String>,
    pub(crate) requests: usize,
    pub(crate) warmup: usize,
    pub(crate) size: usize,
    pub(crate) out: Option<String>,
    pub(crate) timeout: Duration,
    pub(crate) topic: String,
    pub(crate) group: String,
    pub(crate) broker_name: String,
    pub(crate) stream: String,
    pub(crate) subject: String,
    pub(crate) port: Option<u16>,
    pub(crate) bind: String,
}

impl Opts {
    fn parse(args: &[String]) -> Res<Opts> {
        let mut o = Opts {
            system: None,
            addr: None,
            requests: 20_000,
            warmup: 2_000,
            size: 128,
            out: None,
            timeout: Duration::from_millis(10_000),
            topic: "samedriver-bench".into(),
            group: "samedriver-pg".into(),
            broker_name: "baiji-a".into(),
            stream: "samedriver".into(),
            subject: "samedriver.bench".into(),
            port: None,
            bind: "127.0.0.1".into(),
        };
        let mut it = args.iter();
        while let Some(flag) = it.next() {
            let mut value = || it.next().cloned().ok_or_else(|| format!("{flag} needs a value"));
            match flag.as_str() {
                "--system" => o.system = Some(value()?),
                "--addr" => o.addr = Some(value()?),
                "--requests" => o.requests = number(flag, &value()?)?,
                "--warmup" => o.warmup = number(flag, &value()?)?,
                "--size" => o.size = number(flag, &value()?)?,
                "--out" => o.out = Some(value()?),
                "--timeout-ms" => o.timeout = Duration::from_millis(number(flag, &value()?)?),
                "--topic" => o.topic = value()?,
                "--group" => o.group = value()?,
                "--broker-name" => o.broker_name = value()?,
                "--stream" => o.stream = value()?,
                "--subject" => o.subject = value()?,
                "--port" => o.port = Some(number(flag, &value()?)?),
                "--bind" => o.bind = value()?,
                _ => return Err(format!("unknown option {flag:?}\n{USAGE}")),
            }
        }
        if o.timeout.is_zero() {
            return Err("--timeout-ms must be more than 0".into());
        }
        Ok(o)
    }
}

fn number<T: std::str::FromStr>(flag: &str, v: &str) -> Res<T>
where
    T::Err: std::fmt::Display,
{
    v.parse().map_err(|e| format!("{flag} {v:?}: {e}"))
}

/// The payload every system carries: `size` printable bytes (so the text protocols show it
/// plainly in a capture), the same for all.
pub(crate) fn payload(size: usize) -> Vec<u8> {
    (0..size).map(|i| b"abcdefghijklmnopqrstuvwxyz0123456789"[i % 36]).collect()
}

fn resolve(addr: &str) -> Res<SocketAddr> {
    addr.to_socket_addrs()
        .map_err(|e| format!("address {addr:?}: {e}"))?
        .next()
        .ok_or_else(|| format!("address {addr:?} resolves to nothing"))
}

fn run(o: &Opts, argv: &[String]) -> Res<()> {
    let system = o.system.as_deref().ok_or("run needs --system")?;
    let addr_text = o.addr.as_deref().ok_or("run needs --addr HOST:PORT")?;
    if o.requests == 0 {
        return Err("--requests must be at least 1".into());
    }
    if o.size == 0 {
        return Err("--size must be at least 1".into());
    }
    let addr = resolve(addr_text)?;
    let stream = net::connect(addr, o.timeout)?;
    let mut driver: Box<dyn Driver> = match system {
        "echo" => Box::new(echo::Echo::new(stream, o)),
        "redis" => Box::new(redis::Redis::new(stream, o)),
        "nats" => Box::new(nats::Nats::setup(stream, o)?),
        "baiji-remoting" => Box::new(remoting::Remoting::setup(stream, o)?),
        "baiji-grpc" => Box::new(grpc::Grpc::setup(stream, addr_text, o)?),
        other => {
            return Err(format!(
                "unknown --system {other:?} (echo, redis, nats, baiji-remoting, baiji-grpc)"
            ))
        }
    };
    let total = o.warmup + o.requests;
    let mut samples: Vec<u64> = Vec::with_capacity(o.requests);
    let started = Instant::now();
    for i in 0..total {
        let keep = i == o.warmup || i + 1 == total;
        driver.prepare(i as u64);
        let t = Instant::now();
        driver.round_trip(keep).map_err(|e| format!("{system}: request {i}: {e}"))?;
        let ns = t.elapsed().as_nanos();
        if i >= o.warmup {
            samples.push(u64::try_from(ns).unwrap_or(u64::MAX));
        }
    }
    let wall = started.elapsed();
    let stats = Stats::of(&mut samples);
    eprintln!(
        "{system}: {} requests ({} warmup) of {} B in {:.2} s: p50 {:.1} us, p90 {:.1} us, \
         p99 {:.1} us, p99.9 {:.1} us, max {:.1} us, mean {:.1} us",
        o.requests,
        o.warmup,
        o.size,
        wall.as_secs_f64(),
        stats.p50,
        stats.p90,
        stats.p99,
        stats.p999,
        stats.max,
        stats.mean
    );
    if let Some(path) = &o.out {
        let json = result_json(system, addr_text, o, &stats, driver.as_ref(), wall, argv);
        let mut f =
            std::fs::File::create(path).map_err(|e| format!("cannot create {path}: {e}"))?;
        f.write_all(json.as_bytes()).map_err(|e| format!("cannot write {path}: {e}"))?;
    }
    Ok(())
}

/// Percentiles of the samples, microseconds (nearest rank on the sorted samples).
#[derive(Debug)]
struct Stats {
    min: f64,
    p50: f64,
    p90: f64,
    p99: f64,
    p999: f64,
    max: f64,
    mean: f64,
}

impl Stats {
    fn of(samples: &mut [u64]) -> Stats {
        samples.sort_unstable();
        let n = samples.len();
        let us = |ns: u64| ns as f64 / 1000.0;
        // Nearest rank: the smallest sample with at least q of all samples at or below it.
        let at = |q: f64| us(samples[((q * n as f64).ceil() as usize).clamp(1, n) - 1]);
        let sum: u128 = samples.iter().map(|&s| u128::from(s)).sum();
        Stats {
            min: us(samples[0]),
            p50: at(0.50),
            p90: at(0.90),
            p99: at(0.99),
            p999: at(0.999),
            max: us(samples[n - 1]),
            mean: sum as f64 / n as f64 / 1000.0,
        }
    }
}

fn result_json(
    system: &str,
    addr: &str,
    o: &Opts,
    s: &Stats,
    d: &dyn Driver,
    wall: Duration,
    argv: &[String],
) -> String {
    let since_epoch = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
    let now = since_epoch.as_secs();
    let mut j = String::from("{\n");
    let mut field = |k: &str, v: String| {
        let _ = writeln!(j, "  {}: {v},", json::quote(k));
    };
    field("system", json::quote(system));
    field("addr", json::quote(addr));
    field("requests", o.requests.to_string());
    field("warmup", o.warmup.to_string());
    field("size", o.size.to_string());
    field("request_bytes", d.request_len().to_string());
    field("min_us", format!("{:.3}", s.min));
    field("p50_us", format!("{:.3}", s.p50));
    field("p90_us", format!("{:.3}", s.p90));
    field("p99_us", format!("{:.3}", s.p99));
    field("p999_us", format!("{:.3}", s.p999));
    field("max_us", format!("{:.3}", s.max));
    field("mean_us", format!("{:.3}", s.mean));
    field("wall_s", format!("{:.3}", wall.as_secs_f64()));
    for (k, v) in d.notes() {
        field(&k, v);
    }
    field("unix_ms", since_epoch.as_millis().to_string());
    let command: Vec<String> = argv.iter().map(|a| shell_word(a)).collect();
    field("command", json::quote(&command.join(" ")));
    let _ = write!(j, "  \"timestamp\": {}\n}}\n", json::quote(&rfc3339(now)));
    j
}

/// `a` as one shell word.
fn shell_word(a: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "-_./:=@,+%".contains(c);
    if !a.is_empty() && a.chars().all(plain) {
        a.to_owned()
    } else {
        format!("'{}'", a.replace('\'', r"'\''"))
    }
}

/// Seconds since the epoch as `YYYY-MM-DDTHH:MM:SSZ` (days-from-civil, inverted).
fn rfc3339(secs: u64) -> String {
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil(days as i64);
    format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z", rem / 3600, rem / 60 % 60, rem % 60)
}

/// The proleptic Gregorian date of `days` since 1970-01-01 (Howard Hinnant's algorithm).
pub(crate) fn civil(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let mut v: Vec<u64> = (1..=1000).rev().map(|x| x * 1000).collect();
        let s = Stats::of(&mut v);
        assert_eq!((s.min, s.p50, s.p99, s.p999, s.max), (1.0, 500.0, 990.0, 999.0, 1000.0));
        assert!((s.mean - 500.5).abs() < 1e-9);
    }

    #[test]
    fn dates() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(1_700_000_000), "2023-11-14T22:13:20Z");
    }

    #[test]
    fn options() {
        let a: Vec<String> =
            ["--system", "redis", "--requests", "5"].iter().map(|s| s.to_string()).collect();
        let o = Opts::parse(&a).unwrap();
        assert_eq!((o.system.as_deref(), o.requests, o.warmup), (Some("redis"), 5, 2000));
        let bad: Vec<String> = ["--requests", "x"].iter().map(|s| s.to_string()).collect();
        assert!(Opts::parse(&bad).unwrap_err().contains("--requests"));
        let missing: Vec<String> = vec!["--size".into()];
        assert!(Opts::parse(&missing).unwrap_err().contains("needs a value"));
    }
}
