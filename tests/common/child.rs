//! A client process run to its end: the real-client harnesses (`java_go`, `grpc_clients`)
//! start a program, read its stdout lines and stderr, and give up after a patience.

use std::io::{BufRead, BufReader, Read};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// What a finished (or timed-out) process left.
pub(crate) struct Finished {
    /// Its exit status; `None` when it was killed for outliving the patience.
    pub(crate) status: Option<ExitStatus>,
    /// Every line it printed on stdout.
    pub(crate) lines: Vec<String>,
    /// The last `tail` characters of its stderr.
    pub(crate) stderr_tail: String,
}

/// Runs `cmd` (stdin closed, stdout and stderr piped) until it exits or `patience` passes,
/// when it is killed. Blocking: call it from `spawn_blocking`. `what` names it in panics.
pub(crate) fn run_to_end(
    mut cmd: Command,
    what: &str,
    patience: Duration,
    tail: usize,
) -> Finished {
    cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap_or_else(|e| panic!("{what}: cannot start: {e}"));
    let stdout = child.stdout.take().expect("piped stdout");
    let mut stderr = child.stderr.take().expect("piped stderr");
    let lines = std::thread::spawn(move || {
        BufReader::new(stdout).lines().map_while(Result::ok).collect::<Vec<String>>()
    });
    let errors = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });
    let start = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break Some(s),
            Ok(None) if start.elapsed() < patience => std::thread::sleep(Duration::from_millis(50)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
        }
    };
    let lines = lines.join().expect("the stdout reader");
    let errors = errors.join().expect("the stderr reader");
    let skip = errors.chars().count().saturating_sub(tail);
    Finished { status, lines, stderr_tail: errors.chars().skip(skip).collect() }
}
