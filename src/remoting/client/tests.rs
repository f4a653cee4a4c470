//! The client against a scripted server on a real loopback listener.

use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

use super::*;
use crate::remoting::code::{request_code, response_code};
use crate::remoting::frame::MAX_FRAME_LEN;

/// Bound for anything a test waits for; a healthy run needs milliseconds.
const PATIENCE: Duration = Duration::from_secs(20);

/// The server side of one accepted connection.
struct Peer {
    stream: TcpStream,
    buf: BytesMut,
}

impl Peer {
    async fn read(&mut self) -> RemotingCommand {
        let wait = async {
            loop {
                if let Some(cmd) = RemotingCommand::decode(&mut self.buf).expect("valid frames") {
                    return cmd;
                }
                let n = self.stream.read_buf(&mut self.buf).await.expect("read");
                assert!(n > 0, "the client closed the connection");
            }
        };
        tokio::time::timeout(PATIENCE, wait).await.expect("the client sends a request")
    }

    async fn write(&mut self, cmd: &RemotingCommand) {
        let mut out = BytesMut::new();
        cmd.encode(&mut out).expect("encodable");
        self.stream.write_all(&out).await.expect("write");
    }
}

/// A listener bound once; `accept` gives the server side of the client's connection.
async fn listener() -> (TcpListener, String) {
    let l = TcpListener::bind("127.0.0.1:0").await.expect("bind loopback");
    let addr = l.local_addr().expect("bound").to_string();
    (l, addr)
}

async fn accept(l: &TcpListener) -> Peer {
    let (stream, _) = tokio::time::timeout(PATIENCE, l.accept())
        .await
        .expect("the client connects")
        .expect("accept");
    Peer { stream, buf: BytesMut::new() }
}

fn answer(to: &RemotingCommand, remark: &str) -> RemotingCommand {
    RemotingCommand::response_to(to, response_code::SUCCESS, Some(remark.to_string()))
}

#[tokio::test]
async fn given_stale_answers_and_server_requests_when_calling_should_return_the_answer_with_its_opaque(
) {
    let (l, addr) = listener().await;
    let server = tokio::spawn(async move {
        let mut p = accept(&l).await;
        let req = p.read().await;
        // A late answer to some earlier request, then a request of the server's own, then
        // the real answer.
        let mut stale = answer(&req, "stale");
        stale.opaque = req.opaque.wrapping_sub(1);
        p.write(&stale).await;
        p.write(&RemotingCommand::request(request_code::NOTIFY_CONSUMER_IDS_CHANGED, 9)).await;
        p.write(&answer(&req, "mine")).await;
        let second = p.read().await;
        p.write(&answer(&second, "second")).await;
        (req.opaque, second.opaque)
    });
    let mut c = Connection::connect(addr.as_str(), PATIENCE).await.expect("connects");
    let r =
        c.call(RemotingCommand::request(request_code::GET_MAX_OFFSET, 0)).await.expect("answer");
    assert_eq!(r.remark.as_deref(), Some("mine"), "the answer carrying the request's opaque");
    let r2 = c.call(RemotingCommand::request(request_code::GET_MAX_OFFSET, 0)).await.expect("2nd");
    assert_eq!(r2.remark.as_deref(), Some("second"));
    let (o1, o2) = server.await.expect("server");
    assert_ne!(o1, o2, "the client assigns a fresh opaque to every request");
    assert_eq!((r.opaque, r2.opaque), (o1, o2));
}

#[tokio::test]
async fn given_a_silent_server_when_calling_should_time_out_and_stay_usable() {
    let (l, addr) = listener().await;
    let server = tokio::spawn(async move {
        let mut p = accept(&l).await;
        let ignored = p.read().await;
        let req = p.read().await;
        // The late answer to the first request arrives before the second's.
        p.write(&answer(&ignored, "late")).await;
        p.write(&answer(&req, "on time")).await;
    });
    let mut c = Connection::connect(addr.as_str(), PATIENCE)
        .await
        .expect("connects")
        .with_call_timeout(Duration::from_millis(50));
    let e = c.call(RemotingCommand::request(request_code::HEART_BEAT, 0)).await;
    assert!(
        matches!(e, Err(ClientError::Timeout { code: request_code::HEART_BEAT, .. })),
        "no answer within the call timeout is a Timeout: {e:?}"
    );
    let r = c
        .call_within(RemotingCommand::request(request_code::HEART_BEAT, 0), PATIENCE)
        .await
        .expect("the connection is still usable");
    assert_eq!(r.remark.as_deref(), Some("on time"), "the late answer is dropped");
    server.await.expect("server");
}

