//! Accepting connections and serving one connection per task, within bounds.
//!
//! A connection task owns its socket, plain TCP or TLS alike (`tls`: the first byte decides
//! under the configured mode; the loop is generic over the stream). It decodes complete frames from its read buffer, answers
//! each request through the code table (inline), and queues the responses as chunks (the
//! encoded prefix and header, then the body as a shared `Bytes`, never copied) that it writes
//! with vectored writes. Other tasks reach the connection through a bounded channel (late
//! long-poll answers, `NOTIFY_CONSUMER_IDS_CHANGED`). A frame that cannot be parsed closes this
//! connection only, with the reason logged.
//!
//! Bounds (README, "Limits"):
//! * while more than `write-buffer-high-water-mark` bytes wait to be written, the task neither
//!   decodes nor reads: a client that pipelines requests and never reads its socket holds at
//!   most that much plus one response (and the kernel's buffers);
//! * over `max-connections`, a new connection is closed at once;
//! * a connection with no traffic either way for `server-channel-max-idle-time-seconds` is
//!   closed (RocketMQ's `serverChannelMaxIdleTimeSeconds`);
//! * a closing connection's clients leave their groups and its registrations are dropped from
//!   a drop guard, so this happens even if a handler panics.

use crate::sync::Arc;
use crate::sync::{AtomicU64, Ordering};
use std::collections::VecDeque;
use std::io::IoSlice;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch, Semaphore};
use tokio::time::Instant;
use tokio_util::codec::Decoder;

use super::table::{self, Role};
use super::tls::{self, Gate};
use super::{ConnCtx, Outgoing, RemotingState, Reply};
use crate::broker::core::clients::ConnId;
use crate::broker::core::Core;
use crate::broker::security::config::TlsMode;
use crate::remoting::code::response_code;
use crate::remoting::codec::{CodecError, RemotingCodec};
use crate::remoting::error::quote;
use crate::remoting::{ExtFields, FrameError, RemotingCommand};

static NEXT_CONN: AtomicU64 = AtomicU64::new(1);

/// Room in a connection's channel for notifications beyond the suspended pulls' reserved slots.
const NOTIFY_SLOTS: usize = 64;
/// Most chunks handed to one vectored write.
const MAX_IOV: usize = 64;
/// Bytes asked of the socket per read.
const READ_CHUNK: usize = 64 * 1024;

/// Ticks of a connection's idle timer per idle bound (`server-channel-max-idle-time-seconds`).
const IDLE_TICKS: u32 = 4;

/// Accepts connections until shutdown; each gets its own task. Waits for them on shutdown.
pub(crate) async fn serve(
    core: Arc<Core>,
    face: Arc<RemotingState>,
    listener: TcpListener,
    role: Role,
    gate: Arc<Gate>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut conns = tokio::task::JoinSet::new();
    let max = core.config.max_connections.max(1);
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    // Count only live connections: reap the tasks that already ended.
                    while conns.try_join_next().is_some() {}
                    if conns.len() >= max {
                        // Relaxed: a statistic.
                        face.counters.connections_refused.fetch_add(1, Ordering::Relaxed);
                        tracing::warn!(%peer, max, "connection refused: max-connections reached");
                        drop(stream);
                        continue;
                    }
                    let _ = stream.set_nodelay(true);
                    conns.spawn(admit(
                        Arc::clone(&core),
                        Arc::clone(&face),
                        stream,
                        peer,
                        role,
                        Arc::clone(&gate),
                        shutdown.clone(),
                    ));
                }
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            _ = shutdown.changed() => break,
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
    drop(listener);
    while conns.join_next().await.is_some() {}
}

