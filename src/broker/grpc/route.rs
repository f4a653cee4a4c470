//! `QueryRoute` (`docs/rocketmq5-grpc-pop-transactions.md` 1.4): the topic's queues on every baiji broker of the cluster, each
//! at its own gRPC endpoint, accepting every message type.
//!
//! # Several brokers
//! A broker lists its own queues at its own gRPC endpoint (advertised host, gRPC port), then
//! those of every other broker the name server routes the topic to *that serves gRPC*: the
//! route comes from the embedded name server's table, or from the external name servers this
//! broker registers with (`GET_ROUTEINFO_BY_TOPIC`, first that answers); a peer's gRPC port
//! comes from its own `GET_BROKER_CONFIG` (`grpcServerPort`, the proxy's name for it), asked
//! once and kept for [`PEER_TTL`]. A client pointed at any baiji broker therefore sends to and
//! receives from all of them, each directly (no proxy hop). A persistent RocketMQ broker in
//! the same cluster has no gRPC port of its own (its gRPC face is a separate proxy), so its
//! queues are left out of gRPC routes: gRPC clients use the baiji brokers, remoting clients
//! all of them.

use crate::sync::Mutex;
use std::collections::HashMap;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use super::pb::{
    Address, AddressScheme, Broker, Code, Endpoints, MessageQueue, MessageType, Permission,
    QueryRouteRequest, QueryRouteResponse, Resource,
};
use super::service::Messaging;
use super::status::{ok, send_status, status};
use crate::broker::core::routes::MAX_ROUTE_QUEUES;
use crate::broker::core::send::resolve_topic;
use crate::broker::core::topics::{self, perm};
use crate::broker::core::Core;
use crate::broker::security::peer::request_once_tls;
use crate::broker::security::sign::Credentials;
use crate::remoting::body::{JsonBody, TopicConfig, TopicRouteData};
use crate::remoting::client::{request_once, ClientError};
use crate::remoting::code::{request_code, response_code};
use crate::remoting::header::{GetRouteInfoRequestHeader, ToExtFields};
use crate::remoting::RemotingCommand;
use crate::sync::lock;

/// How long a peer's gRPC port (or its having none) is trusted before it is asked again.
pub(crate) const PEER_TTL: Duration = Duration::from_secs(30);
/// How long a peer that did not answer is left alone before it is asked again: a probe lost
/// to a busy moment must not hide the peer from every route for [`PEER_TTL`] (a client caches
/// the route it got for 30 s more).
const PEER_RETRY: Duration = Duration::from_secs(2);
/// Patience for one question to a name server or a peer; past it the route goes without.
const ASK_TIMEOUT: Duration = Duration::from_secs(3);
/// Peers remembered at most (a name server lists far fewer brokers; a bound all the same).
const MAX_PEERS: usize = 1024;

/// The message types every queue accepts: baiji has no typed topics, so all four (Python
/// checks the type before every send, whatever `validate_message_type` says).
pub(crate) const ACCEPTED: [MessageType; 4] =
    [MessageType::Normal, MessageType::Fifo, MessageType::Delay, MessageType::Transaction];

/// This broker's gRPC endpoint, as routes name it.
pub(crate) fn endpoints(svc: &Messaging) -> Endpoints {
    endpoints_at(&svc.endpoint.ip().to_string(), svc.endpoint.port())
}

/// The endpoint `host:port` as routes name it (IPv4, IPv6 or a domain name).
fn endpoints_at(host: &str, port: u16) -> Endpoints {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let scheme = match host.parse::<IpAddr>() {
        Ok(IpAddr::V4(_)) => AddressScheme::IPv4,
        Ok(IpAddr::V6(_)) => AddressScheme::IPv6,
        Err(_) => AddressScheme::DomainName,
    };
    Endpoints {
        scheme: scheme as i32,
        addresses: vec![Address { host: host.to_string(), port: i32::from(port) }],
    }
}

/// The gRPC ports of the other brokers of the cluster, by remoting address, as each last said
/// (`None`: it serves no gRPC, or did not answer).
#[derive(Debug, Default)]
pub(crate) struct Peers {
    known: Mutex<HashMap<String, PeerPort>>,
}

/// A peer's gRPC port as last asked (`None`: none, or no answer), when, and how long that
/// answer is trusted.
type PeerPort = (Option<u16>, Instant, Duration);