#[tokio::test]
async fn given_a_closed_connection_when_calling_or_idling_should_report_closed() {
    let (l, addr) = listener().await;
    let server = tokio::spawn(async move {
        let mut p = accept(&l).await;
        let _ = p.read().await;
        drop(p);
        let mut p = accept(&l).await;
        // Something to drop while idle, then the end of the stream.
        p.write(&RemotingCommand::request(request_code::NOTIFY_CONSUMER_IDS_CHANGED, 3)).await;
    });
    let mut c = Connection::connect(addr.as_str(), PATIENCE).await.expect("connects");
    let e = c.call_within(RemotingCommand::request(request_code::HEART_BEAT, 0), PATIENCE).await;
    assert!(matches!(e, Err(ClientError::Closed)), "{e:?}");
    let mut c = Connection::connect(addr.as_str(), PATIENCE).await.expect("connects");
    let e = tokio::time::timeout(PATIENCE, c.idle()).await.expect("idle ends with the stream");
    assert!(matches!(e, ClientError::Closed), "{e:?}");
    server.await.expect("server");
}

#[tokio::test]
async fn given_a_oneway_send_should_set_the_flag_and_not_wait() {
    let (l, addr) = listener().await;
    let server = tokio::spawn(async move {
        let mut p = accept(&l).await;
        let oneway = p.read().await;
        let req = p.read().await;
        p.write(&answer(&req, "after")).await;
        oneway
    });
    let mut c = Connection::connect(addr.as_str(), PATIENCE).await.expect("connects");
    c.send_oneway(RemotingCommand::request(request_code::UPDATE_CONSUMER_OFFSET, 0))
        .await
        .expect("sent");
    let r = c.call_within(RemotingCommand::request(request_code::HEART_BEAT, 0), PATIENCE).await;
    assert_eq!(r.expect("answer").remark.as_deref(), Some("after"));
    let oneway = server.await.expect("server");
    assert!(oneway.is_oneway() && !oneway.is_response(), "the one-way flag is set: {oneway:?}");
}

#[tokio::test]
async fn given_a_frame_over_the_limit_when_calling_should_fail_without_reading_it() {
    let (l, addr) = listener().await;
    let server = tokio::spawn(async move {
        let mut p = accept(&l).await;
        let _ = p.read().await;
        // Announces one byte more than the codec accepts, and sends nothing more.
        let len = i32::try_from(MAX_FRAME_LEN + 1).expect("fits");
        p.stream.write_all(&len.to_be_bytes()).await.expect("write");
        p.stream.write_all(&[0, 0, 0, 2]).await.expect("write");
        // Keep the connection open so only the codec's limit can end the call.
        let mut scratch = [0u8; 64];
        let _ = tokio::time::timeout(PATIENCE, p.stream.read(&mut scratch)).await;
    });
    let mut c = Connection::connect(addr.as_str(), PATIENCE).await.expect("connects");
    let e = c.call_within(RemotingCommand::request(request_code::HEART_BEAT, 0), PATIENCE).await;
    assert!(
        matches!(e, Err(ClientError::Decode(FrameError::TooLarge { .. }))),
        "a frame beyond MAX_FRAME_LEN is refused at its prefix: {e:?}"
    );
    drop(c);
    server.await.expect("server");
}

#[tokio::test]
async fn given_request_once_should_connect_call_and_return_the_answer() {
    let (l, addr) = listener().await;
    let server = tokio::spawn(async move {
        let mut p = accept(&l).await;
        let req = p.read().await;
        p.write(&answer(&req, "once")).await;
    });
    let r = request_once(
        addr.as_str(),
        RemotingCommand::request(request_code::GET_BROKER_CLUSTER_INFO, 0),
        PATIENCE,
    )
    .await
    .expect("answer");
    assert_eq!(r.remark.as_deref(), Some("once"));
    server.await.expect("server");
}

#[tokio::test]
async fn given_many_calls_in_flight_when_answers_come_in_reverse_should_match_each_by_opaque() {
    const CALLS: usize = 64;
    let (l, addr) = listener().await;
    let server = tokio::spawn(async move {
        let mut p = accept(&l).await;
        let mut reqs = Vec::new();
        for _ in 0..CALLS {
            reqs.push(p.read().await);
        }
        for req in reqs.iter().rev() {
            let tag = req.ext_fields.get("tag").unwrap_or_default().to_string();
            p.write(&answer(req, &tag)).await;
        }
    });
    let options = PipelineOptions::default().call_timeout(PATIENCE).queue_frames(4);
    let pipe = Arc::new(
        Pipeline::connect_with(addr.as_str(), options, Box::new(|_| None)).await.expect("connects"),
    );
    let mut calls = tokio::task::JoinSet::new();
    for i in 0..CALLS {
        let pipe = Arc::clone(&pipe);
        calls.spawn(async move {
            let mut req = RemotingCommand::request(request_code::PULL_MESSAGE, 0);
            req.ext_fields.insert("tag", &i.to_string());
            let r = pipe.call(req).await.expect("answered");
            (i, r.remark)
        });
    }
    while let Some(done) = calls.join_next().await {
        let (i, remark) = done.expect("call task");
        assert_eq!(remark, Some(i.to_string()), "call {i} gets the answer to its own request");
    }
    assert_eq!(pipe.in_flight(), 0, "no waiter outlives its call");
    server.await.expect("server");
}

