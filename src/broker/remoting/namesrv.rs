//! The name server: which broker serves which topic, as clients ask for it.
//!
//! One [`RouteTable`] serves both modes: embedded (the broker writes its own topics into it
//! directly, so a created topic is routable at once) and standalone (`baiji namesrv`: brokers
//! register over the wire with `REGISTER_BROKER`, a registration lives as long as the
//! connection that made it, or 120 s without renewal).
//!
//! Registrations are kept per (broker name, broker id), each with the connection that made it
//! last: a closing connection removes only the ids it registered, so a slave's connection
//! closing leaves its master routed. The embedded broker's own entry (no connection) cannot be
//! taken over from the wire.
//!
//! Over the wire, as in RocketMQ's name server, a registration adds or updates the topics it
//! carries and never removes others: brokers also register incrementally (a Java broker sends
//! `REGISTER_BROKER` with just the topic it created; a rocketmq-rust broker sends
//! `REGISTER_TOPIC_IN_NAMESRV`). Topics leave a broker's routes through
//! `DELETE_TOPIC_IN_NAMESRV` (what `mqadmin deleteTopic` sends), or with the broker.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::broker::{ok, reply_error, ConnCtx, ConnId, Reply, Shared};
use crate::remoting::body::{
    BrokerData, ClusterInfo, JsonBody, QueueData, TopicConfig, TopicList, TopicRouteData,
};
use crate::remoting::code::response_code;
use crate::remoting::header::{
    FromExtFields, GetRouteInfoRequestHeader, RegisterBrokerRequestHeader,
    RegisterBrokerResponseHeader, ToExtFields, UnregisterBrokerRequestHeader,
};
use crate::remoting::{ExtFields, RemotingCommand};

#[derive(Debug, Clone)]
struct BrokerEntry {
    cluster: String,
    /// Per broker id (0: master).
    addrs: BTreeMap<u64, Registrant>,
    topics: BTreeMap<String, TopicConfig>,
}

/// One broker id's registration.
#[derive(Debug, Clone)]
struct Registrant {
    addr: String,
    last_update: Instant,
    /// The connection that registered it last; `None` for the embedded broker.
    conn: Option<ConnId>,
}

/// Routes of every known broker.
#[derive(Debug, Default)]
pub(crate) struct RouteTable {
    brokers: RwLock<BTreeMap<String, BrokerEntry>>,
}

/// One registration.
#[derive(Debug, Clone)]
pub(crate) struct Registration {
    pub(crate) cluster: String,
    pub(crate) broker_name: String,
    pub(crate) broker_id: u64,
    pub(crate) addr: String,
    pub(crate) topics: Vec<TopicConfig>,
    pub(crate) conn: Option<ConnId>,
    /// `topics` is the broker's whole table (the embedded broker's own); otherwise they are
    /// added to or update what the broker registered before.
    pub(crate) replace_topics: bool,
}

impl RouteTable {
    /// Records (or renews) a broker's registration and its topics. Returns whether the broker
    /// was new, or `None` when a registration over the wire names an id the embedded broker
    /// holds (it is not taken over).
    pub(crate) fn register(&self, r: Registration) -> Option<bool> {
        let mut brokers = self.brokers.write().unwrap_or_else(|p| p.into_inner());
        if r.conn.is_some()
            && brokers
                .get(&r.broker_name)
                .and_then(|e| e.addrs.get(&r.broker_id))
                .is_some_and(|a| a.conn.is_none())
        {
            return None;
        }
        let new = !brokers.contains_key(&r.broker_name);
        let e = brokers.entry(r.broker_name.clone()).or_insert_with(|| BrokerEntry {
            cluster: r.cluster.clone(),
            addrs: BTreeMap::new(),
            topics: BTreeMap::new(),
        });
        e.cluster = r.cluster;
        e.addrs.insert(
            r.broker_id,
            Registrant { addr: r.addr, last_update: Instant::now(), conn: r.conn },
        );
        // Only the master's topic configs define routes (clients send to broker id 0).
        if r.broker_id == 0 {
            if r.replace_topics {
                e.topics.clear();
            }
            e.topics.extend(r.topics.into_iter().map(|t| (t.topic_name.clone(), t)));
        }
        Some(new)
    }