impl Peers {
    /// The gRPC port of the broker at `remoting`, asked at most once per [`PEER_TTL`] (signed
    /// with `credentials` when the broker has them).
    async fn grpc_port(&self, remoting: &str, credentials: Option<&Credentials>) -> Option<u16> {
        {
            let known = lock(&self.known);
            if let Some((port, at, ttl)) = known.get(remoting) {
                if at.elapsed() < *ttl {
                    return *port;
                }
            }
        }
        let (port, ttl) = match ask_grpc_port(remoting, credentials).await {
            Some(answered) => (answered, PEER_TTL),
            None => (None, PEER_RETRY),
        };
        let mut known = lock(&self.known);
        if known.len() >= MAX_PEERS {
            known.retain(|_, (_, at, ttl)| at.elapsed() < *ttl);
        }
        if known.len() < MAX_PEERS {
            known.insert(remoting.to_string(), (port, Instant::now(), ttl));
        }
        port
    }
}

/// `grpcServerPort` from the GET_BROKER_CONFIG answer of the broker at `remoting`: `None` when
/// it did not answer, `Some(None)` when it answered without a gRPC port (or refused: an ACL
/// peer refuses an unsigned or non-admin request, and says why in the log at debug).
/// `credentials` sign the request as RocketMQ's `AclClientRPCHook` does.
pub(crate) async fn ask_grpc_port(
    remoting: &str,
    credentials: Option<&Credentials>,
) -> Option<Option<u16>> {
    let mut req = RemotingCommand::request(request_code::GET_BROKER_CONFIG, 0);
    if let Some(c) = credentials {
        c.sign(&mut req);
    }
    let resp = match request_once(remoting, req.clone(), ASK_TIMEOUT).await {
        Ok(r) => r,
        // Connected, then closed or garbled: a peer whose port speaks TLS only
        // (`--tls-mode enforcing`). Ask again over TLS (review L4).
        Err(ClientError::Closed | ClientError::Io(_) | ClientError::Decode(_)) => {
            match request_once_tls(remoting, req, ASK_TIMEOUT).await {
                Ok(r) => r,
                Err(e) => {
                    tracing::debug!(peer = remoting, error = %e, "a peer's gRPC port: no answer over TLS");
                    return None;
                }
            }
        }
        Err(e) => {
            tracing::debug!(peer = remoting, error = %e, "a peer's gRPC port: no answer");
            return None;
        }
    };
    if resp.code != response_code::SUCCESS {
        tracing::debug!(peer = remoting, code = resp.code, remark = ?resp.remark, "a peer refused the gRPC-port probe");
        return Some(None);
    }
    let Ok(text) = std::str::from_utf8(&resp.body) else { return Some(None) };
    Some(
        text.lines()
            .find_map(|l| l.trim().strip_prefix("grpcServerPort="))
            .and_then(|v| v.trim().parse().ok()),
    )
}

/// The route of `topic` as this broker's name server has it: the embedded table, or the first
/// external name server that answers (`None`: no route, or none answered).
async fn cluster_route(core: &Core, topic: &str) -> Option<TopicRouteData> {
    let external = core.config.namesrv_addrs().unwrap_or_default();
    if external.is_empty() {
        return core.routes.route(topic);
    }
    for ns in external {
        let h = GetRouteInfoRequestHeader { topic, accept_standard_json_only: true };
        let req = RemotingCommand::request(request_code::GET_ROUTEINFO_BY_TOPIC, 0)
            .with_ext_fields(h.to_ext_fields());
        match request_once(ns.as_str(), req, ASK_TIMEOUT).await {
            Ok(r) if r.code == response_code::SUCCESS => {
                return TopicRouteData::from_json_slice(&r.body).ok()
            }
            // It answered: the topic has no route there.
            Ok(_) => return None,
            Err(_) => continue,
        }
    }
    None
}

/// The most queues one `QueryRoute` answer lists: peers past it are left out (logged).
const MAX_ROUTE_ANSWER: usize = 64 * MAX_ROUTE_QUEUES as usize;

