//! A minimal remoting client: send a request, get back the response with the same `opaque`.
//!
//! Everything in baiji that talks to a RocketMQ server as a client (the registrar towards name
//! servers, the bench's raw driver, the examples, the tests' helpers) uses this module, so the
//! request/response matching, the timeouts and the buffer limits live in one place.
//!
//! | type | in flight | background tasks | for |
//! |---|---|---|---|
//! | [`Connection`] | one request at a time (`&mut self`) | none | name-server queries, a synchronous producer, a long-lived registration link |
//! | [`Pipeline`] | any number (`&self`, shareable in an `Arc`) | a reader and a writer | long-polling consumers, asynchronous producers |
//! | [`request_once`] | one, on a fresh connection | none | a single query |
//!
//! Both connection types assign each request's `opaque` themselves (1, 2, 3, … wrapping), match
//! the answer by it, and drop what nobody waits for: late answers to requests that timed out,
//! and (on a [`Connection`]) requests the server sends on its own. A [`Pipeline`] hands those
//! server → client requests (`NOTIFY_CONSUMER_IDS_CHANGED`, `CHECK_TRANSACTION_STATE`, …) to a
//! [`RequestHandler`] that may answer them.
//!
//! # Bounded memory
//!
//! A broken or hostile peer cannot make the client allocate without bound:
//! * the read buffer holds at most one incomplete frame, which the codec refuses beyond
//!   [`MAX_FRAME_LEN`](crate::remoting::MAX_FRAME_LEN) (the connection then fails with [`ClientError::Decode`]) and grows only
//!   as bytes actually arrive ([`decode_frame`](crate::remoting::decode_frame));
//! * a [`Pipeline`]'s outgoing queue holds at most [`PipelineOptions::queue_frames`] frames;
//!   callers wait for room, and an answer to a server request that finds it full is dropped
//!   rather than queued;
//! * waiters are only ever those of calls in progress: a call that times out or is cancelled
//!   removes its entry, and answers nobody waits for are discarded.

use std::collections::HashMap;
use std::fmt;
use std::io;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use thiserror::Error;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, ToSocketAddrs};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

use crate::remoting::command::RemotingCommand;
use crate::remoting::error::FrameError;

/// Default bound for connecting and for one call to be answered.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(3);

/// Default capacity of a [`Pipeline`]'s outgoing queue, in frames.
pub const DEFAULT_QUEUE_FRAMES: usize = 1024;

/// Free room below which the read buffer is grown before the next read.
const READ_LOW_WATER: usize = 4 * 1024;
/// How much the read buffer grows by at a time (it also grows as [`RemotingCommand::decode`]
/// reserves room for the frame in progress).
const READ_CHUNK: usize = 64 * 1024;

/// Why a client operation failed.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum ClientError {
    /// The TCP connection could not be made.
    #[error("connecting to {addr}: {source}")]
    Connect {
        /// The address as given.
        addr: String,
        /// The socket error.
        source: io::Error,
    },
    /// No TCP connection within the connect timeout.
    #[error("connecting to {addr}: no connection within {timeout:?}")]
    ConnectTimeout {
        /// The address as given.
        addr: String,
        /// The bound that passed.
        timeout: Duration,
    },
    /// Reading from or writing to the socket failed.
    #[error("connection failed: {0}")]
    Io(#[from] io::Error),
    /// The request cannot be encoded (too large, or a value the binary header cannot hold).
    #[error("cannot encode the request: {0}")]
    Encode(FrameError),
    /// The peer sent bytes that are not the remoting protocol (or a frame over the limit); the
    /// connection is unusable.
    #[error("the peer sent an undecodable frame: {0}")]
    Decode(FrameError),
    /// The peer closed the connection, or the connection failed earlier.
    #[error("connection closed by the peer")]
    Closed,
    /// No answer within the call's timeout.
    #[error("no answer to request code {code} within {timeout:?}")]
    Timeout {
        /// The request's code.
        code: i32,
        /// The bound that passed.
        timeout: Duration,
    },
    /// An earlier call on this [`Connection`] was cancelled in the middle of writing its frame,
    /// so the byte stream is out of step; open a new connection.
    #[error("an earlier request was cancelled mid-write; the connection is out of step")]
    Desynchronised,
}

