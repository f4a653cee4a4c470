//! Per-client state of the gRPC face, keyed by the `x-mq-client-id` header as the proxy keys it.
//!
//! A session holds what the client said in its Telemetry `Settings` (client type, producer
//! topics or consumer group and subscriptions, the merged settings the server answered with),
//! and the sending half of its Telemetry stream, through which the server pushes commands
//! (orphaned-transaction recovery). The unary RPCs look the session up by client id.
//!
//! The Telemetry channel is bounded and written with `try_send` only: a client that does not
//! read its stream (Python's push consumer stops reading after the first Settings,
//! `docs/rocketmq5-grpc-pop-transactions.md` section 6) loses the command, never blocks the broker.

use crate::sync::{Arc, Mutex, MutexGuard};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use crate::sync::lock;
use tokio::sync::mpsc;

use super::pb::{settings::PubSub, ClientType, Settings, TelemetryCommand};

/// The header every request of a 5.x client carries.
pub(crate) const CLIENT_ID_HEADER: &str = "x-mq-client-id";

/// The header naming the SDK's language (`JAVA`, `GOLANG`, `PYTHON`, …: the proto's
/// `Language` names).
pub(crate) const LANGUAGE_HEADER: &str = "x-mq-language";

/// The header carrying the SDK's version (`5.0.7`, …).
pub(crate) const CLIENT_VERSION_HEADER: &str = "x-mq-client-version";

/// Commands waiting to be written to one client's Telemetry stream; more are dropped.
pub(crate) const TELEMETRY_CHANNEL: usize = 64;

/// What a Telemetry response stream carries.
pub(crate) type TelemetryItem = Result<TelemetryCommand, tonic::Status>;

/// The client id of a request, if it sent a non-empty one.
pub(crate) fn client_id(metadata: &tonic::metadata::MetadataMap) -> Option<String> {
    metadata
        .get(CLIENT_ID_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .map(str::to_owned)
}

/// The value of header `name`, if it is text.
pub(crate) fn header(metadata: &tonic::metadata::MetadataMap, name: &str) -> Option<String> {
    metadata.get(name).and_then(|v| v.to_str().ok()).map(|v| v.trim().to_owned())
}

/// All sessions of one broker.
#[derive(Debug, Default)]
pub(crate) struct Sessions {
    inner: Mutex<Table>,
}

/// The session table and, per connection (its peer address), how many sessions it created.
#[derive(Debug, Default)]
struct Table {
    map: HashMap<String, Arc<Session>>,
    per_connection: HashMap<SocketAddr, usize>,
}

impl Table {
    fn forget(&mut self, session: &Session) {
        if let Some(peer) = session.origin {
            if let Some(n) = self.per_connection.get_mut(&peer) {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    self.per_connection.remove(&peer);
                }
            }
        }
    }
}

/// Why a new client got no session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SessionRefused {
    /// The table holds `cap` sessions.
    Full,
    /// The client's connection created its share of the table already.
    ConnectionShare,
}

/// The share of the session table one connection may create: an eighth, as each client's share
/// of the renewal table (at least one). Clients of the 5.x SDKs open their own connections,
/// one client id each; a gRPC proxy in front multiplexing many clients still gets 1,250 of the
/// default 10,000.
pub(crate) fn connection_share(cap: usize) -> usize {
    (cap / 8).max(1)
}

