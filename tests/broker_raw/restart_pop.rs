//! POP consumption state across `kill -9` (issue 26): the real binary on a store directory,
//! driven with raw `POP_MESSAGE`, `ACK_MESSAGE` and `CHANGE_MESSAGE_INVISIBLETIME` frames,
//! killed with SIGKILL and started again on the same directory. Acknowledged messages never
//! come back; unacknowledged ones come back when their invisible time ends, not before (and
//! not never); receipts handed out before the restart still acknowledge.

use std::path::Path;
use std::process::Child;

use baiji::remoting::header::{
    ChangeInvisibleTimeResponseHeader, ExtraInfo, FromExtFields, PopMessageResponseHeader,
};

use super::pop::{
    ack_request, change_request, pop_request, popped, send_n, Got, Pop, GROUP, TOPIC,
};
use super::restart::{binary_command, free_port, wait_listening, StoreDir};
use super::*;

/// How long the popped messages stay invisible: long enough for a restart in between (the
/// test checks that it was), short enough for the test.
const INVISIBLE_MS: i64 = 10_000;

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("a clock after 1970")
        .as_millis() as u64
}

/// The real binary on `dir`, listening, with `pop_group` announced by a heartbeat (a client
/// reconnecting after the restart).
async fn start(dir: &Path) -> (Child, Conn) {
    let addr = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let namesrv = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let mut child = binary_command(dir, addr, namesrv).spawn().expect("spawn the baiji binary");
    let exited = wait_listening(&mut child, addr, Duration::from_secs(20)).await;
    assert!(exited.is_none(), "the broker process exited before listening: {exited:?}");
    let mut conn = Conn::open(addr).await;
    let r = conn.call(heartbeat_request("127.0.0.1@restart-pop", GROUP, TOPIC)).await;
    assert_eq!(r.code, code::SUCCESS, "the heartbeat is accepted: {r:?}");
    (child, conn)
}

fn kill(mut child: Child) {
    child.kill().expect("SIGKILL the broker");
    child.wait().expect("reap it");
}

fn body(g: &Got) -> String {
    String::from_utf8_lossy(&g.msg.body).into_owned()
}

fn pop_time(r: &RemotingCommand) -> u64 {
    PopMessageResponseHeader::from_ext_fields(&r.ext_fields).expect("a pop header").pop_time
}

/// The receipt the client builds from a change's answer (as rocketmq-client-rust does).
fn renewed(g: &Got, r: &RemotingCommand) -> Got {
    assert_eq!(r.code, code::SUCCESS, "the change is accepted: {r:?}");
    let h = ChangeInvisibleTimeResponseHeader::from_ext_fields(&r.ext_fields).expect("a header");
    let old = ExtraInfo::parse(&g.extra_info).expect("a receipt");
    let extra_info = ExtraInfo {
        ck_queue_offset: g.msg.queue_offset,
        pop_time: h.pop_time as i64,
        invisible_time: h.invisible_time,
        queue_offset: Some(g.msg.queue_offset),
        ..old
    }
    .build();
    Got { msg: g.msg.clone(), extra_info }
}

#[tokio::test]
async fn given_popped_messages_some_acked_when_killed_and_restarted_should_redeliver_only_the_unacked_after_their_invisible_time(
) {
    let dir = StoreDir::new("pop-sigkill");
    let (child, mut conn) = start(&dir.0).await;
    let r = conn.call(create_topic_request(TOPIC, 2)).await;
    assert_eq!(r.code, code::SUCCESS, "the topic is created: {r:?}");
    send_n(&mut conn, 0, 6).await;
    let first = Pop { queue: 0, invisible_ms: INVISIBLE_MS, ..Pop::default() };
    let r = conn.call(pop_request(&first)).await;
    let popped_at = pop_time(&r);
    let got = popped(&r);
    let bodies: Vec<String> = got.iter().map(body).collect();
    assert_eq!(bodies, ["m0", "m1", "m2", "m3", "m4", "m5"], "all six are popped");
    for g in [&got[0], &got[2], &got[4]] {
        let r = conn.call(ack_request(g)).await;
        assert_eq!(r.code, code::SUCCESS, "the ack is accepted: {r:?}");
    }
    // m5 is made invisible for a minute: it must not come back with m1 and m3.
    let m5 = renewed(&got[5], &conn.call(change_request(&got[5], 60_000)).await);
    kill(child);

    let (child, mut conn) = start(&dir.0).await;
    let r = conn.call(send_request(TOPIC, 0, b"after".to_vec())).await;
    assert_eq!(r.code, code::SUCCESS, "a send after the restart: {r:?}");
    let at = Pop { queue: 0, invisible_ms: 60_000, ..Pop::default() };
    let r = conn.call(pop_request(&at)).await;
    assert!(
        now_ms() < popped_at + INVISIBLE_MS as u64,
        "the restart took longer than the invisible time: the check below would prove nothing"
    );
    let again = popped(&r);
    let bodies: Vec<String> = again.iter().map(body).collect();
    assert_eq!(
        bodies,
        ["after"],
        "right after the restart only the new message: the acknowledged ones are done, the \
         others still invisible"
    );
    let r = conn.call(ack_request(&again[0])).await;
    assert_eq!(r.code, code::SUCCESS, "the new one is acknowledged: {r:?}");
    let r = conn.call(ack_request(&got[1])).await;
    assert_eq!(r.code, code::SUCCESS, "a receipt from before the restart acknowledges: {r:?}");
    // A second kill: what was done after the first restart is kept too.
    kill(child);

    let (child, mut conn) = start(&dir.0).await;
    let r = conn.call(pop_request(&at)).await;
    let r = if r.code == code::PULL_NOT_FOUND {
        // Parked until m3's invisible time ends (its expiry wakes the pop).
        let parked = Pop { poll_ms: 20_000, ..at };
        conn.call(pop_request(&parked)).await
    } else {
        // The restarts took long: m3 is due already (the pop time is checked below).
        r
    };
    let back = popped(&r);
    let bodies: Vec<String> = back.iter().map(body).collect();
    assert_eq!(bodies, ["m3"], "exactly the unacknowledged one whose invisible time ended");
    assert!(
        pop_time(&r) >= popped_at + INVISIBLE_MS as u64,
        "not before its invisible time: popped at {}, back at {}",
        popped_at,
        pop_time(&r)
    );
    assert_eq!(back[0].msg.reconsume_times, 1, "as a redelivery");
    let r = conn.call(ack_request(&back[0])).await;
    assert_eq!(r.code, code::SUCCESS, "the redelivery is acknowledged: {r:?}");
    let r = conn.call(ack_request(&m5)).await;
    assert_eq!(r.code, code::SUCCESS, "a changed receipt from before the restart acks: {r:?}");
    let r = conn.call(pop_request(&Pop { poll_ms: 1_000, ..at })).await;
    assert!(
        r.code == code::POLLING_TIMEOUT || r.code == code::PULL_NOT_FOUND,
        "nothing is left: {r:?}"
    );
    kill(child);
}