/// Opens a TCP connection within `timeout`, with `TCP_NODELAY` on.
async fn connect_stream<A>(addr: A, timeout: Duration) -> Result<TcpStream, ClientError>
where
    A: ToSocketAddrs + fmt::Display,
{
    let name = addr.to_string();
    let stream = match tokio::time::timeout(timeout, TcpStream::connect(addr)).await {
        Ok(Ok(s)) => s,
        Ok(Err(source)) => return Err(ClientError::Connect { addr: name, source }),
        Err(_) => return Err(ClientError::ConnectTimeout { addr: name, timeout }),
    };
    // Requests are small and latency matters more than packet count; failing to set the
    // option changes nothing about correctness.
    let _ = stream.set_nodelay(true);
    Ok(stream)
}

/// Grows `buf` before a read when little room is left; never beyond what arrived plus one chunk.
fn make_room(buf: &mut BytesMut) {
    if buf.capacity() - buf.len() < READ_LOW_WATER {
        buf.reserve(READ_CHUNK);
    }
}

/// What came off the wire, classified.
enum Incoming {
    /// A response (matched by the caller against its opaque).
    Response(RemotingCommand),
    /// The response with this opaque had a header the codec refused to decode in full.
    RefusedResponse(i32, FrameError),
    /// A request (or a refused request header, which nobody can act on) from the peer.
    Request(Option<RemotingCommand>),
}

/// Takes the next whole command off `buf`, `Ok(None)` when more bytes are needed.
fn next_incoming(buf: &mut BytesMut) -> Result<Option<Incoming>, ClientError> {
    match RemotingCommand::decode(buf) {
        Ok(Some(cmd)) if cmd.is_response() => Ok(Some(Incoming::Response(cmd))),
        Ok(Some(cmd)) => Ok(Some(Incoming::Request(Some(cmd)))),
        Ok(None) => Ok(None),
        // Not fatal: the frame was consumed and the stream is still in step.
        Err(FrameError::HeaderRefused(r)) => {
            let response = r.flag & RemotingCommand::FLAG_RESPONSE != 0;
            let opaque = r.opaque;
            Ok(Some(if response {
                Incoming::RefusedResponse(opaque, FrameError::HeaderRefused(r))
            } else {
                Incoming::Request(None)
            }))
        }
        Err(e) => Err(ClientError::Decode(e)),
    }
}

/// Encodes `cmd` into a fresh buffer.
fn encode(cmd: &RemotingCommand) -> Result<Bytes, ClientError> {
    let mut b = BytesMut::with_capacity(256 + cmd.body.len());
    cmd.encode(&mut b).map_err(ClientError::Encode)?;
    Ok(b.freeze())
}

/// Sends one request on a fresh connection and returns its response; connecting and waiting
/// for the answer together take at most `timeout`.
///
/// # Errors
///
/// Any [`ClientError`]: the connection could not be made, failed or closed, or no answer came
/// within `timeout` ([`ClientError::Timeout`]).
///
/// # Cancel safety
///
/// Cancel safe: the connection is dropped with the future.
///
/// # Examples
///
/// ```no_run
/// use std::time::Duration;
/// use baiji::remoting::client::request_once;
/// use baiji::remoting::code::request_code;
/// use baiji::remoting::RemotingCommand;
///
/// # async fn f() -> Result<(), baiji::remoting::client::ClientError> {
/// let ask = RemotingCommand::request(request_code::GET_BROKER_CLUSTER_INFO, 0);
/// let answer = request_once("127.0.0.1:9876", ask, Duration::from_secs(3)).await?;
/// println!("code {}: {} body bytes", answer.code, answer.body.len());
/// # Ok(()) }
/// ```
pub async fn request_once<A>(
    addr: A,
    request: RemotingCommand,
    timeout: Duration,
) -> Result<RemotingCommand, ClientError>
where
    A: ToSocketAddrs + fmt::Display,
{
    let code = request.code;
    let attempt = async {
        let mut conn = Connection::connect(addr, timeout).await?;
        conn.call_within(request, timeout).await
    };
    tokio::time::timeout(timeout, attempt)
        .await
        .unwrap_or(Err(ClientError::Timeout { code, timeout }))
}

