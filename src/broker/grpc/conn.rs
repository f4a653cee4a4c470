//! The gRPC listener's connections: at most `max-connections` open at once (as on the
//! remoting port; one more is closed as soon as it is accepted and counted in
//! `connections_refused`), with `TCP_NODELAY` set (small unary calls are latency-bound).
//!
//! TLS ([`admit`]): under `permissive` (the default, as Apache's proxy serves) the first byte
//! of each connection is peeked: a TLS handshake record goes to rustls (ALPN `h2`), anything
//! else is served as plaintext HTTP/2, so the 5.x SDKs' TLS default and plaintext clients
//! share the port; `enforcing` closes plaintext connections. Each connection is sniffed and
//! handshaken in its own task, within `tls-handshake-timeout-ms`, so a slow or silent client
//! never holds up the accept loop; a handshake that fails or times out closes the
//! connection (counted in `tls_handshakes_failed`).

use crate::sync::Arc;
use crate::sync::Ordering;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_stream::Stream;
use tonic::transport::server::{Connected, TcpConnectInfo};

use super::GrpcState;
use crate::broker::core::Core;
use crate::broker::security::config::TlsMode;
use crate::broker::security::tls::GrpcTls;

/// An accepted connection holding one of the listener's connection slots until it closes.
#[derive(Debug)]
pub(crate) struct Counted {
    stream: Io,
    _slot: OwnedSemaphorePermit,
}

/// A connection's transport: plaintext, or TLS over it.
#[derive(Debug)]
enum Io {
    Plain(TcpStream),
    Tls(Box<tokio_rustls::server::TlsStream<TcpStream>>),
}

impl Io {
    fn tcp(&self) -> &TcpStream {
        match self {
            Io::Plain(s) => s,
            Io::Tls(s) => s.get_ref().0,
        }
    }
}

/// The connections the server is given: those accepted, after the TLS gate.
pub(crate) type Incoming = Pin<Box<dyn Stream<Item = io::Result<Counted>> + Send>>;

/// Most admitted connections waiting for the server to take them.
const ADMITTED_BACKLOG: usize = 64;

/// The connections `conns` accepts, through the TLS gate `tls` (none: plaintext only, no
/// sniffing). See the module docs.
pub(crate) fn admit(
    conns: Connections,
    tls: Option<GrpcTls>,
    handshake_timeout: std::time::Duration,
) -> Incoming {
    let Some(tls) = tls else { return Box::pin(conns) };
    let grpc = Arc::clone(&conns.grpc);
    let (tx, rx) = tokio::sync::mpsc::channel(ADMITTED_BACKLOG);
    tokio::spawn(async move {
        let mut conns = conns;
        loop {
            let next = tokio::select! {
                next = tokio_stream::StreamExt::next(&mut conns) => next,
                // The server stopped taking connections: stop accepting (the port is freed).
                () = tx.closed() => return,
            };
            let Some(Ok(c)) = next else { continue };
            let (tx, tls, grpc) = (tx.clone(), tls.clone(), Arc::clone(&grpc));
            tokio::spawn(async move {
                match tokio::time::timeout(handshake_timeout, gate(c, &tls, &grpc)).await {
                    Ok(Some(c)) => {
                        let _ = tx.send(Ok(c)).await;
                    }
                    Ok(None) => {}
                    Err(_) => {
                        // Relaxed: a statistic.
                        grpc.tls_handshakes_failed.fetch_add(1, Ordering::Relaxed);
                        tracing::debug!("gRPC connection closed: no TLS handshake in time");
                    }
                }
            });
        }
    });
    Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx))
}

/// Sniffs one connection and does its TLS handshake if it opens with one; `None` to close it
/// (plaintext under `enforcing`, a failed handshake, nothing sent).
async fn gate(c: Counted, tls: &GrpcTls, grpc: &GrpcState) -> Option<Counted> {
    let Counted { stream: Io::Plain(stream), _slot } = c else { return Some(c) };
    let mut first = [0u8; 1];
    match stream.peek(&mut first).await {
        Ok(1..) => {}
        _ => return None,
    }
    if first[0] != crate::broker::security::tls::TLS_HANDSHAKE_RECORD {
        if tls.mode == TlsMode::Enforcing {
            tracing::debug!("plaintext gRPC connection closed: the port enforces TLS");
            return None;
        }
        return Some(Counted { stream: Io::Plain(stream), _slot });
    }
    match tls.acceptor.accept(stream).await {
        Ok(s) => Some(Counted { stream: Io::Tls(Box::new(s)), _slot }),
        Err(e) => {
            // Relaxed: a statistic.
            grpc.tls_handshakes_failed.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(error = %e, "gRPC TLS handshake failed");
            None
        }
    }
}

/// The connections a listener accepts, within `max-connections`.
#[derive(Debug)]
pub(crate) struct Connections {
    listener: TcpListener,
    slots: Arc<Semaphore>,
    grpc: Arc<GrpcState>,
    /// Set after a failed accept: the next one waits, so a listener out of file descriptors
    /// does not spin (as the remoting server waits 50 ms).
    backoff: Option<Pin<Box<tokio::time::Sleep>>>,
}

/// How long the listener waits after a failed accept.
const ACCEPT_BACKOFF: std::time::Duration = std::time::Duration::from_millis(50);

impl Connections {
    /// The connections `listener` accepts for the broker `core`, counted in `grpc`.
    pub(crate) fn new(core: &Core, grpc: Arc<GrpcState>, listener: TcpListener) -> Self {
        let slots = Arc::new(Semaphore::new(core.config.max_connections.max(1)));
        Connections { listener, slots, grpc, backoff: None }
    }
}

impl Stream for Connections {
    type Item = io::Result<Counted>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        loop {
            if let Some(wait) = self.backoff.as_mut() {
                ready!(wait.as_mut().poll(cx));
                self.backoff = None;
            }
            match ready!(self.listener.poll_accept(cx)) {
                Ok((stream, _)) => match Arc::clone(&self.slots).try_acquire_owned() {
                    Ok(slot) => {
                        let _ = stream.set_nodelay(true);
                        return Poll::Ready(Some(Ok(Counted {
                            stream: Io::Plain(stream),
                            _slot: slot,
                        })));
                    }
                    Err(_) => {
                        // Relaxed: a statistic.
                        self.grpc.connections_refused.fetch_add(1, Ordering::Relaxed);
                        // Dropped here: the connection closes at once.
                    }
                },
                Err(e) => {
                    tracing::warn!(error = %e, "gRPC accept failed");
                    self.backoff = Some(Box::pin(tokio::time::sleep(ACCEPT_BACKOFF)));
                }
            }
        }
    }
}

impl Connected for Counted {
    type ConnectInfo = TcpConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.stream.tcp().connect_info()
    }
}

impl AsyncRead for Counted {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match &mut self.stream {
            Io::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Counted {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match &mut self.stream {
            Io::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.stream {
            Io::Plain(s) => Pin::new(s).poll_flush(cx),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.stream {
            Io::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match &mut self.stream {
            Io::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match &self.stream {
            Io::Plain(s) => s.is_write_vectored(),
            Io::Tls(s) => s.is_write_vectored(),
        }
    }
}
