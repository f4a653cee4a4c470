//! The harness of `tests/java_go.rs`: finds the shared clients, compiles the Java program and
//! builds the Go program once per source change, runs one scenario as a child process against a
//! broker, and reads back the JSON lines it printed.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use baiji::broker::RunningBroker;
use serde_json::Value;

/// What a test prints, and passes, where the clients are not installed.
pub(crate) const SKIPPED: &str =
    "skipped: ../shared/clients not found (the real Java 4.9.7 / Go v2.1.2 clients)";

/// Longest a scenario process may run. Each program bounds each of its own waits (20 s by
/// default), so only a hung client gets near it.
const PROCESS_PATIENCE: Duration = Duration::from_secs(150);

/// One of the two real clients.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Client {
    /// Apache RocketMQ 4.9.7 Java client (`tests/java_client/BaijiJavaClient.java`).
    Java,
    /// rocketmq-client-go v2.1.2 (`tests/go_client/main.go`).
    Go,
}

/// `$BAIJI_SHARED_CLIENTS`, else `../shared/clients` beside the repository; `None` (after
/// printing [`SKIPPED`]) when that directory does not exist.
pub(crate) fn shared_clients() -> Option<PathBuf> {
    let dir = match std::env::var_os("BAIJI_SHARED_CLIENTS") {
        Some(d) => PathBuf::from(d),
        None => repo(&["..", "shared", "clients"]),
    };
    if dir.is_dir() {
        Some(dir)
    } else {
        println!("{SKIPPED}");
        None
    }
}

fn repo(parts: &[&str]) -> PathBuf {
    let mut p = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    p.extend(parts);
    p
}

/// Cargo's target directory (the parent of `CARGO_TARGET_TMPDIR`, `<target>/tmp`).
fn target_dir() -> PathBuf {
    let tmp = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    tmp.parent().map(Path::to_path_buf).unwrap_or(tmp)
}

