//! The segment log across real process deaths: a child process appends and says which records
//! it committed ("answered"), the test kills it with SIGKILL at seeded points and reopens the
//! directory; and a child holding the directory makes a second opener fail with its pid.
//!
//! The child is this test binary run again with `BAIJI_SHM_CHILD` set: the same test function
//! then plays the child's part (and never returns to the harness: it is killed, or it exits).

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use baiji::shm::{Directory, LogConfig, Reclaim, RecordMeta, Recovered, SegmentError};
use crossbeam_epoch::Collector;

const OWNER: &str = "restart-test/broker-a";
const CHILD: &str = "BAIJI_SHM_CHILD";

fn config() -> LogConfig {
    LogConfig { segment_size: 256 << 10, reclaim: Reclaim::OnTruncate, ..LogConfig::default() }
}

/// A fresh directory (tmpfs when there is one), removed when dropped.
struct TestDir(PathBuf);

impl TestDir {
    fn new(tag: &str) -> TestDir {
        let base = if Path::new("/dev/shm").is_dir() {
            PathBuf::from("/dev/shm")
        } else {
            std::env::temp_dir()
        };
        let p = base.join(format!("baiji-shm-it-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        TestDir(p)
    }
}

impl Drop for TestDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The payload of record `claim` of `stream`: its length and bytes follow from both.
fn expected(stream: u64, claim: u64) -> Vec<u8> {
    let mut x =
        stream.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ claim.wrapping_mul(0xBF58_476D_1CE4_E5B9);
    let len = (x % 1500) as usize;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Starts this test again as a child playing `role`.
fn spawn_child(test: &str, role: &str) -> Child {
    let exe = std::env::current_exe().expect("the test binary's path");
    Command::new(exe)
        .args([test, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD, role)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn the child")
}

/// The child's part in the crash test: two threads append and commit records of streams
/// `run * 16 + thread` forever, printing each one after its commit.
fn writer_child(dir: &str, run: u64) -> ! {
    let dir = Directory::open(dir, OWNER).expect("child: open the directory");
    let (log, _) =
        dir.open_log("messages", config(), Collector::new(), drop).expect("child: open the log");
    std::thread::scope(|s| {
        for t in 0..2u64 {
            let log = &log;
            s.spawn(move || {
                let h = log.collector().register();
                let stream = run * 16 + t;
                let out = std::io::stdout();
                // Bounded, should the parent fail to kill it; the pipe's backpressure keeps it
                // a few thousand records ahead of what the parent read.
                for claim in 0..100_000 {
                    let p = expected(stream, claim);
                    let g = h.pin();
                    let meta = RecordMeta { kind: 1, stream, claim };
                    let r = log
                        .append(meta, &[&p[..p.len() / 3], &p[p.len() / 3..]], &g)
                        .expect("child: append");
                    drop(r.commit());
                    // The answer goes out only after the commit.
                    if writeln!(out.lock(), "answered {stream} {claim}").is_err() {
                        std::process::exit(1); // the parent is gone
                    }
                }
            });
        }
    });
    std::process::exit(0)
}

/// The child's part in the lock test: hold the directory until stdin closes.
fn holder_child(dir: &str) -> ! {
    let _dir = Directory::open(dir, OWNER).expect("child: open the directory");
    // On a line of its own (the harness has printed the test's name without a newline).
    println!("\nlocked");
    let mut line = String::new();
    let _ = std::io::stdin().read_line(&mut line);
    std::process::exit(0)
}

#[test]
fn given_a_writer_killed_with_sigkill_when_the_directory_is_reopened_should_have_every_answered_record(
) {
    if let Ok(role) = std::env::var(CHILD) {
        let mut parts = role.splitn(3, ':');
        if let (Some("writer"), Some(run), Some(dir)) = (parts.next(), parts.next(), parts.next()) {
            writer_child(dir, run.parse().expect("run number"));
        }
        panic!("unknown child role {role:?}");
    }
    let td = TestDir::new("sigkill");
    let dir = td.0.to_string_lossy().into_owned();
    // Seeded kill points: how many answers to read before the SIGKILL.
    let kill_after = [37u64, 400, 3, 1200, 150, 777];
    let mut answered: Vec<(u64, u64)> = Vec::new();
    for (run, &after) in kill_after.iter().enumerate() {
        let mut child =
            spawn_child("given_a_writer_killed_with_sigkill_when_the_directory_is_reopened_should_have_every_answered_record", &format!("writer:{run}:{dir}"));
        let mut lines = BufReader::new(child.stdout.take().expect("child stdout")).lines();
        let mut seen = 0;
        while seen < after {
            match lines.next() {
                Some(Ok(l)) if l.starts_with("answered ") => {
                    seen += 1;
                    answered.push(parse(&l));
                }
                Some(Ok(_)) => {}
                other => panic!("the child stopped before {after} answers: {other:?}"),
            }
        }
        child.kill().expect("SIGKILL the child");
        let _ = child.wait();
        // Everything it printed before dying was answered too.
        for l in lines.map_while(Result::ok) {
            if l.starts_with("answered ") {
                answered.push(parse(&l));
            }
        }

        // The kill released the lock; every answer is in the directory.
        let d = Directory::open(&td.0, OWNER).expect("the killed child's lock is gone");
        let mut found: HashMap<(u64, u64), Vec<u8>> = HashMap::new();
        let (_log, report) = d
            .open_log("messages", config(), Collector::new(), |r| {
                if let Recovered::Record(r) = r {
                    found.insert((r.stream, r.claim), r.payload.to_vec());
                }
            })
            .expect("reopen the log");
        assert!(report.quarantined.is_empty(), "a crash damages no segment header: {report:?}");
        for (stream, claim) in &answered {
            let got = found.get(&(*stream, *claim));
            assert_eq!(
                got.map(Vec::as_slice),
                Some(&expected(*stream, *claim)[..]),
                "run {run}: record {stream}/{claim} was answered, so it is recovered unchanged"
            );
        }
        for ((stream, claim), payload) in &found {
            assert_eq!(
                payload,
                &expected(*stream, *claim),
                "every recovered record is one that was written"
            );
        }
    }
    assert!(answered.len() as u64 >= kill_after.iter().sum::<u64>());
}

fn parse(line: &str) -> (u64, u64) {
    let mut it = line.split_whitespace().skip(1).map(|x| x.parse::<u64>().expect("a number"));
    (it.next().expect("stream"), it.next().expect("claim"))
}

#[test]
fn given_a_directory_held_by_another_process_when_opened_should_name_its_pid() {
    if let Ok(role) = std::env::var(CHILD) {
        if let Some(dir) = role.strip_prefix("holder:") {
            holder_child(dir);
        }
        panic!("unknown child role {role:?}");
    }
    let td = TestDir::new("holder");
    let mut child = spawn_child(
        "given_a_directory_held_by_another_process_when_opened_should_name_its_pid",
        &format!("holder:{}", td.0.display()),
    );
    let mut lines = BufReader::new(child.stdout.take().expect("child stdout")).lines();
    loop {
        match lines.next() {
            Some(Ok(l)) if l == "locked" => break,
            Some(Ok(_)) => {}
            other => panic!("the child did not lock the directory: {other:?}"),
        }
    }
    match Directory::open(&td.0, OWNER) {
        Err(SegmentError::Locked { pid, .. }) => {
            assert_eq!(pid, Some(child.id()), "the refusal names the process holding the directory")
        }
        other => panic!("a second process must be refused, got {other:?}"),
    }
    let msg = Directory::open(&td.0, OWNER).map(|_| ()).expect_err("still held").to_string();
    assert!(msg.contains(&child.id().to_string()), "the message names the pid: {msg}");
    child.kill().expect("SIGKILL the holder");
    let _ = child.wait();
    assert!(Directory::open(&td.0, OWNER).is_ok(), "a killed holder leaves the directory unlocked");
}
