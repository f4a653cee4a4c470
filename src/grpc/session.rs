//! Per-client state of the gRPC face, keyed by the `x-mq-client-id` header as the proxy keys it.
//!
//! A session holds what the client said in its Telemetry `Settings` (client type, producer
//! topics or consumer group and subscriptions, the merged settings the server answered with),
//! and the sending half of its Telemetry stream, through which the server pushes commands
//! (orphaned-transaction recovery). The unary RPCs look the session up by client id.
//!
//! The Telemetry channel is bounded and written with `try_send` only: a client that does not
//! read its stream (Python's push consumer stops reading after the first Settings, facts doc
//! section 6) loses the command, never blocks the broker.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::sync::mpsc;

use super::pb::{settings::PubSub, ClientType, Settings, TelemetryCommand};

/// The header every request of a 5.x client carries.
pub(crate) const CLIENT_ID_HEADER: &str = "x-mq-client-id";

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

/// All sessions of one broker.
#[derive(Debug, Default)]
pub(crate) struct Sessions {
    map: Mutex<HashMap<String, Arc<Session>>>,
}

impl Sessions {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, Arc<Session>>> {
        self.map.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The session of `client_id`, created on first sight.
    pub(crate) fn get_or_create(&self, client_id: &str) -> Arc<Session> {
        let mut map = self.lock();
        let session = map
            .entry(client_id.to_owned())
            .or_insert_with(|| Arc::new(Session::new(client_id.to_owned())));
        session.touch();
        Arc::clone(session)
    }

    /// The session of `client_id`, if the client is known.
    // For the consumer RPCs (branch grpcc), which read the session of a receive or an ack.
    #[allow(dead_code)]
    pub(crate) fn get(&self, client_id: &str) -> Option<Arc<Session>> {
        self.lock().get(client_id).cloned()
    }

    /// Forgets `client_id` (NotifyClientTermination); its Telemetry stream ends.
    pub(crate) fn remove(&self, client_id: &str) -> Option<Arc<Session>> {
        self.lock().remove(client_id)
    }

    /// Every session (a snapshot).
    pub(crate) fn all(&self) -> Vec<Arc<Session>> {
        self.lock().values().cloned().collect()
    }

    /// Producers publishing to `topic` (their Settings list it) that have a Telemetry stream
    /// open, freshest first.
    pub(crate) fn producers_of(&self, topic: &str) -> Vec<Arc<Session>> {
        let mut v: Vec<Arc<Session>> = self
            .lock()
            .values()
            .filter(|s| s.publishes(topic) && s.has_telemetry())
            .cloned()
            .collect();
        v.sort_by_key(|s| std::cmp::Reverse(s.state().last_seen));
        v
    }

    /// Drops the sessions not heard from (no request, no Telemetry stream open) for `ttl`.
    /// Returns their client ids.
    pub(crate) fn expire(&self, ttl: Duration) -> Vec<String> {
        let mut gone = Vec::new();
        self.lock().retain(|id, s| {
            let st = s.state();
            let live = st.telemetry.is_some() || st.last_seen.elapsed() < ttl;
            if !live {
                gone.push(id.clone());
            }
            live
        });
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
}

impl Session {
    fn new(client_id: String) -> Self {
        Session {
            client_id,
            state: Mutex::new(SessionState {
                settings: None,
                client_type: ClientType::Unspecified,
                telemetry: None,
                next_stream: 0,
                last_seen: Instant::now(),
            }),
        }
    }

    /// The client id.
    pub(crate) fn client_id(&self) -> &str {
        &self.client_id
    }

    /// The session's state, locked.
    pub(crate) fn state(&self) -> MutexGuard<'_, SessionState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
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