/// Serves a new connection. Under `permissive` and `enforcing`, first decides what it speaks
/// from its first byte (peeked, not consumed), or closes it when the TLS mode refuses it; under
/// `disabled` it goes straight to the plaintext connection code. Runs inside the connection's own task, so
/// `max-connections` counts connections still being admitted, a client that never sends is
/// closed after the idle time as any other, and a TLS handshake that stalls after its first
/// byte is closed after `tls-handshake-timeout-ms`.
#[allow(clippy::too_many_arguments)] // the connection's state, passed on as it is
async fn admit(
    core: Arc<Core>,
    face: Arc<RemotingState>,
    stream: TcpStream,
    peer: SocketAddr,
    role: Role,
    gate: Arc<Gate>,
    mut shutdown: watch::Receiver<bool>,
) {
    if gate.mode == TlsMode::Disabled {
        // Nothing to tell apart: no peek (a syscall per connection). A TLS ClientHello read as
        // a frame declares a length of about 369 MB (`16 03 0x ..`), over the frame limit: the
        // connection is closed as any unparseable frame's, and counted in `bad_frames`.
        connection(core, face, stream.into_split(), peer, role, shutdown).await;
        return;
    }
    let idle = idle_time(&face);
    let first = tokio::select! {
        first = tokio::time::timeout(idle, tls::first_byte(&stream)) => match first {
            Ok(Some(b)) => b,
            Ok(None) => return,
            Err(_) => {
                tracing::info!(%peer, idle_secs = idle.as_secs(), "closing a connection that sent nothing");
                return;
            }
        },
        _ = shutdown.changed() => return,
    };
    let tls_hello = first == tls::TLS_HANDSHAKE_RECORD;
    match (gate.mode, tls_hello, &gate.acceptor) {
        (TlsMode::Enforcing, false, _) => {
            // Relaxed: a statistic.
            face.counters.connections_refused.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(%peer, "connection closed: plaintext while tls-mode is enforcing");
        }
        (_, true, Some(acceptor)) => {
            let handshake = tokio::time::timeout(gate.handshake_timeout, acceptor.accept(stream));
            let tls_stream = tokio::select! {
                done = handshake => match done {
                    Ok(Ok(s)) => s,
                    Ok(Err(e)) => {
                        tracing::warn!(%peer, error = %e, "connection closed: TLS handshake failed");
                        return;
                    }
                    Err(_) => {
                        tracing::warn!(%peer, timeout_ms = gate.handshake_timeout.as_millis() as u64, "connection closed: TLS handshake timed out");
                        return;
                    }
                },
                _ = shutdown.changed() => return,
            };
            // A TLS session reads and writes one state: its halves share it behind a lock.
            connection(core, face, tokio::io::split(tls_stream), peer, role, shutdown).await;
        }
        // A TCP stream splits into owned halves with no lock between them (the hot path).
        _ => connection(core, face, stream.into_split(), peer, role, shutdown).await,
    }
}

/// The idle bound of a connection (`Duration::MAX` for never).
fn idle_time(face: &RemotingState) -> Duration {
    match face.config.server_channel_max_idle_time_seconds {
        0 => Duration::MAX,
        s => Duration::from_secs(s),
    }
}

/// Runs a closed connection's clean-up when dropped: its clients leave their groups and the
/// brokers it registered leave the routes, also when the task unwinds from a panic.
struct Cleanup {
    core: Arc<Core>,
    face: Arc<RemotingState>,
    id: ConnId,
    peer: SocketAddr,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        self.face.unlink(self.id);
        self.core.clients.close(&self.core, self.id);
        for broker in self.core.routes.connection_closed(self.id) {
            tracing::info!(%broker, peer = %self.peer, "broker dropped: the connection that registered it closed");
        }
    }
}

/// Encoded frames waiting to be written, as chunks (a header, then its body, shared).
#[derive(Default)]
struct Outbox {
    chunks: VecDeque<Bytes>,
    bytes: usize,
    scratch: BytesMut,
}

impl Outbox {
    fn is_empty(&self) -> bool {
        self.chunks.is_empty()
    }