#[tokio::test]
async fn given_server_requests_on_a_pipeline_should_hand_them_to_the_handler_and_send_its_answers()
{
    let (l, addr) = listener().await;
    let (seen_tx, mut seen_rx) = mpsc::unbounded_channel();
    let handler: RequestHandler = Box::new(move |req: RemotingCommand| {
        let _ = seen_tx.send(req.code);
        Some(RemotingCommand::response_to(&req, response_code::SUCCESS, Some("handled".into())))
    });
    let server = tokio::spawn(async move {
        let mut p = accept(&l).await;
        p.write(&RemotingCommand::oneway_request(request_code::NOTIFY_CONSUMER_IDS_CHANGED, 41))
            .await;
        p.write(&RemotingCommand::request(request_code::CHECK_TRANSACTION_STATE, 42)).await;
        // The handler's answer to 42 (the one-way 41 gets none), then the client's call.
        let handled = p.read().await;
        let req = p.read().await;
        p.write(&answer(&req, "call")).await;
        handled
    });
    let pipe = Pipeline::connect_with(addr.as_str(), PipelineOptions::default(), handler)
        .await
        .expect("connects");
    for want in [request_code::NOTIFY_CONSUMER_IDS_CHANGED, request_code::CHECK_TRANSACTION_STATE] {
        let got = tokio::time::timeout(PATIENCE, seen_rx.recv()).await.expect("handed over");
        assert_eq!(got, Some(want), "every server request reaches the handler, in order");
    }
    let r = pipe.call_within(RemotingCommand::request(request_code::HEART_BEAT, 0), PATIENCE).await;
    assert_eq!(r.expect("answer").remark.as_deref(), Some("call"));
    let handled = server.await.expect("server");
    assert!(handled.is_response(), "the handler's answer is a response: {handled:?}");
    assert_eq!(handled.opaque, 42, "it echoes the server request's opaque (one-way 41 unanswered)");
}

#[tokio::test]
async fn given_a_pipeline_call_that_times_out_should_remove_its_waiter_and_drop_the_late_answer() {
    let (l, addr) = listener().await;
    let (go_tx, go_rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(async move {
        let mut p = accept(&l).await;
        let first = p.read().await;
        let _ = go_rx.await;
        let second = p.read().await;
        p.write(&answer(&first, "late")).await;
        p.write(&answer(&second, "second")).await;
    });
    let pipe = Pipeline::connect(addr.as_str()).await.expect("connects");
    let e = pipe
        .call_within(
            RemotingCommand::request(request_code::HEART_BEAT, 0),
            Duration::from_millis(50),
        )
        .await;
    assert!(matches!(e, Err(ClientError::Timeout { .. })), "{e:?}");
    assert_eq!(pipe.in_flight(), 0, "a timed-out call leaves no waiter behind");
    go_tx.send(()).expect("server waits");
    let r = pipe.call_within(RemotingCommand::request(request_code::HEART_BEAT, 0), PATIENCE).await;
    assert_eq!(r.expect("answer").remark.as_deref(), Some("second"));
    server.await.expect("server");
}

#[tokio::test]
async fn given_the_server_closes_when_calls_wait_on_a_pipeline_should_fail_them_and_later_calls() {
    let (l, addr) = listener().await;
    let server = tokio::spawn(async move {
        let mut p = accept(&l).await;
        let _ = p.read().await;
        // Closes without answering.
    });
    let pipe = Pipeline::connect(addr.as_str()).await.expect("connects");
    let e = pipe.call_within(RemotingCommand::request(request_code::HEART_BEAT, 0), PATIENCE).await;
    assert!(matches!(e, Err(ClientError::Closed)), "a waiting call learns of the close: {e:?}");
    server.await.expect("server");
    assert!(pipe.is_closed());
    let e = pipe.call_within(RemotingCommand::request(request_code::HEART_BEAT, 0), PATIENCE).await;
    assert!(matches!(e, Err(ClientError::Closed)), "later calls fail at once: {e:?}");
}
