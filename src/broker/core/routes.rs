//! The name server's table: which broker serves which topic, as clients ask for it.
//!
//! One [`RouteTable`] serves both modes: embedded (the broker writes its own topics into it
//! directly, so a created topic is routable at once, and its gRPC face reads routes from it)
//! and standalone (`baiji namesrv`: brokers register over the wire with `REGISTER_BROKER`, a
//! registration lives as long as the connection that made it, or 120 s without renewal).
//!
//! Registrations are kept per (broker name, broker id), each with the connection that made it
//! last: a closing connection removes only the ids it registered, so a slave's connection
//! closing leaves its master routed. The embedded broker's own entry (no connection) cannot be
//! taken over from the wire.
//!
//! As in RocketMQ's name server, a registration over the wire adds or updates the topics it
//! carries and never removes others (see the remoting face's `namesrv` processors).

use crate::sync::{read, write, RwLock};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use super::clients::ConnId;
use crate::remoting::body::{BrokerData, ClusterInfo, QueueData, TopicConfig, TopicRouteData};

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
        let mut brokers = write(&self.brokers);
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
        let mut brokers = write(&self.brokers);
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
        let mut brokers = write(&self.brokers);
        let mut any = false;
        for e in brokers.values_mut().filter(|e| cluster.map_or(true, |c| e.cluster == c)) {
            any |= e.topics.remove(topic).is_some();
        }
        any
    }

    /// Removes one broker address (and the broker when it has none left).
    pub(crate) fn unregister(&self, broker_name: &str, broker_id: u64) -> bool {
        let mut brokers = write(&self.brokers);
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
        let mut brokers = write(&self.brokers);
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
        let brokers = read(&self.brokers);
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
        let brokers = read(&self.brokers);
        let mut info = ClusterInfo::default();
        for (name, e) in brokers.iter() {
            info.broker_addr_table.insert(name.clone(), broker_data(name, e));
            info.cluster_addr_table.entry(e.cluster.clone()).or_default().push(name.clone());
        }
        info
    }

    pub(crate) fn topic_list(&self) -> Vec<String> {
        let brokers = read(&self.brokers);
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
