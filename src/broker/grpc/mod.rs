//! The RocketMQ 5 gRPC face: `apache.rocketmq.v2.MessagingService` served beside the remoting
//! port, over the broker's shared state and store, so the 5.x SDKs (Python, Node.js, Rust,
//! Java, Go, …) talk to baiji directly, without Apache's proxy in between.
//!
//! Plaintext HTTP/2 (h2c) on `grpc-listen` (default `127.0.0.1:8081`, the proxy's port). The
//! protos under `proto/` are compiled by `build.rs` ([`pb`]). Every error travels as RocketMQ's
//! `Code` inside the response's `Status` ([`status`]); the gRPC status itself is OK except for
//! the RPCs baiji does not serve, which answer `UNIMPLEMENTED` as the proxy does.
//!
//! - [`service`]: the `MessagingService` impl, routes ([`route`]), heartbeats, Telemetry;
//! - [`acl`]: `acl-file` on this port (the SDKs' signatures, each RPC's needs);
//! - [`session`]: per-client state keyed by `x-mq-client-id` (Settings, Telemetry sender);
//! - [`settings`]: the Settings echo every client waits for;
//! - [`producer`]: SendMessage (through the remoting send path) and EndTransaction;
//! - [`consumer`]: the receive side;
//! - [`convert`]: stored messages ⇄ v2 `Message`;
//! - [`relay`]: the admin tools' consumer relays (thread stacks, consume directly);
//! - [`directory`]: the sessions as the core's admin views list clients;
//! - [`conn`]: the listener's connections (`max-connections`, `TCP_NODELAY`).

pub(crate) mod acl;
#[cfg(all(test, feature = "bench"))]
mod acl_tests;
pub(crate) mod conn;
pub(crate) mod consumer;
pub(crate) mod convert;
pub(crate) mod directory;
pub(crate) mod producer;
pub(crate) mod receipt;
pub(crate) mod relay;
pub(crate) mod route;
pub(crate) mod service;
pub(crate) mod session;
#[cfg(all(test, feature = "bench"))]
mod session_tests;
pub(crate) mod settings;
pub(crate) mod status;

use std::net::SocketAddr;
use std::time::Duration;

use tokio::net::TcpListener;

use crate::broker::security::tls::GrpcTls;
use tokio::sync::watch;

use crate::broker::core::Core;
use crate::broker::security::acl::Acl;
use crate::broker::security::sign::Credentials;
use crate::sync::{Arc, AtomicU64, Ordering};

/// The generated protobuf messages and the server trait of `apache.rocketmq.v2`.
#[allow(
    missing_docs,
    missing_debug_implementations,
    unreachable_pub,
    clippy::all,
    clippy::pedantic,
    clippy::undocumented_unsafe_blocks
)]
pub(crate) mod pb {
    tonic::include_proto!("apache.rocketmq.v2");
}

/// The gRPC face's own state: its clients' sessions, the deliveries it renews for them, what
/// its listener refused, and the broker's ACL.
#[derive(Debug, Default)]
pub(crate) struct GrpcState {
    /// The gRPC face's clients (Settings, Telemetry streams), keyed by client id; the
    /// transaction checker reaches gRPC producers through it.
    pub(crate) sessions: session::Sessions,
    /// `auto_renew` deliveries of gRPC consumers, renewed per client id.
    pub(crate) renewals: receipt::Renewals,
    /// Admin tools' calls relayed to its consumers, waiting for their answers.
    pub(crate) relays: relay::Relays,
    /// Connections closed on accept because `max-connections` were open.
    pub(crate) connections_refused: AtomicU64,
    /// Connections closed because their TLS handshake failed or did not finish in time.
    pub(crate) tls_handshakes_failed: AtomicU64,
    /// The broker's ACL (`acl-file`), the one object the remoting face checks with too (its
    /// reloads and refusal count are shared); `None`: every call is served.
    pub(crate) acl: Option<Arc<Acl>>,
    /// The broker's own credentials (`inner-client-authentication-credentials`), which sign
    /// the route's probes of peer brokers (`GET_BROKER_CONFIG`, an admin request), as they sign
    /// the registrations with name servers; `None`: probes go unsigned.
    pub(crate) peer_credentials: Option<Credentials>,
}

impl GrpcState {
    /// Connections refused so far.
    pub(crate) fn connections_refused(&self) -> u64 {
        // Relaxed: a statistic, read on its own.
        self.connections_refused.load(Ordering::Relaxed)
    }
}

