//! `--store-path-root-dir` (issue 26, first step): topic and subscription group configs made
//! with the admin codes are there again after a restart on the same directory, in-process and
//! after a SIGKILL of the real binary; after a clean stop (in-process, SIGTERM) the queues
//! continue their offsets and the committed offsets are kept; a second broker on a held directory is refused with the
//! holder's pid, another broker's directory is refused, and damaged segments are set aside.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use super::*;

/// A fresh directory (tmpfs when there is one), removed when dropped.
pub(super) struct StoreDir(pub(super) PathBuf);

impl StoreDir {
    pub(super) fn new(tag: &str) -> StoreDir {
        let base = if Path::new("/dev/shm").is_dir() {
            PathBuf::from("/dev/shm")
        } else {
            std::env::temp_dir()
        };
        let p = base.join(format!("baiji-restart-it-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        StoreDir(p)
    }
}

impl Drop for StoreDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn one_field(code: i32, key: &str, value: &str) -> RemotingCommand {
    let mut ext = ExtFields::new();
    ext.insert(key, value);
    request(code, ext)
}

fn group_config_request(group: &str, retries: u32) -> RemotingCommand {
    let body = format!(
        r#"{{"groupName":"{group}","consumeEnable":true,"consumeBroadcastEnable":true,"retryQueueNums":1,"retryMaxTimes":{retries},"brokerId":0,"whichBrokerWhenConsumeSlowly":1}}"#
    );
    request(rc::UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, ExtFields::new()).with_body(body.into_bytes())
}

/// Creates `Kept` (3 queues) and `Gone` (then deletes it), group `kept_group` with 7 retries
/// and `gone_group` (then deletes it).
async fn make_configs(conn: &mut Conn) {
    for (topic, queues) in [("Kept", 3), ("Gone", 2)] {
        let r = conn.call(create_topic_request(topic, queues)).await;
        assert_eq!(r.code, code::SUCCESS, "{topic} is created: {r:?}");
    }
    let r = conn.call(one_field(rc::DELETE_TOPIC_IN_BROKER, "topic", "Gone")).await;
    assert_eq!(r.code, code::SUCCESS, "Gone is deleted: {r:?}");
    for group in ["kept_group", "gone_group"] {
        let r = conn.call(group_config_request(group, 7)).await;
        assert_eq!(r.code, code::SUCCESS, "{group} is created: {r:?}");
    }
    let r = conn.call(one_field(rc::DELETE_SUBSCRIPTIONGROUP, "groupName", "gone_group")).await;
    assert_eq!(r.code, code::SUCCESS, "gone_group is deleted: {r:?}");
}

/// What a restarted broker must answer: `Kept` with its 3 queues and `kept_group` with its
/// config; neither deleted one.
async fn assert_configs_back(conn: &mut Conn) {
    let r = conn.call(one_field(rc::GET_TOPIC_CONFIG, "topic", "Kept")).await;
    assert_eq!(r.code, code::SUCCESS, "the topic is back: {r:?}");
    let body: serde_json::Value = serde_json::from_slice(&r.body).expect("JSON");
    assert_eq!(body["writeQueueNums"], 3, "with its queues: {body}");
    let r = conn.call(max_offset_request("Kept", 2)).await;
    assert_eq!(r.code, code::SUCCESS, "its third queue is served: {r:?}");
    let r = conn.call(one_field(rc::GET_TOPIC_CONFIG, "topic", "Gone")).await;
    assert_eq!(r.code, code::TOPIC_NOT_EXIST, "a deleted topic stays deleted: {r:?}");
    let r = conn.call(one_field(rc::GET_SUBSCRIPTIONGROUP_CONFIG, "group", "kept_group")).await;
    assert_eq!(r.code, code::SUCCESS, "the group config is back: {r:?}");
    let body: serde_json::Value = serde_json::from_slice(&r.body).expect("JSON");
    assert_eq!(body["retryMaxTimes"], 7, "as it was sent: {body}");
    let r = conn.call(one_field(rc::GET_SUBSCRIPTIONGROUP_CONFIG, "group", "gone_group")).await;
    assert_eq!(r.code, code::SUBSCRIPTION_GROUP_NOT_EXIST, "a deleted group stays so: {r:?}");
}

#[tokio::test]
async fn given_a_store_dir_when_restarted_should_have_its_topics_and_groups_and_refuse_a_second_broker(
) {
    let dir = StoreDir::new("inproc");
    let with_dir = |c: &mut BrokerConfig| c.core.store_path_root_dir = Some(dir.0.clone());
    let broker = start_broker(with_dir).await;
    let mut conn = Conn::open(broker_addr(&broker)).await;
    make_configs(&mut conn).await;
    // A second broker on the same directory is refused, naming this process.
    let mut second = common::broker::loopback();
    with_dir(&mut second);
    let e = baiji::broker::start(second).await.expect_err("a held directory is refused");
    let text = e.to_string();
    assert!(text.contains("in use by process"), "the refusal names the holder: {text}");
    broker.shutdown().await;
    let broker = start_broker(|c| {
        with_dir(c);
        c.core.metrics_listen = Some("127.0.0.1:0".parse().expect("an address"));
    })
    .await;
    let mut conn = Conn::open(broker_addr(&broker)).await;
    assert_configs_back(&mut conn).await;
    let metrics = broker.metrics_addr().expect("the endpoint is bound");
    let (_, text) = super::metrics::http_get(metrics, "/metrics").await;
    let read = super::metrics::value(&text, "baiji_config_journal_recovered_records", &[]);
    assert!(read >= 8.0, "the journal's records were read back (8 changes at least): {read}");
    let torn = super::metrics::value(&text, "baiji_config_journal_torn_records", &[]);
    assert_eq!(torn, 0.0, "a clean stop tears nothing");
    broker.shutdown().await;
    // Without the directory, nothing is kept (today's heap-only mode).
    let broker = start_broker(|_| {}).await;
    let mut conn = Conn::open(broker_addr(&broker)).await;
    let r = conn.call(one_field(rc::GET_TOPIC_CONFIG, "topic", "Kept")).await;
    assert_eq!(r.code, code::TOPIC_NOT_EXIST, "a broker without the directory: {r:?}");
    broker.shutdown().await;
}

/// The journal's segment files in `dir` (`config-SEQ.seg`).
fn journal_segments(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("the store directory exists")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            let f = p.file_name().and_then(|f| f.to_str()).unwrap_or_default();
            f.starts_with("config-") && f.ends_with(".seg")
        })
        .collect();
    v.sort();
    v
}

