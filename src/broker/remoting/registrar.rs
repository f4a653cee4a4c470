//! Registering with external RocketMQ name servers (`--namesrv-addr`): one long-lived
//! connection per name server, `REGISTER_BROKER` with every topic's config at start, every
//! `register-interval-secs` and whenever topics change; `UNREGISTER_BROKER` at clean
//! shutdown; reconnect with backoff when a name server restarts or a connection drops. Each
//! name server has its own task, so one being down never blocks the others or the message path.
//!
//! With `inner-client-authentication-credentials` every request it sends is signed as RocketMQ's
//! `AclClientRPCHook` signs (`AccessKey` + `Signature`), so an ACL-protected name server
//! accepts it; a refusal (`NO_PERMISSION`: wrong secret, or an account without `admin`) is
//! logged with the name server's remark and retried every interval.

use crate::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use super::RemotingState;
use crate::broker::core::Core;
use crate::remoting::body::{JsonBody, RegisterBrokerBody};
use crate::remoting::client::{ClientError, Connection};
use crate::remoting::code::{request_code, response_code};
use crate::remoting::{ExtFields, RemotingCommand};

const RPC_TIMEOUT: Duration = Duration::from_secs(3);
const MAX_BACKOFF: Duration = Duration::from_secs(10);

/// The `REGISTER_BROKER` request for the broker's current topics.
pub(crate) fn register_request(core: &Core, face: &RemotingState) -> RemotingCommand {
    let wrapper = core.topics.serialize_wrapper();
    let body = RegisterBrokerBody {
        topic_config_serialize_wrapper: wrapper,
        filter_server_list: Vec::new(),
    };
    let body = body.to_json_bytes().unwrap_or_default();
    let crc = (crc32fast::hash(&body) & 0x7FFF_FFFF) as i64;
    let mut ext = broker_ext(core);
    ext.insert("haServerAddr", &core.store_host.to_string());
    ext.insert_bool("compressed", false);
    ext.insert_i64("bodyCrc32", crc);
    ext.insert_bool("enableActingMaster", false);
    ext.insert_i64("heartbeatTimeoutMillis", 120_000);
    RemotingCommand::request(request_code::REGISTER_BROKER, face.next_opaque())
        .with_ext_fields(ext)
        .with_body(body)
}

/// `req` signed with the broker's credentials, if it has any.
fn signed(face: &RemotingState, mut req: RemotingCommand) -> RemotingCommand {
    if let Some(c) = &face.config.inner_client_authentication_credentials {
        c.sign(&mut req);
    }
    req
}

fn broker_ext(core: &Core) -> ExtFields {
    let mut ext = ExtFields::new();
    ext.insert("brokerName", &core.config.broker_name);
    ext.insert("brokerAddr", &core.store_host.to_string());
    ext.insert("clusterName", &core.config.cluster_name);
    ext.insert_i64("brokerId", core.broker_id() as i64);
    ext
}

/// Why an idle registered connection stopped waiting.
enum Idle {
    /// The interval passed or topics changed: register again.
    Register,
    /// The connection closed or failed.
    Lost(String),
    /// The broker is shutting down.
    Shutdown,
}

/// Waits for the next registration while watching the connection: a name server that
/// restarts (or drops us) closes it, and with it our registration, so that is noticed at once
/// rather than at the next interval. Nothing is expected between our requests (a late answer
/// to one that timed out, at most): `Connection::idle` drops whole frames and keeps a partial
/// one.
async fn idle(
    link: &mut Connection,
    until: tokio::time::Instant,
    changed: &mut watch::Receiver<u64>,
    shutdown: &mut watch::Receiver<bool>,
) -> Idle {
    tokio::select! {
        _ = tokio::time::sleep_until(until) => Idle::Register,
        _ = changed.changed() => Idle::Register,
        _ = shutdown.changed() => Idle::Shutdown,
        // Cancel-safe: bytes read are kept in the connection's buffer.
        e = link.idle() => Idle::Lost(lost(e)),
    }
}

/// The log text for a lost connection, as the registrar has always worded the close.
fn lost(e: ClientError) -> String {
    match e {
        ClientError::Closed => "connection closed by the name server".to_string(),
        e => e.to_string(),
    }
}

/// Keeps this broker registered with the name server at `addr` until shutdown.
pub(crate) async fn run(
    core: Arc<Core>,
    face: Arc<RemotingState>,
    addr: String,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut changed = core.topics_changed.subscribe();
    let interval = Duration::from_secs(face.config.register_interval_secs.clamp(1, 60));
    // Retries stay within one interval, so a name server that comes back has the broker again
    // within an interval.
    let max_backoff = MAX_BACKOFF.min(interval);
    let mut backoff = Duration::from_millis(200);
    let mut was_up = true;
    loop {
        let connect = Connection::connect(addr.as_str(), RPC_TIMEOUT);
        let connected = tokio::select! {
            r = connect => r,
            _ = shutdown.changed() => return,
        };
        let mut link = match connected {
            Ok(link) => link.with_call_timeout(RPC_TIMEOUT),
            Err(e) => {
                if was_up {
                    tracing::warn!(namesrv = %addr, error = %e, "name server unreachable; retrying with backoff");
                    was_up = false;
                }
                tokio::select! {
                    _ = tokio::time::sleep(backoff) => {}
                    _ = shutdown.changed() => return,
                }
                backoff = (backoff * 2).min(max_backoff);
                continue;
            }
        };
        // Registered (again): everything below runs on this connection until it fails.
        let reason = loop {
            match link.call(signed(&face, register_request(&core, &face))).await {
                Ok(resp) if resp.code == response_code::SUCCESS => {
                    if !was_up {
                        tracing::info!(namesrv = %addr, "registered with the name server");
                    }
                    was_up = true;
                    backoff = Duration::from_millis(200);
                }
                Ok(resp) => {
                    tracing::warn!(namesrv = %addr, code = resp.code, remark = ?resp.remark, "registration refused");
                }
                Err(e) => break lost(e),
            }
            match idle(
                &mut link,
                tokio::time::Instant::now() + interval,
                &mut changed,
                &mut shutdown,
            )
            .await
            {
                Idle::Register => {}
                Idle::Lost(e) => break e,
                Idle::Shutdown => {
                    let req = signed(
                        &face,
                        RemotingCommand::request(
                            request_code::UNREGISTER_BROKER,
                            face.next_opaque(),
                        )
                        .with_ext_fields(broker_ext(&core)),
                    );
                    match link.call(req).await {
                        Ok(_) => {
                            tracing::info!(namesrv = %addr, "unregistered from the name server")
                        }
                        Err(e) => {
                            tracing::warn!(namesrv = %addr, error = %lost(e), "could not unregister")
                        }
                    }
                    return;
                }
            }
        };
        tracing::warn!(namesrv = %addr, error = %reason, "lost the name server; reconnecting");
        was_up = false;
        tokio::select! {
            _ = tokio::time::sleep(backoff) => {}
            _ = shutdown.changed() => return,
        }
    }
}
