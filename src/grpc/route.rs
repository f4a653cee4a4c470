//! `QueryRoute` (facts doc 1.4): the topic's queues on this broker, at this broker's gRPC
//! endpoint, accepting every message type.
//!
//! # Several brokers
//! Only this broker's queues are listed, with its own gRPC endpoint (its advertised host and
//! gRPC port). A gRPC client therefore sends to and receives from the broker it was pointed
//! at; a cluster of baiji brokers does not yet publish each other's gRPC ports (the remoting
//! registration carries no gRPC address), and a persistent RocketMQ broker in the same
//! cluster has no gRPC port of its own, so it could never be listed here. Clients of
//! several brokers point each at one broker, or go through Apache's proxy.

use super::pb::{
    Address, AddressScheme, Broker, Code, Endpoints, MessageQueue, MessageType, Permission,
    QueryRouteRequest, QueryRouteResponse, Resource,
};
use super::service::Messaging;
use super::status::{from_remoting_status, ok, status};
use crate::broker::processor::send::resolve_topic;
use crate::broker::topics::{self, perm};
use crate::remoting::body::TopicConfig;

/// The message types every queue accepts: baiji has no typed topics, so all four (Python
/// checks the type before every send, whatever `validate_message_type` says).
pub(crate) const ACCEPTED: [MessageType; 4] =
    [MessageType::Normal, MessageType::Fifo, MessageType::Delay, MessageType::Transaction];

/// This broker's gRPC endpoint, as routes name it.
pub(crate) fn endpoints(svc: &Messaging) -> Endpoints {
    let ip = svc.endpoint.ip();
    Endpoints {
        scheme: if ip.is_ipv4() { AddressScheme::IPv4 } else { AddressScheme::IPv6 } as i32,
        addresses: vec![Address { host: ip.to_string(), port: i32::from(svc.endpoint.port()) }],
    }
}

/// The topic's config, auto-created from `TBW102` when the broker's `auto-create-topic` is on
/// (as a remoting send would create it), or the status to answer with.
pub(crate) fn topic_config(svc: &Messaging, name: &str) -> Result<TopicConfig, super::pb::Status> {
    if let Err(remark) = topics::validate_topic(name) {
        return Err(status(Code::IllegalTopic, remark));
    }
    let s = &svc.shared;
    if let Some(c) = s.topics.get(name) {
        return Ok(c);
    }
    if topics::is_system_topic(name) || !s.config.auto_create_topic {
        return Err(status(Code::TopicNotFound, format!("topic {name} does not exist")));
    }
    match resolve_topic(s, name, "", i32::try_from(s.config.default_queues).unwrap_or(8)) {
        Ok(_) => s
            .topics
            .get(name)
            .ok_or_else(|| status(Code::TopicNotFound, format!("topic {name} does not exist"))),
        Err(r) => Err(from_remoting_status(r.code, r.remark)),
    }
}

/// The queues of a topic config as the proxy lists them (`genMessageQueueFromQueueData`):
/// first the queues both readable and writable, then read-only, then write-only ones.
pub(crate) fn message_queues(svc: &Messaging, c: &TopicConfig) -> Vec<MessageQueue> {
    let (r, w) = (c.read_queue_nums, c.write_queue_nums);
    let readable = c.perm & perm::READ != 0;
    let writable = c.perm & perm::WRITE != 0;
    let (rw, ro, wo) = match (readable, writable) {
        (true, true) => (r.min(w), r.saturating_sub(w), w.saturating_sub(r)),
        (true, false) => (0, r, 0),
        (false, true) => (0, 0, w),
        (false, false) => (0, 0, 0),
    };
    let broker = Broker {
        name: svc.shared.config.broker_name.clone(),
        id: 0,
        endpoints: Some(endpoints(svc)),
    };
    let topic = Resource { resource_namespace: String::new(), name: c.topic_name.clone() };
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
pub(crate) fn query_route(svc: &Messaging, req: &QueryRouteRequest) -> QueryRouteResponse {
    let name = req.topic.as_ref().map(|t| t.name.as_str()).unwrap_or_default();
    match topic_config(svc, name) {
        Ok(c) => QueryRouteResponse { status: Some(ok()), message_queues: message_queues(svc, &c) },
        Err(s) => QueryRouteResponse { status: Some(s), message_queues: Vec::new() },
    }
}