/// Every queue of `topic` a gRPC client can use: this broker's (auto-created as a send would
/// create it), then those of every peer the name server routes it to that serves gRPC. The
/// status is this broker's refusal when no broker has the topic.
pub(crate) async fn cluster_queues(
    svc: &Messaging,
    topic: &str,
) -> Result<Vec<MessageQueue>, super::pb::Status> {
    let local = topic_config(svc, topic);
    let mut queues = match &local {
        Ok(c) => message_queues(svc, c),
        Err(_) => Vec::new(),
    };
    if topics::validate_topic(topic).is_ok() {
        let own = svc.core.config.broker_name.as_str();
        if let Some(route) = cluster_route(&svc.core, topic).await {
            for q in route.queue_datas.iter().filter(|q| q.broker_name != own) {
                let Some(addr) = route
                    .broker_datas
                    .iter()
                    .find(|b| b.broker_name == q.broker_name)
                    .and_then(|b| b.broker_addrs.get(&0))
                else {
                    continue;
                };
                if queues.len() >= MAX_ROUTE_ANSWER {
                    tracing::warn!(%topic, queues = queues.len(), "route answer bounded; further brokers left out");
                    break;
                }
                let creds = svc.grpc.peer_credentials.as_ref();
                let Some(port) = svc.peers.grpc_port(addr, creds).await else { continue };
                let host = addr.rsplit_once(':').map_or(addr.as_str(), |(h, _)| h);
                let at = endpoints_at(host, port);
                queues.extend(queues_of(
                    topic,
                    &q.broker_name,
                    at,
                    q.read_queue_nums,
                    q.write_queue_nums,
                    q.perm,
                ));
            }
        }
    }
    match local {
        Err(st) if queues.is_empty() => Err(st),
        _ => Ok(queues),
    }
}

/// The topic's config, auto-created from `TBW102` when the broker's `auto-create-topic` is on
/// (as a remoting send would create it), or the status to answer with.
pub(crate) fn topic_config(svc: &Messaging, name: &str) -> Result<TopicConfig, super::pb::Status> {
    if let Err(remark) = topics::validate_topic(name) {
        return Err(status(Code::IllegalTopic, remark));
    }
    let core = &svc.core;
    if let Some(c) = core.topics.get(name) {
        return Ok(c);
    }
    if topics::is_system_topic(name) || !core.config.auto_create_topic {
        return Err(status(Code::TopicNotFound, format!("topic {name} does not exist")));
    }
    match resolve_topic(core, name, "", i32::try_from(core.config.default_queues).unwrap_or(8)) {
        Ok(_) => core
            .topics
            .get(name)
            .ok_or_else(|| status(Code::TopicNotFound, format!("topic {name} does not exist"))),
        Err(e) => Err(send_status(&e)),
    }
}

/// This broker's queues of a topic config (see [`queues_of`]).
pub(crate) fn message_queues(svc: &Messaging, c: &TopicConfig) -> Vec<MessageQueue> {
    queues_of(
        &c.topic_name,
        &svc.core.config.broker_name,
        endpoints(svc),
        c.read_queue_nums,
        c.write_queue_nums,
        c.perm,
    )
}

/// The queues of one broker's share of a topic as the proxy lists them
/// (`genMessageQueueFromQueueData`): first the queues both readable and writable, then
/// read-only, then write-only ones.
fn queues_of(
    topic: &str,
    broker: &str,
    at: Endpoints,
    read: u32,
    write: u32,
    permission: u32,
) -> Vec<MessageQueue> {
    // Bounded whatever a route says (registrations are refused past it, but an external name
    // server is not ours): a queue count near 2^32 must not become billions of queues.
    let (r, w) = (read.min(MAX_ROUTE_QUEUES), write.min(MAX_ROUTE_QUEUES));
    let readable = permission & perm::READ != 0;
    let writable = permission & perm::WRITE != 0;
    let (rw, ro, wo) = match (readable, writable) {
        (true, true) => (r.min(w), r.saturating_sub(w), w.saturating_sub(r)),
        (true, false) => (0, r, 0),
        (false, true) => (0, 0, w),
        (false, false) => (0, 0, 0),
    };
    let broker = Broker { name: broker.to_string(), id: 0, endpoints: Some(at) };
    let topic = Resource { resource_namespace: String::new(), name: topic.to_string() };
    let kinds = std::iter::repeat(Permission::ReadWrite)
        .take(rw as usize)
        .chain(std::iter::repeat(Permission::Read).take(ro as usize))
        .chain(std::iter::repeat(Permission::Write).take(wo as usize));
    kinds
        .enumerate()
        .map(|(id, permission)| MessageQueue {
            topic: Some(topic.clone()),
            id: i32::try_from(id).unwrap_or(i32::MAX),
            permission: permission as i32,
            broker: Some(broker.clone()),
            accept_message_types: ACCEPTED.iter().map(|t| *t as i32).collect(),
        })
        .collect()
}

/// `QueryRoute`.
pub(crate) async fn query_route(svc: &Messaging, req: &QueryRouteRequest) -> QueryRouteResponse {
    let name = req.topic.as_ref().map(|t| t.name.as_str()).unwrap_or_default();
    match cluster_queues(svc, name).await {
        Ok(message_queues) => QueryRouteResponse { status: Some(ok()), message_queues },
        Err(s) => QueryRouteResponse { status: Some(s), message_queues: Vec::new() },
    }
}