    /// Queues `cmd`. A response that cannot be encoded (over the 16 MiB frame limit, or a
    /// value the binary header cannot hold) is answered with `SYSTEM_ERROR` on its opaque
    /// instead, so the client is told at once rather than waiting for its RPC timeout; a
    /// request of ours that cannot be encoded (a notification) is logged and dropped.
    fn push(&mut self, cmd: RemotingCommand) {
        match cmd.encode_head(&mut self.scratch) {
            Ok(()) => {
                let head = self.scratch.split().freeze();
                self.put(head);
                if !cmd.body.is_empty() {
                    self.put(cmd.body);
                }
            }
            Err(e) if cmd.is_response() => {
                tracing::warn!(error = %e, code = cmd.code, opaque = cmd.opaque, "cannot encode a response; answering SYSTEM_ERROR");
                let answer = unencodable(cmd, &e.to_string());
                match answer.encode(&mut self.scratch) {
                    Ok(()) => {
                        let frame = self.scratch.split().freeze();
                        self.put(frame);
                    }
                    Err(e) => {
                        tracing::error!(error = %e, "cannot encode the error answer either; dropped")
                    }
                }
            }
            Err(e) => {
                tracing::error!(error = %e, code = cmd.code, "cannot encode an outgoing request; dropped");
            }
        }
    }

    fn put(&mut self, chunk: Bytes) {
        self.bytes += chunk.len();
        self.chunks.push_back(chunk);
    }

    fn slices(&self) -> Vec<IoSlice<'_>> {
        self.chunks.iter().take(MAX_IOV).map(|c| IoSlice::new(c)).collect()
    }

    /// Drops the first `n` bytes written.
    fn advance(&mut self, mut n: usize) {
        self.bytes -= n.min(self.bytes);
        while n > 0 {
            let Some(front) = self.chunks.front_mut() else { return };
            if n < front.len() {
                front.advance(n);
                return;
            }
            n -= front.len();
            self.chunks.pop_front();
        }
    }
}

/// The `SYSTEM_ERROR` answer standing in for a response that could not be encoded: same opaque,
/// flag and header encoding, no fields and no body.
fn unencodable(resp: RemotingCommand, why: &str) -> RemotingCommand {
    RemotingCommand {
        code: response_code::SYSTEM_ERROR,
        remark: Some(format!("the response could not be encoded: {}", quote(why))),
        ext_fields: ExtFields::new(),
        body: Bytes::new(),
        ..resp
    }
}