    /// Adds `topic`'s queues on the brokers `queues` names, if they are registered. Returns
    /// whether every one was.
    pub(crate) fn register_topic(&self, topic: &str, queues: &[QueueData]) -> bool {
        let mut brokers = self.brokers.write().unwrap_or_else(|p| p.into_inner());
        if !queues.iter().all(|q| brokers.contains_key(&q.broker_name)) {
            return false;
        }
        for q in queues {
            if let Some(e) = brokers.get_mut(&q.broker_name) {
                let mut t = TopicConfig::new(topic, q.read_queue_nums, q.write_queue_nums);
                t.perm = q.perm;
                t.topic_sys_flag = q.topic_sys_flag;
                e.topics.insert(topic.to_string(), t);
            }
        }
        true
    }

    /// Removes `topic` from every broker (of `cluster`, if given). Returns whether any had it.
    pub(crate) fn delete_topic(&self, topic: &str, cluster: Option<&str>) -> bool {
        let mut brokers = self.brokers.write().unwrap_or_else(|p| p.into_inner());
        let mut any = false;
        for e in brokers.values_mut().filter(|e| cluster.map_or(true, |c| e.cluster == c)) {
            any |= e.topics.remove(topic).is_some();
        }
        any
    }

    /// Removes one broker address (and the broker when it has none left).
    pub(crate) fn unregister(&self, broker_name: &str, broker_id: u64) -> bool {
        let mut brokers = self.brokers.write().unwrap_or_else(|p| p.into_inner());
        let Some(e) = brokers.get_mut(broker_name) else { return false };
        // The embedded broker's own entry is not removed from the wire.
        if e.addrs.get(&broker_id).is_some_and(|a| a.conn.is_none()) {
            return false;
        }
        e.addrs.remove(&broker_id);
        if e.addrs.is_empty() {
            brokers.remove(broker_name);
        }
        true
    }

    /// Drops the broker ids a closed connection registered (and brokers left without any).
    /// Returns the names of the brokers dropped.
    pub(crate) fn connection_closed(&self, conn: ConnId) -> Vec<String> {
        self.retain(|a| a.conn != Some(conn))
    }

    /// Drops broker ids not renewed for `ttl` (and brokers left without any). Returns the
    /// names of the brokers dropped.
    pub(crate) fn expire(&self, ttl: Duration) -> Vec<String> {
        self.retain(|a| a.conn.is_none() || a.last_update.elapsed() < ttl)
    }

    fn retain(&self, keep: impl Fn(&Registrant) -> bool) -> Vec<String> {
        let mut brokers = self.brokers.write().unwrap_or_else(|p| p.into_inner());
        let mut gone = Vec::new();
        brokers.retain(|name, e| {
            e.addrs.retain(|_, a| keep(a));
            if e.addrs.is_empty() {
                gone.push(name.clone());
            }
            !e.addrs.is_empty()
        });
        gone
    }

    /// The route of `topic` over every live broker that has it, if any does.
    pub(crate) fn route(&self, topic: &str) -> Option<TopicRouteData> {
        let brokers = self.brokers.read().unwrap_or_else(|p| p.into_inner());
        let mut route = TopicRouteData::default();
        for (name, e) in brokers.iter() {
            let Some(t) = e.topics.get(topic) else { continue };
            route.queue_datas.push(QueueData {
                broker_name: name.clone(),
                read_queue_nums: t.read_queue_nums,
                write_queue_nums: t.write_queue_nums,
                perm: t.perm,
                topic_sys_flag: t.topic_sys_flag,
            });
            route.broker_datas.push(broker_data(name, e));
        }
        (!route.queue_datas.is_empty()).then_some(route)
    }