/// A connection with one request in flight at a time: write the request, read until its answer.
///
/// No background task: the socket is read only while a call (or [`Connection::idle`]) runs.
/// Frames that are not the awaited answer (late answers, requests from the server) are dropped.
pub struct Connection {
    stream: TcpStream,
    rbuf: BytesMut,
    wbuf: BytesMut,
    opaque: i32,
    call_timeout: Duration,
    /// Set while a frame is being written; still set at the next call means that call's
    /// predecessor was cancelled mid-write.
    writing: bool,
}

impl fmt::Debug for Connection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Connection")
            .field("peer", &self.stream.peer_addr().ok())
            .field("opaque", &self.opaque)
            .field("buffered", &self.rbuf.len())
            .field("call_timeout", &self.call_timeout)
            .finish_non_exhaustive()
    }
}

impl Connection {
    /// Connects to `addr` within `timeout`; calls then wait [`DEFAULT_TIMEOUT`] for their answer
    /// (see [`Connection::with_call_timeout`]).
    ///
    /// # Errors
    ///
    /// [`ClientError::Connect`] or [`ClientError::ConnectTimeout`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub async fn connect<A>(addr: A, timeout: Duration) -> Result<Self, ClientError>
    where
        A: ToSocketAddrs + fmt::Display,
    {
        let stream = connect_stream(addr, timeout).await?;
        Ok(Self::from_stream(stream))
    }

    /// Wraps an already connected stream.
    #[must_use]
    pub fn from_stream(stream: TcpStream) -> Self {
        Connection {
            stream,
            rbuf: BytesMut::with_capacity(READ_CHUNK),
            wbuf: BytesMut::with_capacity(4096),
            opaque: 0,
            call_timeout: DEFAULT_TIMEOUT,
            writing: false,
        }
    }

    /// Sets how long [`Connection::call`] waits for an answer.
    #[must_use]
    pub fn with_call_timeout(mut self, timeout: Duration) -> Self {
        self.call_timeout = timeout;
        self
    }

    fn next_opaque(&mut self) -> i32 {
        self.opaque = self.opaque.wrapping_add(1);
        self.opaque
    }

    async fn write(&mut self, cmd: &RemotingCommand) -> Result<(), ClientError> {
        if self.writing {
            return Err(ClientError::Desynchronised);
        }
        self.wbuf.clear();
        cmd.encode(&mut self.wbuf).map_err(ClientError::Encode)?;
        self.writing = true;
        self.stream.write_all(&self.wbuf).await?;
        self.writing = false;
        Ok(())
    }

    /// Sends `request` with a fresh opaque and returns the response carrying that opaque,
    /// waiting at most the connection's call timeout.
    ///
    /// # Errors
    ///
    /// [`ClientError::Timeout`] if no answer came in time (the connection stays usable; a late
    /// answer is dropped), [`ClientError::Closed`], [`ClientError::Io`] or
    /// [`ClientError::Decode`] if the connection failed, [`ClientError::Encode`] if the request
    /// cannot be encoded.
    ///
    /// # Cancel safety
    ///
    /// Cancelling while the response is awaited is safe (bytes read stay buffered). Cancelling
    /// in the middle of writing the request leaves the stream out of step: later calls return
    /// [`ClientError::Desynchronised`].
    pub async fn call(&mut self, request: RemotingCommand) -> Result<RemotingCommand, ClientError> {
        let timeout = self.call_timeout;
        self.call_within(request, timeout).await
    }