/// Runs `cmd` to completion; its stdout, or a message with everything it printed.
fn output(mut cmd: Command, what: &str) -> Result<String, String> {
    let out = cmd.output().map_err(|e| format!("{what}: cannot start {cmd:?}: {e}"))?;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    if out.status.success() {
        Ok(stdout)
    } else {
        Err(format!(
            "{what}: {cmd:?} exits with {}\nstdout: {stdout}\nstderr: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// A digest of `parts` for the rebuild stamps.
fn stamp_of(parts: &[&[u8]]) -> String {
    let mut h = crc32fast::Hasher::new();
    for p in parts {
        h.update(&(p.len() as u64).to_le_bytes());
        h.update(p);
    }
    format!("{:08x}\n", h.finalize())
}

/// The compiled Java program.
#[derive(Debug)]
struct JavaBuild {
    /// The client's class path plus the compiled classes.
    class_path: String,
}

/// The built Go program.
#[derive(Debug)]
struct GoBuild {
    binary: PathBuf,
}

/// Compiles `tests/java_client/*.java` into `target/java_client/classes`, unless the stamp shows
/// the same sources and class path were compiled before.
fn build_java(shared: &Path) -> Result<JavaBuild, String> {
    let mut cp_cmd = Command::new(shared.join("java").join("classpath.sh"));
    cp_cmd.stderr(Stdio::piped());
    let cp = output(
        cp_cmd,
        "the Java client's class path (run ../shared/clients/java/install-deps.sh or .ci/test)",
    )?
    .trim()
    .to_string();
    let src = repo(&["tests", "java_client"]);
    let mut sources: Vec<PathBuf> = std::fs::read_dir(&src)
        .map_err(|e| format!("{}: {e}", src.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "java"))
        .collect();
    sources.sort();
    let mut parts: Vec<Vec<u8>> = vec![cp.clone().into_bytes()];
    for s in &sources {
        parts.push(std::fs::read(s).map_err(|e| format!("{}: {e}", s.display()))?);
    }
    let stamp = stamp_of(&parts.iter().map(Vec::as_slice).collect::<Vec<_>>());
    let out = target_dir().join("java_client");
    let classes = out.join("classes");
    let stamp_file = out.join("stamp");
    let class_path = format!("{cp}:{}", classes.display());
    if std::fs::read_to_string(&stamp_file).is_ok_and(|s| s == stamp) && classes.is_dir() {
        return Ok(JavaBuild { class_path });
    }
    let _ = std::fs::remove_dir_all(&classes);
    std::fs::create_dir_all(&classes).map_err(|e| format!("{}: {e}", classes.display()))?;
    let mut javac = Command::new("javac");
    javac.args(["-nowarn", "-encoding", "UTF-8", "-d"]).arg(&classes).arg("-cp").arg(&cp);
    javac.args(&sources);
    output(javac, "compiling tests/java_client")?;
    std::fs::write(&stamp_file, stamp).map_err(|e| format!("{}: {e}", stamp_file.display()))?;
    Ok(JavaBuild { class_path })
}

/// Builds `tests/go_client/main.go` into `target/go_client/go_client` (its module in
/// `target/go_client/src`, made buildable offline by `setup-module.sh`), unless the stamp shows
/// the same source was built before.
fn build_go(shared: &Path) -> Result<GoBuild, String> {
    let main = repo(&["tests", "go_client", "main.go"]);
    let source = std::fs::read(&main).map_err(|e| format!("{}: {e}", main.display()))?;
    let stamp = stamp_of(&[&source, shared.as_os_str().as_encoded_bytes()]);
    let out = target_dir().join("go_client");
    let src = out.join("src");
    let binary = out.join("go_client");
    let stamp_file = out.join("stamp");
    if std::fs::read_to_string(&stamp_file).is_ok_and(|s| s == stamp) && binary.is_file() {
        return Ok(GoBuild { binary });
    }
    std::fs::create_dir_all(&src).map_err(|e| format!("{}: {e}", src.display()))?;
    std::fs::write(src.join("main.go"), &source).map_err(|e| format!("main.go: {e}"))?;
    // setup-module.sh keeps only this line of an existing go.mod.
    std::fs::write(src.join("go.mod"), "module baiji-go-client\n")
        .map_err(|e| format!("go.mod: {e}"))?;
    let mut setup = Command::new(shared.join("go").join("setup-module.sh"));
    setup.arg(&src);
    output(setup, "setting up the Go module (../shared/clients/go/setup-module.sh)")?;
    let mut go = Command::new("go");
    go.current_dir(&src)
        .args(["build", "-o"])
        .arg(&binary)
        .arg(".")
        .env("GOFLAGS", "-mod=mod")
        .env("GOPROXY", "off")
        .env("GOSUMDB", "off");
    output(go, "building tests/go_client")?;
    std::fs::write(&stamp_file, stamp).map_err(|e| format!("{}: {e}", stamp_file.display()))?;
    Ok(GoBuild { binary })
}

static JAVA: OnceLock<Result<JavaBuild, String>> = OnceLock::new();
static GO: OnceLock<Result<GoBuild, String>> = OnceLock::new();

/// Where the runs keep their logs: emptied once per test process.
fn runs_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let d = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("java_go");
        let _ = std::fs::remove_dir_all(&d);
        d
    })
}

/// The command running `scenario` on `client`, building the client's program first if needed.
fn command(client: Client, shared: &Path, scenario: &str, dir: &Path) -> Command {
    match client {
        Client::Java => {
            let build = JAVA.get_or_init(|| build_java(shared));
            let build = build.as_ref().unwrap_or_else(|e| panic!("the Java program builds: {e}"));
            let mut c = Command::new("java");
            // C1 only and the serial collector: a short-lived client on a shared 2-core box.
            c.args(["-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-Xmx256m"]);
            // The client logs to ~/logs and keeps broadcasting offsets in ~/.rocketmq_offsets,
            // where `~` is user.home from passwd, not $HOME.
            c.arg(format!("-Drocketmq.client.logRoot={}", dir.join("logs").display()));
            c.arg(format!(
                "-Drocketmq.client.localOffsetStoreDir={}",
                dir.join("offsets").display()
            ));
            c.arg("-cp").arg(&build.class_path).arg("BaijiJavaClient").arg(scenario);
            c
        }
        Client::Go => {
            let build = GO.get_or_init(|| build_go(shared));
            let build = build.as_ref().unwrap_or_else(|e| panic!("the Go program builds: {e}"));
            let mut c = Command::new(&build.binary);
            // Broadcasting offsets go to $rocketmq.client.localOffsetStoreDir, else
            // $HOME/.rocketmq_client_go (consumer/offset_store.go).
            c.env("rocketmq.client.localOffsetStoreDir", dir.join("offsets"))
                .env("HOME", dir)
                .env("ROCKETMQ_GO_LOG_LEVEL", "warn");
            c.arg(scenario);
            c
        }
    }
}

/// What one scenario process printed.
#[derive(Debug)]
pub(crate) struct Run {
    /// `<client> <scenario> <args>`, for messages.
    pub(crate) what: String,
    /// Every JSON line, in the order printed.
    pub(crate) events: Vec<Value>,
    /// The end of its stderr (Go's logrus lines; the JVM's own complaints).
    pub(crate) stderr: String,
    /// Its private directory (the Java client's `logs/rocketmq_client.log`).
    pub(crate) dir: PathBuf,
}

impl Run {
    /// The events of `kind`.
    pub(crate) fn of(&self, kind: &str) -> Vec<&Value> {
        self.events.iter().filter(|e| e["kind"] == kind).collect()
    }

    /// The messages `member` received, in the order its listener saw them.
    pub(crate) fn received(&self, member: &str) -> Vec<&Value> {
        self.of("received").into_iter().filter(|e| e["member"] == member).collect()
    }

    /// The problems it reported (errors and expired waits), and its stderr, for messages.
    pub(crate) fn problems(&self) -> String {
        let problems: Vec<String> = self
            .events
            .iter()
            .filter(|e| e["kind"] == "error" || e["kind"] == "timeout")
            .map(Value::to_string)
            .collect();
        format!(
            "{}: the client reported {}\nstderr (tail): {}\nclient log: {}",
            self.what,
            if problems.is_empty() { "no error".to_string() } else { problems.join("\n") },
            self.stderr,
            self.dir.join("logs").display()
        )
    }

    /// Asserts the scenario ran to its end with no client call failing and no wait expiring.
    pub(crate) fn assert_clean(&self) {
        assert!(
            self.events.last().is_some_and(|e| e["kind"] == "done"),
            "{} runs to its end: {}",
            self.what,
            self.problems()
        );
        assert!(
            self.events.iter().all(|e| e["kind"] != "error" && e["kind"] != "timeout"),
            "no client call fails and every awaited event happens: {}",
            self.problems()
        );
    }
}

/// A scenario's broker-side inputs.
pub(crate) struct Target<'a> {
    /// The broker (its embedded name server is what the clients are given).
    pub(crate) broker: &'a RunningBroker,
    pub(crate) topic: &'a str,
    pub(crate) group: &'a str,
}