/// Serves one connection, plaintext or TLS alike: its read and write halves are anything
/// readable and writable, so both share this loop and its bounds.
async fn connection<R, W>(
    core: Arc<Core>,
    face: Arc<RemotingState>,
    (mut reader, mut writer): (R, W),
    peer: SocketAddr,
    role: Role,
    mut shutdown: watch::Receiver<bool>,
) where
    R: AsyncRead + Send + Unpin,
    W: AsyncWrite + Send + Unpin,
{
    // Relaxed: ids only need to be unique.
    let id = NEXT_CONN.fetch_add(1, Ordering::Relaxed);
    let max_suspended = face.config.suspended_pull_cap();
    let (tx, mut rx) = mpsc::channel::<Outgoing>(max_suspended + NOTIFY_SLOTS);
    let ctx = ConnCtx {
        id,
        peer,
        tx,
        shutdown: shutdown.clone(),
        suspended: Arc::new(Semaphore::new(max_suspended)),
    };
    face.link(id, ctx.tx.clone());
    core.clients.open(id, peer);
    let _cleanup = Cleanup { core: Arc::clone(&core), face: Arc::clone(&face), id, peer };
    tracing::debug!(conn = id, %peer, ?role, "connection opened");
    let high_water = face.config.write_buffer_high_water_mark.max(1);
    let idle = idle_time(&face);
    let mut codec = RemotingCodec::default();
    let mut rbuf = BytesMut::with_capacity(READ_CHUNK);
    let mut out = Outbox::default();
    // The idle bound, checked by a timer that ticks every quarter of it (armed once, not per
    // request: a timer entry per loop turn cost a lock of the runtime's timer wheel and a clock
    // read or two per request); a connection with no read or write for four ticks in a row is
    // idle, so it closes between `idle` and 1.25 x `idle` after its last activity.
    let tick = (idle / IDLE_TICKS).max(Duration::from_millis(1));
    let idle_timer =
        tokio::time::sleep_until(Instant::now().checked_add(tick).unwrap_or_else(far_future));
    tokio::pin!(idle_timer);
    let (mut active, mut quiet_ticks) = (false, 0u32);
    // Armed once for the same reason: a `changed()` per loop turn registered a waiter in the
    // watch's list, under its lock.
    let stopping = shutdown.changed();
    tokio::pin!(stopping);
    let mut fatal: Option<String> = None;
    // Bytes handed to the stream that it may still hold (a TLS session buffers records until
    // flushed); a plain TCP stream's flush is immediate.
    let mut unflushed = false;
    let reason: String = loop {
        // Answer what is buffered, as long as the answers fit under the high-water mark.
        while fatal.is_none() && out.bytes < high_water {
            match codec.decode(&mut rbuf) {
                Ok(Some(req)) => handle(&core, &face, &ctx, role, req, &mut out),
                Ok(None) => break,
                Err(CodecError::Frame(FrameError::HeaderRefused(refused))) => {
                    // Consumed whole and still in step: answer it, keep the connection.
                    // Relaxed: a statistic.
                    face.counters.bad_frames.fetch_add(1, Ordering::Relaxed);
                    tracing::debug!(conn = id, %peer, reason = %refused.reason, "request header refused");
                    if let Some(resp) = refused.response() {
                        out.push(resp);
                    }
                }
                Err(e) => {
                    // Relaxed: a statistic.
                    face.counters.bad_frames.fetch_add(1, Ordering::Relaxed);
                    fatal = Some(format!("unparseable frame: {e}"));
                }
            }
        }
        note_queued(&face, out.bytes);
        if out.is_empty() && !unflushed {
            if let Some(reason) = fatal.take() {
                tracing::warn!(conn = id, %peer, %reason, "closing connection");
                break reason;
            }
        }
        let open = out.bytes < high_water && fatal.is_none();
        if !open {
            // Relaxed: a statistic.
            face.counters.reads_paused.fetch_add(1, Ordering::Relaxed);
        }
        if open {
            rbuf.reserve(READ_CHUNK);
        }
        tokio::select! {
            // Cancel-safe: bytes read are kept in `rbuf`.
            read = reader.read_buf(&mut rbuf), if open => match read {
                Ok(0) => break "closed by peer".into(),
                Ok(_) => active = true,
                Err(e) => break format!("read error: {e}"),
            },
            // Cancel-safe: one write (or flush) call, whose count is applied here.
            written = write_some(&mut writer, &out), if !out.is_empty() || unflushed => match written {
                Ok(Some(n)) => {
                    out.advance(n);
                    unflushed = true;
                    active = true;
                }
                Ok(None) => unflushed = false,
                Err(e) => break format!("write error: {e}"),
            },
            Some(msg) = rx.recv(), if out.bytes < high_water => {
                out.push(msg);
                while out.bytes < high_water {
                    match rx.try_recv() {
                        Ok(more) => out.push(more),
                        Err(_) => break,
                    }
                }
            }
            () = &mut idle_timer => {
                quiet_ticks = if std::mem::take(&mut active) { 0 } else { quiet_ticks + 1 };
                if quiet_ticks >= IDLE_TICKS {
                    tracing::info!(conn = id, %peer, idle_secs = idle.as_secs(), "closing an idle connection");
                    break "idle".into();
                }
                let next = Instant::now().checked_add(tick).unwrap_or_else(far_future);
                idle_timer.as_mut().reset(next);
            }
            _ = &mut stopping => {
                // Suspended pulls answer on shutdown; give them a moment to reach us.
                let deadline = Instant::now() + Duration::from_millis(200);
                while let Ok(Some(msg)) = tokio::time::timeout_at(deadline, rx.recv()).await {
                    out.push(msg);
                }
                let _ = tokio::time::timeout(Duration::from_secs(1), flush(&mut writer, &mut out)).await;
                break "broker shutting down".into();
            }
        }
    };
    note_queued(&face, 0);
    drop((reader, writer));
    tracing::debug!(conn = id, %peer, %reason, "connection closed");
}

/// A deadline that never comes (for an idle timeout of 0: never).
fn far_future() -> Instant {
    Instant::now() + Duration::from_secs(86_400 * 365)
}

/// Records the bytes one connection has queued for writing (the broker keeps the largest).
fn note_queued(face: &RemotingState, bytes: usize) {
    // Relaxed: a statistic.
    face.counters.max_queued_write_bytes.fetch_max(bytes as u64, Ordering::Relaxed);
}