    /// As [`Connection::call`], with its own timeout.
    ///
    /// # Errors
    ///
    /// As for [`Connection::call`].
    ///
    /// # Cancel safety
    ///
    /// As for [`Connection::call`].
    pub async fn call_within(
        &mut self,
        mut request: RemotingCommand,
        timeout: Duration,
    ) -> Result<RemotingCommand, ClientError> {
        let code = request.code;
        request.opaque = self.next_opaque();
        request.flag &= !(RemotingCommand::FLAG_RESPONSE | RemotingCommand::FLAG_ONEWAY);
        let opaque = request.opaque;
        let exchange = async {
            self.write(&request).await?;
            self.read_response(opaque).await
        };
        tokio::time::timeout(timeout, exchange)
            .await
            .unwrap_or(Err(ClientError::Timeout { code, timeout }))
    }

    /// Sends `request` as a one-way request (flag set, fresh opaque): nothing answers it.
    ///
    /// # Errors
    ///
    /// [`ClientError::Encode`], [`ClientError::Io`] or [`ClientError::Desynchronised`].
    ///
    /// # Cancel safety
    ///
    /// As for [`Connection::call`].
    pub async fn send_oneway(&mut self, mut request: RemotingCommand) -> Result<(), ClientError> {
        request.opaque = self.next_opaque();
        request.flag =
            (request.flag & !RemotingCommand::FLAG_RESPONSE) | RemotingCommand::FLAG_ONEWAY;
        self.write(&request).await
    }

    async fn read_response(&mut self, opaque: i32) -> Result<RemotingCommand, ClientError> {
        loop {
            while let Some(incoming) = next_incoming(&mut self.rbuf)? {
                match incoming {
                    Incoming::Response(cmd) if cmd.opaque == opaque => return Ok(cmd),
                    Incoming::RefusedResponse(o, e) if o == opaque => {
                        return Err(ClientError::Decode(e))
                    }
                    _ => {}
                }
            }
            self.fill().await?;
        }
    }

    /// Reads more bytes; `Closed` at the end of the stream.
    async fn fill(&mut self) -> Result<(), ClientError> {
        make_room(&mut self.rbuf);
        match self.stream.read_buf(&mut self.rbuf).await? {
            0 => Err(ClientError::Closed),
            _ => Ok(()),
        }
    }

    /// Reads and drops whatever the peer sends until the connection ends, and returns why it
    /// ended. For a long-lived connection between calls: a server that restarts or drops the
    /// client is noticed at once instead of at the next call.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: bytes read stay buffered, so a partial frame is completed later. Meant to
    /// be raced against timers in `tokio::select!`.
    pub async fn idle(&mut self) -> ClientError {
        loop {
            loop {
                match next_incoming(&mut self.rbuf) {
                    Ok(Some(_)) => {}
                    Ok(None) => break,
                    Err(e) => return e,
                }
            }
            if let Err(e) = self.fill().await {
                return e;
            }
        }
    }
}

/// Decides what to do with a request the server sends on its own over a [`Pipeline`]: return
/// the answer (built with [`RemotingCommand::response_to`], which echoes its opaque) or `None`
/// to leave it unanswered. One-way requests are never answered, whatever it returns.
///
/// It runs on the connection's reader task, so it must not block; to act on a request
/// elsewhere, send it over a channel and answer later with [`Pipeline::respond`].
pub type RequestHandler = Box<dyn FnMut(RemotingCommand) -> Option<RemotingCommand> + Send>;

/// Settings of a [`Pipeline`].
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct PipelineOptions {
    /// Bound for making the TCP connection.
    pub connect_timeout: Duration,
    /// Bound for one call's answer ([`Pipeline::call`]).
    pub call_timeout: Duration,
    /// Capacity of the outgoing queue, in frames; a call waits (within its timeout) for room.
    pub queue_frames: usize,
}

