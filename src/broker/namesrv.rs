//! The name server: which broker serves which topic, as clients ask for it.
//!
//! One [`RouteTable`] serves both modes: embedded (the broker writes its own topics into it
//! directly, so a created topic is routable at once) and standalone (`baiji namesrv`: brokers
//! register over the wire with `REGISTER_BROKER`, a registration lives as long as the
//! connection that made it, or 120 s without renewal).

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use bytes::Bytes;

use super::{ok, reply_error, ConnCtx, ConnId, Reply, Shared};
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
    addrs: BTreeMap<u64, String>,
    topics: BTreeMap<String, TopicConfig>,
    last_update: Instant,
    /// The connection that registered it (standalone mode); `None` for the embedded broker.
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
}

impl RouteTable {
    /// Records (or renews) a broker's registration with its full topic list.
    pub(crate) fn register(&self, r: Registration) {
        let mut brokers = self.brokers.write().unwrap_or_else(|p| p.into_inner());
        let e = brokers.entry(r.broker_name.clone()).or_insert_with(|| BrokerEntry {
            cluster: r.cluster.clone(),
            addrs: BTreeMap::new(),
            topics: BTreeMap::new(),
            last_update: Instant::now(),
            conn: r.conn,
        });
        e.cluster = r.cluster;
        e.addrs.insert(r.broker_id, r.addr);
        // Only the master's topic configs define routes (clients send to broker id 0).
        if r.broker_id == 0 {
            e.topics = r.topics.into_iter().map(|t| (t.topic_name.clone(), t)).collect();
        }
        e.last_update = Instant::now();
        e.conn = r.conn;
    }

    /// Removes one broker address (and the broker when it has none left).
    pub(crate) fn unregister(&self, broker_name: &str, broker_id: u64) -> bool {
        let mut brokers = self.brokers.write().unwrap_or_else(|p| p.into_inner());
        let Some(e) = brokers.get_mut(broker_name) else { return false };
        e.addrs.remove(&broker_id);
        if e.addrs.is_empty() {
            brokers.remove(broker_name);
        }
        true
    }

    /// Drops the brokers registered over a connection that closed. Returns their names.
    pub(crate) fn connection_closed(&self, conn: ConnId) -> Vec<String> {
        self.retain(|e| e.conn != Some(conn))
    }

    /// Drops brokers not renewed for `ttl`. Returns their names.
    pub(crate) fn expire(&self, ttl: Duration) -> Vec<String> {
        self.retain(|e| e.conn.is_none() || e.last_update.elapsed() < ttl)
    }

    fn retain(&self, keep: impl Fn(&BrokerEntry) -> bool) -> Vec<String> {
        let mut brokers = self.brokers.write().unwrap_or_else(|p| p.into_inner());
        let gone: Vec<String> =
            brokers.iter().filter(|(_, e)| !keep(e)).map(|(n, _)| n.clone()).collect();
        for n in &gone {
            brokers.remove(n);
        }
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
        broker_addrs: e.addrs.clone(),
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
    s.routes.register(Registration {
        cluster: h.cluster_name.to_string(),
        broker_name: h.broker_name.to_string(),
        broker_id,
        addr: h.broker_addr.to_string(),
        topics,
        conn: Some(ctx.id),
    });
    let master_addr = (broker_id != 0).then(|| h.broker_addr.to_string());
    let resp = RegisterBrokerResponseHeader { ha_server_addr: None, master_addr };
    Reply::now(ok(&req, resp.to_ext_fields()))
}

/// `UNREGISTER_BROKER` (104).
pub(crate) fn unregister_broker(s: &Arc<Shared>, _ctx: &ConnCtx, req: RemotingCommand) -> Reply {
    match UnregisterBrokerRequestHeader::from_ext_fields(&req.ext_fields) {
        Ok(h) => {
            s.routes.unregister(h.broker_name, u64::try_from(h.broker_id).unwrap_or(0));
            Reply::now(ok(&req, ExtFields::new()))
        }
        Err(e) => reply_error(&req, response_code::SYSTEM_ERROR, e.to_string()),
    }
}