/// Room above the broker's `max-message-size` for a request's or response's other fields.
const MESSAGE_SIZE_HEADROOM: usize = 1024 * 1024;

/// How often an idle HTTP/2 connection is pinged.
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(60);

/// How long a ping may go unanswered before the connection is closed.
const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(20);

/// Most HTTP/2 streams (calls) one connection may have open at once; the server announces it
/// in its SETTINGS (`SETTINGS_MAX_CONCURRENT_STREAMS`), and clients queue calls beyond it.
pub(crate) const MAX_STREAMS_PER_CONNECTION: u32 = 200;

/// How long a stopping server waits for calls in flight (long polls) before it drops them.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// Serves `MessagingService` on `listener` until `shutdown`, with TLS as `tls` says (none:
/// plaintext only); `endpoint` is the address routes advertise for it.
pub(crate) async fn serve(
    core: Arc<Core>,
    grpc: Arc<GrpcState>,
    listener: TcpListener,
    tls: Option<(GrpcTls, Duration)>,
    endpoint: SocketAddr,
    mut shutdown: watch::Receiver<bool>,
) {
    let limit = core.config.max_message_size.saturating_add(MESSAGE_SIZE_HEADROOM);
    let svc = service::Messaging {
        core: Arc::clone(&core),
        grpc: Arc::clone(&grpc),
        endpoint,
        peers: Arc::default(),
    };
    let server = pb::messaging_service_server::MessagingServiceServer::new(svc)
        .max_decoding_message_size(limit)
        .max_encoding_message_size(limit);
    let accepted = conn::Connections::new(&core, Arc::clone(&grpc), listener);
    let incoming = match tls {
        Some((tls, timeout)) => conn::admit(accepted, Some(tls), timeout),
        None => conn::admit(accepted, None, Duration::ZERO),
    };
    let (stopping_tx, mut stopping) = watch::channel(false);
    let signal = {
        let grpc = Arc::clone(&grpc);
        async move {
            wait_for(&mut shutdown).await;
            // Telemetry streams last as long as their clients: end them, or the graceful stop
            // would wait for every client to go away.
            grpc.sessions.close_all();
            let _ = stopping_tx.send(true);
        }
    };
    let serving = tonic::transport::Server::builder()
        // Bounded per connection (review-e77444b M7): tonic's default lifts hyper's 200 to
        // none, so one connection could hold any number of parked receives and Telemetry
        // streams. 200 is hyper's own default and more than any SDK opens (one Telemetry
        // stream and a few long polls per client).
        .max_concurrent_streams(Some(MAX_STREAMS_PER_CONNECTION))
        // Pings find clients that vanished without closing (their Telemetry streams and
        // sessions then go); every gRPC client answers them.
        .http2_keepalive_interval(Some(KEEPALIVE_INTERVAL))
        .http2_keepalive_timeout(Some(KEEPALIVE_TIMEOUT))
        .add_service(server)
        .serve_with_incoming_shutdown(incoming, signal);
    let expiry = expire_sessions(&core, &grpc);
    tokio::select! {
        result = serving => {
            if let Err(e) = result {
                tracing::error!(error = %e, "the gRPC server stopped");
            }
        }
        _ = async {
            wait_for(&mut stopping).await;
            tokio::time::sleep(SHUTDOWN_GRACE).await;
        } => tracing::debug!("gRPC calls still in flight at shutdown were dropped"),
        _ = expiry => {}
    }
}

async fn wait_for(rx: &mut watch::Receiver<bool>) {
    while !*rx.borrow_and_update() {
        if rx.changed().await.is_err() {
            return;
        }
    }
}

/// Forgets clients not heard from for `client-expiry-secs` that have no Telemetry stream open,
/// and tells the core which groups the remaining ones consume as.
async fn expire_sessions(core: &Core, grpc: &GrpcState) {
    let ttl = Duration::from_secs(core.config.client_expiry_secs.max(1));
    loop {
        tokio::time::sleep(Duration::from_secs(10)).await;
        for id in grpc.sessions.expire(ttl) {
            tracing::debug!(client = %id, "gRPC client expired");
        }
        // A live consumer's group is in use even while it does not receive (the registry's
        // rule for heartbeating groups): it is not released as idle.
        let groups = grpc.sessions.all().iter().filter_map(|s| s.group()).collect();
        core.groups.set_in_use(groups);
    }
}