impl Default for PipelineOptions {
    fn default() -> Self {
        PipelineOptions {
            connect_timeout: DEFAULT_TIMEOUT,
            call_timeout: DEFAULT_TIMEOUT,
            queue_frames: DEFAULT_QUEUE_FRAMES,
        }
    }
}

impl PipelineOptions {
    /// Sets [`PipelineOptions::connect_timeout`].
    #[must_use]
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Sets [`PipelineOptions::call_timeout`].
    #[must_use]
    pub fn call_timeout(mut self, timeout: Duration) -> Self {
        self.call_timeout = timeout;
        self
    }

    /// Sets [`PipelineOptions::queue_frames`] (at least 1).
    #[must_use]
    pub fn queue_frames(mut self, frames: usize) -> Self {
        self.queue_frames = frames.max(1);
        self
    }
}

type Reply = Result<RemotingCommand, ClientError>;

/// The waiters of a [`Pipeline`], by opaque, and the next opaque to hand out.
#[derive(Default)]
struct Waiters {
    next: i32,
    by_opaque: HashMap<i32, oneshot::Sender<Reply>>,
    /// Set when the reader stopped: no answer will come any more.
    closed: bool,
}

type Shared = Arc<Mutex<Waiters>>;

fn lock(w: &Mutex<Waiters>) -> MutexGuard<'_, Waiters> {
    // The map stays consistent across a panic (each operation is one insert or remove).
    w.lock().unwrap_or_else(|p| p.into_inner())
}

/// Removes a call's waiter when the call ends any way other than through its answer
/// (timeout, cancellation, a failed send), so the map only ever holds calls in progress.
struct WaiterGuard<'a> {
    waiters: &'a Mutex<Waiters>,
    opaque: i32,
    /// Cleared once the reader has taken the waiter out (it sent the answer or dropped the
    /// sender): nothing is left to remove, and the answered path takes no lock.
    armed: bool,
}

impl Drop for WaiterGuard<'_> {
    fn drop(&mut self) {
        if self.armed {
            lock(self.waiters).by_opaque.remove(&self.opaque);
        }
    }
}

/// A pipelined connection: any number of requests in flight from any number of tasks, each
/// answer handed to the call with its opaque.
///
/// A reader task decodes what arrives and wakes the waiting call; a writer task writes queued
/// frames, coalescing whatever is queued into one write. Both stop when the connection fails or
/// the `Pipeline` is dropped; calls then fail with [`ClientError::Closed`].
pub struct Pipeline {
    out: mpsc::Sender<Bytes>,
    waiters: Shared,
    call_timeout: Duration,
    tasks: [JoinHandle<()>; 2],
}

impl fmt::Debug for Pipeline {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let w = lock(&self.waiters);
        f.debug_struct("Pipeline")
            .field("in_flight", &w.by_opaque.len())
            .field("closed", &w.closed)
            .field("call_timeout", &self.call_timeout)
            .finish_non_exhaustive()
    }
}

impl Drop for Pipeline {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

impl Pipeline {
    /// Connects with default [`PipelineOptions`]; requests from the server are left unanswered.
    ///
    /// # Errors
    ///
    /// [`ClientError::Connect`] or [`ClientError::ConnectTimeout`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub async fn connect<A>(addr: A) -> Result<Self, ClientError>
    where
        A: ToSocketAddrs + fmt::Display,
    {
        Self::connect_with(addr, PipelineOptions::default(), Box::new(|_| None)).await
    }