#[tokio::test]
async fn given_a_damaged_or_foreign_store_dir_should_start_with_what_is_valid_or_refuse_clearly() {
    let dir = StoreDir::new("damaged");
    let with_dir = |c: &mut BrokerConfig| c.core.store_path_root_dir = Some(dir.0.clone());
    let broker = start_broker(with_dir).await;
    let mut conn = Conn::open(broker_addr(&broker)).await;
    make_configs(&mut conn).await;
    broker.shutdown().await;
    // Another broker name on the directory: refused, naming both owners.
    let e = baiji::broker::start({
        let mut c = common::broker::loopback();
        with_dir(&mut c);
        c.core.broker_name = "other-broker".into();
        c
    })
    .await
    .expect_err("a directory of another broker is refused");
    let text = e.to_string();
    assert!(text.contains("belongs to") && text.contains("other-broker"), "{text}");
    // Every journal segment's header overwritten: the broker starts, without those configs,
    // and sets the files aside.
    let segments = journal_segments(&dir.0);
    assert!(!segments.is_empty(), "the journal has segment files");
    for seg in &segments {
        let mut bytes = std::fs::read(seg).expect("read a segment");
        bytes[..64].fill(0xA5);
        std::fs::write(seg, bytes).expect("overwrite its header");
    }
    let broker = start_broker(with_dir).await;
    let mut conn = Conn::open(broker_addr(&broker)).await;
    let r = conn.call(one_field(rc::GET_TOPIC_CONFIG, "topic", "Kept")).await;
    assert_eq!(r.code, code::TOPIC_NOT_EXIST, "nothing is read from a damaged segment: {r:?}");
    let r = conn.call(create_topic_request("AfterDamage", 1)).await;
    assert_eq!(r.code, code::SUCCESS, "the broker serves and journals again: {r:?}");
    let set_aside = std::fs::read_dir(&dir.0)
        .expect("the directory")
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().ends_with(".quarantine"))
        .count();
    assert_eq!(set_aside, segments.len(), "each damaged segment is set aside");
    broker.shutdown().await;
    let broker = start_broker(with_dir).await;
    let mut conn = Conn::open(broker_addr(&broker)).await;
    let r = conn.call(one_field(rc::GET_TOPIC_CONFIG, "topic", "AfterDamage")).await;
    assert_eq!(r.code, code::SUCCESS, "what came after the damage is kept: {r:?}");
    broker.shutdown().await;
}

