//! Accepting connections and serving one connection per task.
//!
//! A connection task owns its socket. It decodes every complete frame in its read buffer,
//! answers each request through the code table (inline), writes all responses of that burst
//! with one `write_all`, and meanwhile forwards what other tasks send on the connection's
//! channel (late long-poll answers, `NOTIFY_CONSUMER_IDS_CHANGED`). A frame that cannot be
//! parsed closes this connection only, with the reason logged.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::BytesMut;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio_util::codec::{Decoder, Encoder};

use super::table::{self, Role};
use super::{ConnCtx, Outgoing, Reply, Shared};
use crate::remoting::codec::{CodecError, RemotingCodec};
use crate::remoting::{FrameError, RemotingCommand};

static NEXT_CONN: AtomicU64 = AtomicU64::new(1);

/// Accepts connections until shutdown; each gets its own task. Waits for them on shutdown.
pub(crate) async fn serve(
    shared: Arc<Shared>,
    listener: TcpListener,
    role: Role,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut conns = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    let _ = stream.set_nodelay(true);
                    conns.spawn(connection(Arc::clone(&shared), stream, peer, role, shutdown.clone()));
                }
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                }
            },
            _ = shutdown.changed() => break,
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
    drop(listener);
    while conns.join_next().await.is_some() {}
}

async fn connection(
    shared: Arc<Shared>,
    mut stream: TcpStream,
    peer: SocketAddr,
    role: Role,
    mut shutdown: watch::Receiver<bool>,
) {
    // Relaxed: ids only need to be unique.
    let id = NEXT_CONN.fetch_add(1, Ordering::Relaxed);
    let (tx, mut rx) = mpsc::unbounded_channel::<Outgoing>();
    let ctx = ConnCtx { id, peer, tx, shutdown: shutdown.clone() };
    shared.clients.open(id, ctx.tx.clone());
    tracing::debug!(conn = id, %peer, ?role, "connection opened");
    let mut codec = RemotingCodec::default();
    let mut rbuf = BytesMut::with_capacity(64 * 1024);
    let mut wbuf = BytesMut::with_capacity(64 * 1024);
    let reason: String = loop {
        tokio::select! {
            read = stream.read_buf(&mut rbuf) => {
                match read {
                    Ok(0) => break "closed by peer".into(),
                    Ok(_) => {}
                    Err(e) => break format!("read error: {e}"),
                }
                let mut fatal = None;
                loop {
                    match codec.decode(&mut rbuf) {
                        Ok(Some(req)) => handle(&shared, &ctx, role, req, &mut wbuf, &mut codec),
                        Ok(None) => break,
                        Err(CodecError::Frame(FrameError::HeaderRefused(refused))) => {
                            // Consumed whole and still in step: answer it, keep the connection.
                            // Relaxed: a statistic.
                            shared.counters.bad_frames.fetch_add(1, Ordering::Relaxed);
                            tracing::debug!(conn = id, %peer, reason = %refused.reason, "request header refused");
                            if let Some(resp) = refused.response() {
                                encode(&mut codec, resp, &mut wbuf);
                            }
                        }
                        Err(e) => {
                            shared.counters.bad_frames.fetch_add(1, Ordering::Relaxed);
                            fatal = Some(format!("unparseable frame: {e}"));
                            break;
                        }
                    }
                }
                if !wbuf.is_empty() {
                    if let Err(e) = stream.write_all(&wbuf).await {
                        break format!("write error: {e}");
                    }
                    wbuf.clear();
                }
                if let Some(reason) = fatal {
                    tracing::warn!(conn = id, %peer, %reason, "closing connection");
                    break reason;
                }
            }
            Some(out) = rx.recv() => {
                encode(&mut codec, out, &mut wbuf);
                while let Ok(more) = rx.try_recv() {
                    encode(&mut codec, more, &mut wbuf);
                }
                if let Err(e) = stream.write_all(&wbuf).await {
                    break format!("write error: {e}");
                }
                wbuf.clear();
            }
            _ = shutdown.changed() => {
                // Suspended pulls answer on shutdown; give them a moment to reach us.
                let deadline = tokio::time::Instant::now() + std::time::Duration::from_millis(200);
                while let Ok(Some(out)) = tokio::time::timeout_at(deadline, rx.recv()).await {
                    encode(&mut codec, out, &mut wbuf);
                }
                let _ = stream.write_all(&wbuf).await;
                break "broker shutting down".into();
            }
        }
    };
    let _ = stream.shutdown().await;
    tracing::debug!(conn = id, %peer, %reason, "connection closed");
    shared.clients.close(&shared, id);
    for broker in shared.routes.connection_closed(id) {
        tracing::info!(%broker, %peer, "broker dropped: the connection that registered it closed");
    }
}

fn encode(codec: &mut RemotingCodec, cmd: RemotingCommand, out: &mut BytesMut) {
    if let Err(e) = codec.encode(cmd, out) {
        tracing::error!(error = %e, "cannot encode an outgoing command; dropped");
    }
}

fn handle(
    shared: &Arc<Shared>,
    ctx: &ConnCtx,
    role: Role,
    req: RemotingCommand,
    wbuf: &mut BytesMut,
    codec: &mut RemotingCodec,
) {
    if req.is_response() {
        // Answers to our own requests (we send only one-way ones): nothing to do.
        return;
    }
    let oneway = req.is_oneway();
    let reply = table::dispatch(shared, ctx, role, req);
    match reply {
        Reply::Now(resp) if !oneway => encode(codec, *resp, wbuf),
        Reply::Now(_) | Reply::Nothing => {}
    }
}