/// One write of what is queued (`Some(bytes written)`), or, with nothing queued, a flush of
/// what the stream still buffers (`None`).
async fn write_some<W: AsyncWrite + Unpin>(
    writer: &mut W,
    out: &Outbox,
) -> std::io::Result<Option<usize>> {
    if out.is_empty() {
        writer.flush().await?;
        return Ok(None);
    }
    match writer.write_vectored(&out.slices()).await? {
        0 => Err(std::io::ErrorKind::WriteZero.into()),
        n => Ok(Some(n)),
    }
}

/// Writes everything queued, and flushes it.
async fn flush<W: AsyncWrite + Unpin>(writer: &mut W, out: &mut Outbox) -> std::io::Result<()> {
    while let Some(n) = write_some(writer, out).await? {
        out.advance(n);
    }
    Ok(())
}

/// A request code that makes the handler panic (tests of the clean-up guard only).
#[cfg(test)]
pub(crate) const TEST_PANIC_CODE: i32 = -4242;

fn handle(
    core: &Arc<Core>,
    face: &Arc<RemotingState>,
    ctx: &ConnCtx,
    role: Role,
    req: RemotingCommand,
    out: &mut Outbox,
) {
    if req.is_response() {
        // An answer to a request the broker sent: to the call waiting for it, if any (answers
        // to one-way requests and late answers are dropped there).
        face.answered(ctx.id, req);
        return;
    }
    #[cfg(test)]
    if req.code == TEST_PANIC_CODE {
        panic!("test hook: a handler panics");
    }
    let oneway = req.is_oneway();
    let reply = table::dispatch(core, face, ctx, role, req);
    match reply {
        Reply::Now(resp) if !oneway => out.push(*resp),
        Reply::Now(_) | Reply::Nothing => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::broker::BrokerConfig;
    use crate::remoting::code::request_code;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[test]
    fn given_chunks_when_advancing_across_them_should_keep_the_unwritten_rest() {
        let mut out = Outbox::default();
        out.put(Bytes::from_static(b"abc"));
        out.put(Bytes::from_static(b"defg"));
        out.advance(4);
        assert_eq!(out.bytes, 3);
        assert_eq!(out.chunks.iter().map(|c| c.as_ref()).collect::<Vec<_>>(), [b"efg"]);
        out.advance(3);
        assert!(out.is_empty() && out.bytes == 0);
    }

    #[tokio::test]
    async fn given_a_handler_that_panics_should_still_remove_the_connections_clients() {
        let config = BrokerConfig {
            remoting: crate::broker::RemotingConfig {
                listen: "127.0.0.1:0".parse().unwrap(),
                namesrv_listen: None,
                ..Default::default()
            },
            ..BrokerConfig::default()
        };
        let broker = crate::broker::start(config).await.unwrap();
        let mut stream = TcpStream::connect(broker.broker_addr().unwrap()).await.unwrap();
        let body = br#"{"clientID":"127.0.0.1@panic","producerDataSet":[],"consumerDataSet":[{"groupName":"panic_group","consumeType":"CONSUME_PASSIVELY","messageModel":"CLUSTERING","consumeFromWhere":"CONSUME_FROM_FIRST_OFFSET","subscriptionDataSet":[],"unitMode":false}]}"#;
        let hb = RemotingCommand::request(request_code::HEART_BEAT, 1).with_body(&body[..]);
        let mut frame = BytesMut::new();
        hb.encode(&mut frame).unwrap();
        stream.write_all(&frame).await.unwrap();
        let mut buf = BytesMut::new();
        while RemotingCommand::decode(&mut buf).unwrap().is_none() {
            assert!(stream.read_buf(&mut buf).await.unwrap() > 0, "the heartbeat is answered");
        }
        let core = Arc::clone(&broker.core);
        assert_eq!(core.clients.consumer_ids("panic_group"), ["127.0.0.1@panic"]);
        let mut frame = BytesMut::new();
        RemotingCommand::request(TEST_PANIC_CODE, 2).encode(&mut frame).unwrap();
        stream.write_all(&frame).await.unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while !core.clients.consumer_ids("panic_group").is_empty() {
            assert!(
                std::time::Instant::now() < deadline,
                "the client of a connection whose handler panicked leaves its group"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        broker.shutdown().await;
    }
}