impl Sessions {
    fn lock(&self) -> MutexGuard<'_, Table> {
        lock(&self.inner)
    }

    /// The session of `client_id`, created on first sight unless `cap` sessions exist already
    /// or the request's connection (`peer`) created [`connection_share`] of them: a flood of
    /// made-up client ids cannot grow the table without bound, nor can one connection take the
    /// whole table (review-e77444b M7); idle sessions expire after `client-expiry-secs`.
    pub(crate) fn get_or_create_within(
        &self,
        client_id: &str,
        cap: usize,
        peer: Option<SocketAddr>,
    ) -> Result<Arc<Session>, SessionRefused> {
        let mut t = self.lock();
        if let Some(session) = t.map.get(client_id) {
            session.touch();
            return Ok(Arc::clone(session));
        }
        if t.map.len() >= cap {
            return Err(SessionRefused::Full);
        }
        if let Some(p) = peer {
            let n = t.per_connection.entry(p).or_insert(0);
            if *n >= connection_share(cap) {
                return Err(SessionRefused::ConnectionShare);
            }
            *n += 1;
        }
        let session = Arc::new(Session::new(client_id.to_owned(), peer));
        t.map.insert(client_id.to_owned(), Arc::clone(&session));
        Ok(session)
    }

    /// The session of `client_id`, if the client is known.
    // For the consumer RPCs (branch grpcc), which read the session of a receive or an ack.
    #[allow(dead_code)]
    pub(crate) fn get(&self, client_id: &str) -> Option<Arc<Session>> {
        self.lock().map.get(client_id).cloned()
    }

    /// Forgets `client_id` (NotifyClientTermination); its Telemetry stream ends.
    pub(crate) fn remove(&self, client_id: &str) -> Option<Arc<Session>> {
        let mut t = self.lock();
        let gone = t.map.remove(client_id)?;
        t.forget(&gone);
        Some(gone)
    }

    /// Every session (a snapshot).
    pub(crate) fn all(&self) -> Vec<Arc<Session>> {
        self.lock().map.values().cloned().collect()
    }

    /// Producers publishing to `topic` (their Settings list it) that have a Telemetry stream
    /// open, freshest first.
    pub(crate) fn producers_of(&self, topic: &str) -> Vec<Arc<Session>> {
        let mut v: Vec<Arc<Session>> = self
            .lock()
            .map
            .values()
            .filter(|s| s.publishes(topic) && s.has_telemetry())
            .cloned()
            .collect();
        v.sort_by_key(|s| std::cmp::Reverse(s.state().last_seen));
        v
    }

    /// Drops the sessions not heard from (no request, nothing on their Telemetry stream) for
    /// `ttl`, and ends their Telemetry streams. Returns their client ids.
    ///
    /// An open Telemetry stream alone does not keep a session (review-e77444b M7): one
    /// connection holding many streams under made-up client ids would otherwise fill the
    /// session table for as long as it stays up. Live clients are heard from far more often
    /// than `client-expiry-secs` (the SDKs send `Heartbeat` every 10 s, and every call touches
    /// the session); one expired by mistake reopens its stream and gets a new session.
    pub(crate) fn expire(&self, ttl: Duration) -> Vec<String> {
        let mut gone = Vec::new();
        let mut t = self.lock();
        let mut expired = Vec::new();
        t.map.retain(|id, s| {
            let mut st = s.state();
            let live = st.last_seen.elapsed() < ttl;
            if !live {
                // The response stream ends with its sender.
                st.telemetry = None;
                gone.push(id.clone());
                expired.push(Arc::clone(s));
            }
            live
        });
        for s in &expired {
            t.forget(s);
        }
        gone
    }

    /// Ends every Telemetry stream (shutdown): the response streams finish, so the server's
    /// graceful stop does not wait on them.
    pub(crate) fn close_all(&self) {
        for s in self.all() {
            s.state().telemetry = None;
        }
    }
}

/// One client's state.
#[derive(Debug)]
pub(crate) struct Session {
    client_id: String,
    /// The connection (peer address) whose request created the session.
    origin: Option<SocketAddr>,
    state: Mutex<SessionState>,
}

/// The mutable part of a [`Session`].
#[derive(Debug)]
pub(crate) struct SessionState {
    /// The settings the server answered with (the client's, merged with the server's values).
    pub(crate) settings: Option<Settings>,
    /// The client type from Settings or the last Heartbeat.
    pub(crate) client_type: ClientType,
    /// Identifies the Telemetry stream open now, and the sender of its commands.
    telemetry: Option<(u64, mpsc::Sender<TelemetryItem>)>,
    next_stream: u64,
    /// When the client was last heard from.
    pub(crate) last_seen: Instant,
    /// The SDK's language and version headers, as its first request sent them.
    pub(crate) sdk: Option<(String, String)>,
}