    /// Connects with `options`; `on_request` decides about requests from the server.
    ///
    /// Must be called within a tokio runtime (it spawns the reader and writer tasks).
    ///
    /// # Errors
    ///
    /// [`ClientError::Connect`] or [`ClientError::ConnectTimeout`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub async fn connect_with<A>(
        addr: A,
        options: PipelineOptions,
        on_request: RequestHandler,
    ) -> Result<Self, ClientError>
    where
        A: ToSocketAddrs + fmt::Display,
    {
        let stream = connect_stream(addr, options.connect_timeout).await?;
        Ok(Self::from_stream(stream, options, on_request))
    }

    /// Runs a pipeline over an already connected stream (`options.connect_timeout` is unused).
    #[must_use]
    pub fn from_stream(
        stream: TcpStream,
        options: PipelineOptions,
        on_request: RequestHandler,
    ) -> Self {
        let (rd, wr) = stream.into_split();
        let (out, rx) = mpsc::channel::<Bytes>(options.queue_frames.max(1));
        let waiters = Shared::default();
        lock(&waiters).next = 1;
        let writer = tokio::spawn(write_loop(wr, rx));
        let reader = tokio::spawn(read_loop(rd, Arc::clone(&waiters), out.clone(), on_request));
        Pipeline { out, waiters, call_timeout: options.call_timeout, tasks: [writer, reader] }
    }

    /// Sends `request` with a fresh opaque and returns the response carrying that opaque,
    /// waiting at most the call timeout of the [`PipelineOptions`] (queueing included).
    ///
    /// # Errors
    ///
    /// [`ClientError::Timeout`] if no answer came in time (a late answer is dropped),
    /// [`ClientError::Closed`] if the connection ended (or ends before the answer),
    /// [`ClientError::Encode`] if the request cannot be encoded, [`ClientError::Decode`] if the
    /// answer's header was refused by the codec's limits.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the call's waiter is removed, and its answer, if it still comes, dropped.
    pub async fn call(&self, request: RemotingCommand) -> Result<RemotingCommand, ClientError> {
        self.call_within(request, self.call_timeout).await
    }

    /// As [`Pipeline::call`], with its own timeout.
    ///
    /// # Errors
    ///
    /// As for [`Pipeline::call`].
    ///
    /// # Cancel safety
    ///
    /// As for [`Pipeline::call`].
    pub async fn call_within(
        &self,
        mut request: RemotingCommand,
        timeout: Duration,
    ) -> Result<RemotingCommand, ClientError> {
        let code = request.code;
        request.flag &= !(RemotingCommand::FLAG_RESPONSE | RemotingCommand::FLAG_ONEWAY);
        let (tx, rx) = oneshot::channel();
        let opaque = {
            let mut w = lock(&self.waiters);
            if w.closed {
                return Err(ClientError::Closed);
            }
            // Skip ids still waiting (only possible after 2^32 calls with one stuck).
            let mut opaque = w.next;
            while w.by_opaque.contains_key(&opaque) {
                opaque = opaque.wrapping_add(1);
            }
            w.next = opaque.wrapping_add(1);
            w.by_opaque.insert(opaque, tx);
            opaque
        };
        let mut guard = WaiterGuard { waiters: &self.waiters, opaque, armed: true };
        request.opaque = opaque;
        let frame = encode(&request)?;
        let exchange = async {
            self.out.send(frame).await.map_err(|_| ClientError::Closed)?;
            let reply = rx.await;
            guard.armed = false;
            reply.unwrap_or(Err(ClientError::Closed))
        };
        tokio::time::timeout(timeout, exchange)
            .await
            .unwrap_or(Err(ClientError::Timeout { code, timeout }))
    }

    /// Queues `request` as a one-way request (flag set, fresh opaque): nothing answers it.
    ///
    /// # Errors
    ///
    /// [`ClientError::Encode`], or [`ClientError::Closed`] if the connection has ended.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the request is either queued whole or not at all.
    pub async fn send_oneway(&self, mut request: RemotingCommand) -> Result<(), ClientError> {
        request.opaque = {
            let mut w = lock(&self.waiters);
            let opaque = w.next;
            w.next = opaque.wrapping_add(1);
            opaque
        };
        request.flag =
            (request.flag & !RemotingCommand::FLAG_RESPONSE) | RemotingCommand::FLAG_ONEWAY;
        let frame = encode(&request)?;
        self.out.send(frame).await.map_err(|_| ClientError::Closed)
    }