/// Runs `scenario` of `client` against `t` with `extra` options (`key=value` for Java,
/// `-key value` for Go) and returns what it printed. Fails the test if the process cannot
/// start, prints a line that is not JSON, or outlives [`PROCESS_PATIENCE`].
pub(crate) async fn run(
    client: Client,
    shared: &Path,
    scenario: &str,
    t: &Target<'_>,
    extra: &[(&str, String)],
) -> Run {
    let namesrv = t.broker.namesrv_addr().expect("an embedded name server").to_string();
    let broker = t.broker.broker_addr().expect("a broker address").to_string();
    let mut opts = vec![
        ("namesrv", namesrv),
        ("broker", broker),
        ("topic", t.topic.to_string()),
        ("group", t.group.to_string()),
    ];
    opts.extend(extra.iter().map(|(k, v)| (*k, v.clone())));
    let dir = runs_dir().join(format!("{client:?}-{scenario}-{}", t.topic).to_lowercase());
    std::fs::create_dir_all(&dir).expect("a directory for the run");
    let mut cmd = command(client, shared, scenario, &dir);
    for (k, v) in &opts {
        match client {
            Client::Java => cmd.arg(format!("{k}={v}")),
            Client::Go => cmd.arg(format!("-{k}")).arg(v),
        };
    }
    cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let what = format!("{client:?} {scenario} {opts:?}");
    tokio::task::spawn_blocking(move || wait_child(cmd, what, dir))
        .await
        .expect("the scenario's runner thread")
}

fn wait_child(mut cmd: Command, what: String, dir: PathBuf) -> Run {
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
    let finished = loop {
        match child.try_wait() {
            Ok(Some(_)) => break true,
            Ok(None) if start.elapsed() < PROCESS_PATIENCE => {
                std::thread::sleep(Duration::from_millis(50))
            }
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                break false;
            }
        }
    };
    let lines = lines.join().expect("the stdout reader");
    let errors = errors.join().expect("the stderr reader");
    let tail: String = {
        let skip = errors.chars().count().saturating_sub(4000);
        errors.chars().skip(skip).collect()
    };
    assert!(
        finished,
        "{what} finishes within {PROCESS_PATIENCE:?}; printed {lines:#?}; stderr: {tail}"
    );
    let events = lines
        .iter()
        .map(|l| {
            serde_json::from_str(l)
                .unwrap_or_else(|e| panic!("{what} prints only JSON lines, not {l:?}: {e}"))
        })
        .collect();
    Run { what, events, stderr: tail, dir }
}