fn offset_of(r: &RemotingCommand, key: &str) -> i64 {
    r.ext_fields.get(key).and_then(|o| o.parse().ok()).unwrap_or_else(|| panic!("{key}: {r:?}"))
}

/// Announces a member of `kept_group` on `Kept`, sends 5 messages to its queue 0 and commits 4.
async fn send_and_commit(conn: &mut Conn) {
    let hb = conn.call(heartbeat_request("127.0.0.1@restart", "kept_group", "Kept")).await;
    assert_eq!(hb.code, code::SUCCESS, "the group's member is announced: {hb:?}");
    for i in 0..5 {
        let r = conn.call(send_request("Kept", 0, format!("m{i}").into_bytes())).await;
        assert_eq!(r.code, code::SUCCESS, "sending succeeds: {r:?}");
    }
    let mut ext = ExtFields::new();
    ext.insert("consumerGroup", "kept_group");
    ext.insert("topic", "Kept");
    ext.insert_i64("queueId", 0);
    ext.insert_i64("commitOffset", 4);
    let r = conn.call(request(rc::UPDATE_CONSUMER_OFFSET, ext)).await;
    assert_eq!(r.code, code::SUCCESS, "the commit is stored: {r:?}");
}

/// After a restart: queue 0 of `Kept` still holds its 5 messages and continues at 5,
/// `kept_group`'s commit is 4, and a consumer resuming at its commit reads the one message it
/// had not consumed, then the one sent after the restart.
async fn assert_offsets_continue(conn: &mut Conn) {
    let r = conn.call(max_offset_request("Kept", 0)).await;
    assert_eq!(offset_of(&r, "offset"), 5, "the queue ends where it ended: {r:?}");
    let mut ext = ExtFields::new();
    ext.insert("consumerGroup", "kept_group");
    ext.insert("topic", "Kept");
    ext.insert_i64("queueId", 0);
    let r = conn.call(request(rc::QUERY_CONSUMER_OFFSET, ext)).await;
    assert_eq!(r.code, code::SUCCESS, "the committed offset is kept: {r:?}");
    assert_eq!(offset_of(&r, "offset"), 4, "as committed: {r:?}");
    let r = conn.call(send_request("Kept", 0, b"after".to_vec())).await;
    assert_eq!(offset_of(&r, "queueOffset"), 5, "a new message gets the next offset: {r:?}");
    let r =
        conn.call(pull_request("kept_group", "Kept", 0, 4, 0, pull_sys_flag::SUBSCRIPTION)).await;
    assert_eq!(r.code, code::SUCCESS, "the unconsumed message is still there: {r:?}");
    let records = decode_records(&r.body).expect("a valid pull body");
    let bodies: Vec<&[u8]> = records.iter().map(|m| &m.body[..]).collect();
    assert_eq!(bodies, [&b"m4"[..], &b"after"[..]], "the kept message, then the new one");
}

#[tokio::test]
async fn given_a_clean_stop_when_restarted_should_continue_the_offsets_and_keep_the_commits() {
    let dir = StoreDir::new("clean");
    let with_dir = |c: &mut BrokerConfig| c.core.store_path_root_dir = Some(dir.0.clone());
    let broker = start_broker(with_dir).await;
    let mut conn = Conn::open(broker_addr(&broker)).await;
    make_configs(&mut conn).await;
    send_and_commit(&mut conn).await;
    broker.shutdown().await;
    let broker = start_broker(|c| {
        with_dir(c);
        c.core.metrics_listen = Some("127.0.0.1:0".parse().expect("an address"));
    })
    .await;
    let metrics = broker.metrics_addr().expect("the endpoint is bound");
    let (_, text) = super::metrics::http_get(metrics, "/metrics").await;
    let value = |name| super::metrics::value(&text, name, &[]);
    // m4 at least (not consumed); m0..m3 too if the reaper had not freed them yet (they were
    // acknowledged by the commit of 4).
    let restored = value("baiji_store_recovered_messages");
    assert!((1.0..=5.0).contains(&restored), "the unconsumed message came back: {restored}");
    assert_eq!(value("baiji_store_torn_records"), 0.0, "a clean stop tears nothing");
    assert!(value("baiji_store_segment_bytes") > 0.0, "segments are mapped and counted");
    let mut conn = Conn::open(broker_addr(&broker)).await;
    assert_configs_back(&mut conn).await;
    assert_offsets_continue(&mut conn).await;
    broker.shutdown().await;
}