    /// Queues `response` as it is (its opaque and flags untouched): the answer to a request the
    /// server sent, for a [`RequestHandler`] that passed the request on instead of answering.
    ///
    /// # Errors
    ///
    /// [`ClientError::Encode`], or [`ClientError::Closed`] if the connection has ended.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the response is either queued whole or not at all.
    pub async fn respond(&self, response: RemotingCommand) -> Result<(), ClientError> {
        let frame = encode(&response)?;
        self.out.send(frame).await.map_err(|_| ClientError::Closed)
    }

    /// Whether the connection has ended (the reader saw the end of the stream or an error).
    #[must_use]
    pub fn is_closed(&self) -> bool {
        lock(&self.waiters).closed
    }

    /// How many calls are waiting for their answer.
    #[must_use]
    pub fn in_flight(&self) -> usize {
        lock(&self.waiters).by_opaque.len()
    }
}

/// Writes queued frames, coalescing whatever is queued into one write.
async fn write_loop(mut wr: tokio::net::tcp::OwnedWriteHalf, mut rx: mpsc::Receiver<Bytes>) {
    let mut buf = BytesMut::with_capacity(READ_CHUNK);
    while let Some(first) = rx.recv().await {
        buf.clear();
        buf.extend_from_slice(&first);
        // Bounded: at most the queue's capacity of frames, each within MAX_FRAME_LEN.
        while let Ok(more) = rx.try_recv() {
            buf.extend_from_slice(&more);
        }
        if wr.write_all(&buf).await.is_err() {
            return;
        }
    }
}

/// Reads and dispatches until the connection ends, then fails every waiter.
async fn read_loop(
    mut rd: tokio::net::tcp::OwnedReadHalf,
    waiters: Shared,
    out: mpsc::Sender<Bytes>,
    mut on_request: RequestHandler,
) {
    let mut buf = BytesMut::with_capacity(READ_CHUNK);
    let failure = 'read: loop {
        make_room(&mut buf);
        match rd.read_buf(&mut buf).await {
            Ok(0) => break 'read ClientError::Closed,
            Ok(_) => {}
            Err(e) => break 'read ClientError::Io(e),
        }
        loop {
            let incoming = match next_incoming(&mut buf) {
                Ok(Some(i)) => i,
                Ok(None) => break,
                Err(e) => break 'read e,
            };
            match incoming {
                Incoming::Response(cmd) => {
                    let waiter = lock(&waiters).by_opaque.remove(&cmd.opaque);
                    if let Some(w) = waiter {
                        let _ = w.send(Ok(cmd));
                    }
                }
                Incoming::RefusedResponse(opaque, e) => {
                    let waiter = lock(&waiters).by_opaque.remove(&opaque);
                    if let Some(w) = waiter {
                        let _ = w.send(Err(ClientError::Decode(e)));
                    }
                }
                Incoming::Request(Some(cmd)) => {
                    let oneway = cmd.is_oneway();
                    if let Some(answer) = on_request(cmd) {
                        if !oneway {
                            // Never wait here (the answers to our own calls come through this
                            // task); with the queue full the answer is dropped.
                            if let Ok(frame) = encode(&answer) {
                                let _ = out.try_send(frame);
                            }
                        }
                    }
                }
                Incoming::Request(None) => {}
            }
        }
    };
    let mut w = lock(&waiters);
    w.closed = true;
    for (_, waiter) in w.by_opaque.drain() {
        let _ = waiter.send(Err(match &failure {
            ClientError::Decode(e) => ClientError::Decode(e.clone()),
            _ => ClientError::Closed,
        }));
    }
}

#[cfg(test)]
mod tests;