    pub(crate) fn cluster_info(&self) -> ClusterInfo {
        let brokers = self.brokers.read().unwrap_or_else(|p| p.into_inner());
        let mut info = ClusterInfo::default();
        for (name, e) in brokers.iter() {
            info.broker_addr_table.insert(name.clone(), broker_data(name, e));
            info.cluster_addr_table.entry(e.cluster.clone()).or_default().push(name.clone());
        }
        info
    }

    pub(crate) fn topic_list(&self) -> Vec<String> {
        let brokers = self.brokers.read().unwrap_or_else(|p| p.into_inner());
        let mut v: Vec<String> = brokers.values().flat_map(|e| e.topics.keys().cloned()).collect();
        v.sort();
        v.dedup();
        v
    }
}

fn broker_data(name: &str, e: &BrokerEntry) -> BrokerData {
    BrokerData {
        cluster: e.cluster.clone(),
        broker_name: name.to_string(),
        broker_addrs: e.addrs.iter().map(|(id, a)| (*id, a.addr.clone())).collect(),
        zone_name: None,
        enable_acting_master: false,
    }
}

fn json_reply(req: &RemotingCommand, body: Result<Bytes, crate::remoting::BodyError>) -> Reply {
    match body {
        Ok(b) => Reply::now(ok(req, ExtFields::new()).with_body(b)),
        Err(e) => reply_error(req, response_code::SYSTEM_ERROR, e.to_string()),
    }
}

/// `GET_ROUTEINFO_BY_TOPIC` (105).
pub(crate) fn get_route_info(s: &Arc<Shared>, _ctx: &ConnCtx, req: RemotingCommand) -> Reply {
    let h = match GetRouteInfoRequestHeader::from_ext_fields(&req.ext_fields) {
        Ok(h) => h,
        Err(e) => return reply_error(&req, response_code::SYSTEM_ERROR, e.to_string()),
    };
    match s.routes.route(h.topic) {
        Some(route) => json_reply(&req, route.to_json_bytes()),
        None => reply_error(
            &req,
            response_code::TOPIC_NOT_EXIST,
            format!(
                "No topic route info in name server for the topic: {}\nSee https://rocketmq.apache.org/docs/bestPractice/06FAQ for further details.",
                h.topic
            ),
        ),
    }
}

/// `GET_BROKER_CLUSTER_INFO` (106).
pub(crate) fn get_broker_cluster_info(
    s: &Arc<Shared>,
    _ctx: &ConnCtx,
    req: RemotingCommand,
) -> Reply {
    json_reply(&req, s.routes.cluster_info().to_json_bytes())
}

/// `GET_ALL_TOPIC_LIST_FROM_NAMESERVER` (206).
pub(crate) fn get_all_topic_list(s: &Arc<Shared>, _ctx: &ConnCtx, req: RemotingCommand) -> Reply {
    json_reply(
        &req,
        TopicList { topic_list: s.routes.topic_list(), broker_addr: None }.to_json_bytes(),
    )
}

