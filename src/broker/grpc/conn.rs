//! The gRPC listener's connections: at most `max-connections` open at once (as on the
//! remoting port; one more is closed as soon as it is accepted and counted in
//! `connections_refused`), with `TCP_NODELAY` set (small unary calls are latency-bound).

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

/// An accepted connection holding one of the listener's connection slots until it closes.
#[derive(Debug)]
pub(crate) struct Counted {
    stream: TcpStream,
    _slot: OwnedSemaphorePermit,
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
                        return Poll::Ready(Some(Ok(Counted { stream, _slot: slot })));
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
        self.stream.connect_info()
    }
}

impl AsyncRead for Counted {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for Counted {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }
}