pub(super) fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// The real binary on `dir`, listening on fresh ports; returns it and its broker address.
async fn spawn_binary(dir: &Path) -> (Child, SocketAddr) {
    let addr = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let namesrv = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let mut child = binary_command(dir, addr, namesrv).spawn().expect("spawn the baiji binary");
    let exited = wait_listening(&mut child, addr, Duration::from_secs(20)).await;
    assert!(exited.is_none(), "the broker process exited before listening: {exited:?}");
    (child, addr)
}

/// The command that runs the real binary as a broker on `dir`, listening on `addr` with its
/// name server on `namesrv` (no gRPC, no fast port; stdio closed: callers may redirect it).
pub(super) fn binary_command(dir: &Path, addr: SocketAddr, namesrv: SocketAddr) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_baiji"));
    cmd.arg("broker")
        .args(["--listen", &addr.to_string(), "--namesrv-listen", &namesrv.to_string()])
        .args(["--grpc-listen", "off", "--fast-listen-port", "0"])
        .arg("--store-path-root-dir")
        .arg(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    cmd
}

/// Waits until `child` accepts connections on `addr` (`None`), or exits first (its status);
/// panics after `patience`.
pub(super) async fn wait_listening(
    child: &mut Child,
    addr: SocketAddr,
    patience: Duration,
) -> Option<std::process::ExitStatus> {
    let deadline = Instant::now() + patience;
    while TcpStream::connect(addr).await.is_err() {
        if let Some(status) = child.try_wait().expect("poll the broker process") {
            return Some(status);
        }
        assert!(
            Instant::now() < deadline,
            "the broker process listens on {addr} within {patience:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    None
}

#[tokio::test]
async fn given_a_store_dir_when_the_process_is_killed_should_start_again_with_its_configs() {
    let dir = StoreDir::new("sigkill");
    let (mut child, addr) = spawn_binary(&dir.0).await;
    let mut conn = Conn::open(addr).await;
    make_configs(&mut conn).await;
    // A second process on the directory exits with the holder's pid.
    let out = Command::new(env!("CARGO_BIN_EXE_baiji"))
        .arg("broker")
        .args(["--listen", "127.0.0.1:0", "--namesrv-listen", "127.0.0.1:0"])
        .args(["--grpc-listen", "off", "--fast-listen-port", "0"])
        .arg("--store-path-root-dir")
        .arg(&dir.0)
        .output()
        .expect("run a second broker");
    let said = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success(), "the second broker does not start: {said}");
    assert!(said.contains(&format!("process {}", child.id())), "it names the holder: {said}");
    child.kill().expect("SIGKILL the broker");
    child.wait().expect("reap it");
    let (mut child, addr) = spawn_binary(&dir.0).await;
    let mut conn = Conn::open(addr).await;
    assert_configs_back(&mut conn).await;
    child.kill().expect("SIGKILL the broker");
    child.wait().expect("reap it");
}

#[tokio::test]
async fn given_a_store_dir_when_the_process_gets_sigterm_should_continue_the_offsets() {
    let dir = StoreDir::new("sigterm");
    let (child, addr) = spawn_binary(&dir.0).await;
    let mut conn = Conn::open(addr).await;
    make_configs(&mut conn).await;
    send_and_commit(&mut conn).await;
    drop(conn);
    let status =
        Command::new("kill").args(["-TERM", &child.id().to_string()]).status().expect("run kill");
    assert!(status.success(), "SIGTERM sent");
    let out = child.wait_with_output().expect("the broker stops");
    assert!(out.status.success(), "a clean stop exits 0: {:?}", out.status);
    let (mut child, addr) = spawn_binary(&dir.0).await;
    let mut conn = Conn::open(addr).await;
    assert_configs_back(&mut conn).await;
    assert_offsets_continue(&mut conn).await;
    child.kill().expect("SIGKILL the broker");
    child.wait().expect("reap it");
}