impl Session {
    fn new(client_id: String, origin: Option<SocketAddr>) -> Self {
        Session {
            client_id,
            origin,
            state: Mutex::new(SessionState {
                settings: None,
                client_type: ClientType::Unspecified,
                telemetry: None,
                next_stream: 0,
                last_seen: Instant::now(),
                sdk: None,
            }),
        }
    }

    /// The client id.
    pub(crate) fn client_id(&self) -> &str {
        &self.client_id
    }

    /// The address of the connection that created the session.
    pub(crate) fn origin(&self) -> Option<SocketAddr> {
        self.origin
    }

    /// The session's state, locked.
    pub(crate) fn state(&self) -> MutexGuard<'_, SessionState> {
        lock(&self.state)
    }

    /// Notes that the client was heard from.
    pub(crate) fn touch(&self) {
        self.state().last_seen = Instant::now();
    }

    /// The merged settings, once the client sent its own.
    // For the consumer RPCs (branch grpcc), which read the session of a receive or an ack.
    #[allow(dead_code)]
    pub(crate) fn settings(&self) -> Option<Settings> {
        self.state().settings.clone()
    }

    /// The consumer group the client's Settings name, if it is a consumer.
    // For the consumer RPCs (branch grpcc), which read the session of a receive or an ack.
    #[allow(dead_code)]
    pub(crate) fn group(&self) -> Option<String> {
        match self.state().settings.as_ref()?.pub_sub.as_ref()? {
            PubSub::Subscription(sub) => sub.group.as_ref().map(|g| g.name.clone()),
            PubSub::Publishing(_) => None,
        }
    }

    /// The topics the client's Settings publish to (empty unless it is a producer).
    pub(crate) fn topics(&self) -> Vec<String> {
        match self.state().settings.as_ref().and_then(|s| s.pub_sub.as_ref()) {
            Some(PubSub::Publishing(p)) => p.topics.iter().map(|t| t.name.clone()).collect(),
            _ => Vec::new(),
        }
    }

    fn publishes(&self, topic: &str) -> bool {
        match self.state().settings.as_ref().and_then(|s| s.pub_sub.as_ref()) {
            Some(PubSub::Publishing(p)) => p.topics.iter().any(|t| t.name == topic),
            _ => false,
        }
    }

    /// Whether a Telemetry stream is open.
    pub(crate) fn has_telemetry(&self) -> bool {
        self.state().telemetry.is_some()
    }

    /// Makes `tx` the client's Telemetry stream (a reopened stream replaces the old one, which
    /// then ends). Returns the stream's id for [`detach_telemetry`](Self::detach_telemetry).
    pub(crate) fn attach_telemetry(&self, tx: mpsc::Sender<TelemetryItem>) -> u64 {
        let mut st = self.state();
        st.next_stream += 1;
        let id = st.next_stream;
        st.telemetry = Some((id, tx));
        st.last_seen = Instant::now();
        id
    }

    /// The Telemetry stream `id` ended: forget it unless another replaced it since.
    pub(crate) fn detach_telemetry(&self, id: u64) {
        let mut st = self.state();
        if st.telemetry.as_ref().is_some_and(|(open, _)| *open == id) {
            st.telemetry = None;
        }
        st.last_seen = Instant::now();
    }

    /// Ends Telemetry stream `id` (if it is still the open one) with `error`, e.g. Settings the
    /// ACL refused: the error is the stream's last item.
    pub(crate) fn fail_telemetry(&self, id: u64, error: tonic::Status) {
        let mut st = self.state();
        if st.telemetry.as_ref().is_some_and(|(open, _)| *open == id) {
            if let Some((_, tx)) = st.telemetry.take() {
                let _ = tx.try_send(Err(error));
            }
        }
    }

    /// Writes `cmd` to the client's Telemetry stream without waiting. Returns whether it was
    /// queued (false: no stream open, or the client is not reading it).
    pub(crate) fn push(&self, cmd: TelemetryCommand) -> bool {
        let tx = match &self.state().telemetry {
            Some((_, tx)) => tx.clone(),
            None => return false,
        };
        tx.try_send(Ok(cmd)).is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn given_a_full_session_table_when_a_new_client_comes_should_refuse_it_but_keep_known_ones() {
        let sessions = Sessions::default();
        assert!(sessions.get_or_create_within("a", 2, None).is_ok());
        assert!(sessions.get_or_create_within("b", 2, None).is_ok());
        assert!(sessions.get_or_create_within("c", 2, None).is_err(), "a third client is refused");
        assert!(
            sessions.get_or_create_within("a", 2, None).is_ok(),
            "known clients are still served"
        );
        sessions.remove("b");
        assert!(sessions.get_or_create_within("c", 2, None).is_ok(), "room again once one left");
    }

    #[test]
    fn given_a_reopened_telemetry_stream_when_the_old_one_ends_should_keep_the_new_one() {
        let sessions = Sessions::default();
        let s = sessions.get_or_create_within("p", 1, None).expect("room for one");
        let (tx1, _rx1) = mpsc::channel(1);
        let (tx2, mut rx2) = mpsc::channel(1);
        let first = s.attach_telemetry(tx1);
        let _second = s.attach_telemetry(tx2);
        s.detach_telemetry(first);
        assert!(s.has_telemetry(), "the stream opened later stays");
        assert!(s.push(TelemetryCommand::default()), "and commands go to it");
        assert!(rx2.try_recv().is_ok());
        assert!(s.push(TelemetryCommand::default()), "one more fits the channel of 1");
        assert!(!s.push(TelemetryCommand::default()), "a full channel drops, never waits");
    }

    #[test]
    fn given_a_silent_session_with_an_open_telemetry_stream_when_expiring_should_drop_it_and_end_the_stream(
    ) {
        // review-e77444b M7: an open stream kept a session for ever, so one connection holding
        // streams under made-up client ids locked every new client out.
        let sessions = Sessions::default();
        let s = sessions.get_or_create_within("silent", 1, None).expect("room for one");
        let (tx, mut rx) = mpsc::channel(1);
        s.attach_telemetry(tx);
        let ttl = Duration::from_secs(120);
        let long_ago = Instant::now().checked_sub(ttl * 2).expect("an earlier instant");
        s.state().last_seen = long_ago;
        assert_eq!(sessions.expire(ttl), vec!["silent".to_owned()]);
        assert!(!s.has_telemetry(), "its stream is ended");
        let ended = matches!(rx.try_recv(), Err(mpsc::error::TryRecvError::Disconnected));
        assert!(ended, "its sender is gone");
        assert!(sessions.get_or_create_within("new", 1, None).is_ok(), "room for a new client");
    }

    #[test]
    fn given_one_connection_with_many_client_ids_when_it_passes_its_share_should_refuse_it_but_serve_others(
    ) {
        // review-e77444b M7: one connection inventing client ids took the whole table.
        let sessions = Sessions::default();
        let one: SocketAddr = "127.0.0.1:40001".parse().expect("an address");
        let other: SocketAddr = "127.0.0.1:40002".parse().expect("an address");
        let cap = 16;
        assert_eq!(connection_share(cap), 2);
        assert!(sessions.get_or_create_within("a", cap, Some(one)).is_ok());
        assert!(sessions.get_or_create_within("b", cap, Some(one)).is_ok());
        assert_eq!(
            sessions.get_or_create_within("c", cap, Some(one)).err(),
            Some(SessionRefused::ConnectionShare)
        );
        assert!(sessions.get_or_create_within("a", cap, Some(one)).is_ok(), "its own still served");
        assert!(sessions.get_or_create_within("c", cap, Some(other)).is_ok(), "others get room");
        sessions.remove("a");
        assert!(sessions.get_or_create_within("d", cap, Some(one)).is_ok(), "room once one left");
        let ttl = Duration::from_secs(120);
        for s in sessions.all() {
            s.state().last_seen = Instant::now().checked_sub(ttl * 2).expect("an earlier instant");
        }
        assert_eq!(sessions.expire(ttl).len(), 3);
        assert!(sessions.lock().per_connection.is_empty(), "expired sessions free their share");
    }
}