/// `REGISTER_BROKER` (103): a broker (baiji or RocketMQ) joins this name server.
pub(crate) fn register_broker(s: &Arc<Shared>, ctx: &ConnCtx, req: RemotingCommand) -> Reply {
    let h = match RegisterBrokerRequestHeader::from_ext_fields(&req.ext_fields) {
        Ok(h) => h,
        Err(e) => return reply_error(&req, response_code::SYSTEM_ERROR, e.to_string()),
    };
    if h.compressed {
        return reply_error(
            &req,
            response_code::SYSTEM_ERROR,
            "compressed broker registrations are not supported; register uncompressed".into(),
        );
    }
    if h.body_crc32 != 0 {
        let crc = (crc32fast::hash(&req.body) & 0x7FFF_FFFF) as i32;
        if crc != h.body_crc32 {
            return reply_error(
                &req,
                response_code::INVALID_PARAMETER,
                format!("the body crc32 {} does not match the body's {crc}", h.body_crc32),
            );
        }
    }
    let topics = if req.body.is_empty() {
        Vec::new()
    } else {
        match crate::remoting::body::RegisterBrokerBody::from_json_slice(&req.body) {
            Ok(b) => b.topic_config_serialize_wrapper.topic_config_table.into_values().collect(),
            Err(e) => return reply_error(&req, response_code::SYSTEM_ERROR, e.to_string()),
        }
    };
    let broker_id = u64::try_from(h.broker_id).unwrap_or(0);
    let registered = s.routes.register(Registration {
        cluster: h.cluster_name.to_string(),
        broker_name: h.broker_name.to_string(),
        broker_id,
        addr: h.broker_addr.to_string(),
        topics,
        conn: Some(ctx.id),
        replace_topics: false,
    });
    let Some(new) = registered else {
        return reply_error(
            &req,
            response_code::SYSTEM_ERROR,
            format!(
                "broker {} id {broker_id} is this name server's own broker",
                crate::remoting::error::quote(h.broker_name)
            ),
        );
    };
    if new {
        tracing::info!(
            cluster = %h.cluster_name, broker = %h.broker_name, id = broker_id, addr = %h.broker_addr,
            "broker registered"
        );
    }
    let master_addr = (broker_id != 0).then(|| h.broker_addr.to_string());
    let resp = RegisterBrokerResponseHeader { ha_server_addr: None, master_addr };
    Reply::now(ok(&req, resp.to_ext_fields()))
}

/// `UNREGISTER_BROKER` (104).
pub(crate) fn unregister_broker(s: &Arc<Shared>, _ctx: &ConnCtx, req: RemotingCommand) -> Reply {
    match UnregisterBrokerRequestHeader::from_ext_fields(&req.ext_fields) {
        Ok(h) => {
            if s.routes.unregister(h.broker_name, u64::try_from(h.broker_id).unwrap_or(0)) {
                tracing::info!(broker = %h.broker_name, id = h.broker_id, "broker unregistered");
            }
            Reply::now(ok(&req, ExtFields::new()))
        }
        Err(e) => reply_error(&req, response_code::SYSTEM_ERROR, e.to_string()),
    }
}

/// `REGISTER_TOPIC_IN_NAMESRV` (217): a registered broker adds one topic (header `topic`, body
/// a route with its `queueDatas`). Queues of unregistered brokers are refused as a whole, as
/// RocketMQ's name server does (it answers success and ignores them).
pub(crate) fn register_topic_in_namesrv(
    s: &Arc<Shared>,
    _ctx: &ConnCtx,
    req: RemotingCommand,
) -> Reply {
    let topic = match req.ext_fields.required_str("topic") {
        Ok(t) => t.to_string(),
        Err(e) => return reply_error(&req, response_code::SYSTEM_ERROR, e.to_string()),
    };
    let route = match TopicRouteData::from_json_slice(&req.body) {
        Ok(r) => r,
        Err(e) => return reply_error(&req, response_code::SYSTEM_ERROR, e.to_string()),
    };
    if !s.routes.register_topic(&topic, &route.queue_datas) {
        tracing::warn!(%topic, queues = ?route.queue_datas, "topic registration names an unregistered broker; ignored");
    }
    Reply::now(ok(&req, ExtFields::new()))
}

/// `DELETE_TOPIC_IN_NAMESRV` (216): `mqadmin deleteTopic` removes a topic from the routes, of
/// every broker or of those of `clusterName`.
pub(crate) fn delete_topic_in_namesrv(
    s: &Arc<Shared>,
    _ctx: &ConnCtx,
    req: RemotingCommand,
) -> Reply {
    match req.ext_fields.required_str("topic") {
        Ok(topic) => {
            let cluster = req.ext_fields.optional_str("clusterName").filter(|c| !c.is_empty());
            s.routes.delete_topic(topic, cluster);
            Reply::now(ok(&req, ExtFields::new()))
        }
        Err(e) => reply_error(&req, response_code::SYSTEM_ERROR, e.to_string()),
    }
}
