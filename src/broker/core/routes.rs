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
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use super::clients::ConnId;
use super::topics::perm;
use crate::remoting::body::{
    BrokerData, ClusterInfo, QueueData, TopicConfig, TopicList, TopicRouteData,
};

/// The most queues (read or write) one broker may register for one topic: the store's own
/// bound ([`MAX_QUEUES`](crate::store::MAX_QUEUES)). A registration over the wire with more is
/// refused whole, so no route this table answers can make a reader build billions of queues.
pub(crate) const MAX_ROUTE_QUEUES: u32 = crate::store::MAX_QUEUES;

/// The most topics one broker's registrations may hold (the store's topic bound): past it, a
/// registration adding topics is refused, so one connection cannot grow the table for ever.
pub(crate) const MAX_BROKER_TOPICS: usize = 131_072;

/// Why a registration was refused (the remark the name server answers).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum RouteError {
    /// A topic's queue counts are out of range.
    #[error("topic {topic}: readQueueNums {read} and writeQueueNums {write} must each be at most {MAX_ROUTE_QUEUES}")]
    TooManyQueues {
        /// The topic.
        topic: String,
        /// Its `readQueueNums`.
        read: u32,
        /// Its `writeQueueNums`.
        write: u32,
    },
    /// The broker would hold more than [`MAX_BROKER_TOPICS`] topics.
    #[error("broker {0} would register more than {MAX_BROKER_TOPICS} topics")]
    TooManyTopics(String),
    /// A registration over the wire names an id the embedded broker holds.
    #[error("broker {0} id {1} is this name server's own broker")]
    OwnBroker(String, u64),
}

/// Refuses queue counts above [`MAX_ROUTE_QUEUES`].
pub(crate) fn check_queue_counts(topic: &str, read: u32, write: u32) -> Result<(), RouteError> {
    if read > MAX_ROUTE_QUEUES || write > MAX_ROUTE_QUEUES {
        return Err(RouteError::TooManyQueues { topic: topic.to_owned(), read, write });
    }
    Ok(())
}

#[derive(Debug, Clone)]
struct BrokerEntry {
    cluster: String,
    /// Per broker id (0: master).
    addrs: BTreeMap<u64, Registrant>,
    topics: BTreeMap<String, TopicConfig>,
    /// The topics whose write permission an admin took away (`WIPE_WRITE_PERM_OF_BROKER`):
    /// routed without [`perm::WRITE`] until `ADD_WRITE_PERM_OF_BROKER`, whatever the broker
    /// registers meanwhile (as RocketMQ's name server keeps a wiped queue data while the
    /// broker's renewals carry an unchanged data version). A topic the broker adds later is
    /// routed with its own permission; a broker that registers anew starts unwiped.
    wiped: BTreeSet<String>,
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
    /// was new.
    ///
    /// # Errors
    /// [`RouteError::OwnBroker`] when a registration over the wire names an id the embedded
    /// broker holds (it is not taken over); [`RouteError::TooManyQueues`] or
    /// [`RouteError::TooManyTopics`] when its topics are out of bounds (nothing is recorded).
    pub(crate) fn register(&self, r: Registration) -> Result<bool, RouteError> {
        for t in &r.topics {
            check_queue_counts(&t.topic_name, t.read_queue_nums, t.write_queue_nums)?;
        }
        let mut brokers = write(&self.brokers);
        if r.conn.is_some()
            && brokers
                .get(&r.broker_name)
                .and_then(|e| e.addrs.get(&r.broker_id))
                .is_some_and(|a| a.conn.is_none())
        {
            return Err(RouteError::OwnBroker(r.broker_name, r.broker_id));
        }
        if r.broker_id == 0 {
            let held = brokers.get(&r.broker_name).map(|e| &e.topics);
            let added = match held {
                Some(held) if !r.replace_topics => {
                    r.topics.iter().filter(|t| !held.contains_key(&t.topic_name)).count()
                        + held.len()
                }
                _ => r.topics.len(),
            };
            if added > MAX_BROKER_TOPICS {
                return Err(RouteError::TooManyTopics(r.broker_name));
            }
        }
        let new = !brokers.contains_key(&r.broker_name);
        let e = brokers.entry(r.broker_name.clone()).or_insert_with(|| BrokerEntry {
            cluster: r.cluster.clone(),
            addrs: BTreeMap::new(),
            topics: BTreeMap::new(),
            wiped: BTreeSet::new(),
        });
        e.cluster = r.cluster;
        // A broker that changed its id (a broker set's follower that now leads, or the other
        // way round) is one entry, under its new id: RocketMQ's name server does the same
        // ("switch slave to master" in `RouteInfoManager.registerBroker`).
        e.addrs.retain(|id, a| *id == r.broker_id || a.addr != r.addr);
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
            let topics = &e.topics;
            e.wiped.retain(|t| topics.contains_key(t));
        }
        Ok(new)
    }

    /// Adds `topic`'s queues on the brokers `queues` names, if they are registered. Returns
    /// whether every one was.
    ///
    /// # Errors
    /// [`RouteError::TooManyQueues`] or [`RouteError::TooManyTopics`] when a queue data is out
    /// of bounds (nothing is recorded).
    pub(crate) fn register_topic(
        &self,
        topic: &str,
        queues: &[QueueData],
    ) -> Result<bool, RouteError> {
        for q in queues {
            check_queue_counts(topic, q.read_queue_nums, q.write_queue_nums)?;
        }
        let mut brokers = write(&self.brokers);
        if !queues.iter().all(|q| brokers.contains_key(&q.broker_name)) {
            return Ok(false);
        }
        for q in queues {
            if let Some(e) = brokers.get(&q.broker_name) {
                if !e.topics.contains_key(topic) && e.topics.len() >= MAX_BROKER_TOPICS {
                    return Err(RouteError::TooManyTopics(q.broker_name.clone()));
                }
            }
        }
        for q in queues {
            if let Some(e) = brokers.get_mut(&q.broker_name) {
                let mut t = TopicConfig::new(topic, q.read_queue_nums, q.write_queue_nums);
                t.perm = q.perm;
                t.topic_sys_flag = q.topic_sys_flag;
                e.topics.insert(topic.to_string(), t);
            }
        }
        Ok(true)
    }

    /// Removes `topic` from every broker (of `cluster`, if given). Returns whether any had it.
    pub(crate) fn delete_topic(&self, topic: &str, cluster: Option<&str>) -> bool {
        let mut brokers = write(&self.brokers);
        let mut any = false;
        for e in brokers.values_mut().filter(|e| cluster.map_or(true, |c| e.cluster == c)) {
            any |= e.topics.remove(topic).is_some();
            e.wiped.remove(topic);
        }
        any
    }

    /// `WIPE_WRITE_PERM_OF_BROKER`: routes every topic of `broker_name` without the write
    /// permission, so producers stop sending there (the graceful drain before a restart).
    /// Returns how many topics that broker has (RocketMQ's `wipeTopicCount`: 0 for a broker
    /// this table does not know).
    pub(crate) fn wipe_write_perm(&self, broker_name: &str) -> usize {
        let mut brokers = write(&self.brokers);
        let Some(e) = brokers.get_mut(broker_name) else { return 0 };
        e.wiped = e.topics.keys().cloned().collect();
        e.topics.len()
    }

    /// `ADD_WRITE_PERM_OF_BROKER`: routes every topic of `broker_name` with its write
    /// permission again (RocketMQ makes it read-write; here each topic gets back the
    /// permission its broker registered, which for a writable topic is the same). Returns how
    /// many topics that broker has (`addTopicCount`).
    pub(crate) fn add_write_perm(&self, broker_name: &str) -> usize {
        let mut brokers = write(&self.brokers);
        let Some(e) = brokers.get_mut(broker_name) else { return 0 };
        e.wiped.clear();
        e.topics.len()
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
            let wiped = if e.wiped.contains(topic) { perm::WRITE } else { 0 };
            route.queue_datas.push(QueueData {
                broker_name: name.clone(),
                read_queue_nums: t.read_queue_nums,
                write_queue_nums: t.write_queue_nums,
                perm: t.perm & !wiped,
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

    /// `GET_SYSTEM_TOPIC_LIST_FROM_NS`, as RocketMQ's `RouteInfoManager.getSystemTopicList`:
    /// each cluster's name and its brokers' names (RocketMQ brokers create a topic of each),
    /// with the address of one broker (its lowest id), where the caller asks for the broker's
    /// own system topics next (`GET_SYSTEM_TOPIC_LIST_FROM_BROKER`).
    pub(crate) fn system_topic_list(&self) -> TopicList {
        let brokers = read(&self.brokers);
        let mut clusters: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for (name, e) in brokers.iter() {
            clusters.entry(e.cluster.as_str()).or_default().push(name.as_str());
        }
        let mut topic_list = Vec::new();
        for (cluster, names) in clusters {
            topic_list.push(cluster.to_owned());
            topic_list.extend(names.into_iter().map(str::to_owned));
        }
        topic_list.sort();
        topic_list.dedup();
        let broker_addr =
            brokers.values().find_map(|e| e.addrs.values().next()).map(|a| a.addr.clone());
        TopicList { topic_list, broker_addr }
    }

    /// `GET_TOPICS_BY_CLUSTER`: the topics of the brokers of `cluster` (none for an unknown
    /// cluster, as RocketMQ answers).
    pub(crate) fn topics_by_cluster(&self, cluster: &str) -> Vec<String> {
        let brokers = read(&self.brokers);
        let mut v: Vec<String> = brokers
            .values()
            .filter(|e| e.cluster == cluster)
            .flat_map(|e| e.topics.keys().cloned())
            .collect();
        v.sort();
        v.dedup();
        v
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

#[cfg(test)]
mod tests {
    use super::*;

    fn wire(name: &str, topics: Vec<TopicConfig>) -> Registration {
        Registration {
            cluster: "c".into(),
            broker_name: name.into(),
            broker_id: 0,
            addr: "127.0.0.1:1".into(),
            topics,
            conn: Some(7),
            replace_topics: false,
        }
    }

    #[test]
    fn given_a_wiped_broker_when_it_registers_again_should_stay_read_only_until_added_back() {
        let t = RouteTable::default();
        let a = TopicConfig::new("A", 4, 4);
        assert_eq!(t.register(wire("b", vec![a.clone()])), Ok(true));
        assert_eq!(t.wipe_write_perm("b"), 1);
        assert_eq!(t.route("A").map(|r| r.queue_datas[0].perm), Some(perm::READ));
        let renewal = wire("b", vec![a, TopicConfig::new("B", 1, 1)]);
        assert_eq!(t.register(renewal), Ok(false));
        assert_eq!(t.route("A").map(|r| r.queue_datas[0].perm), Some(perm::READ), "kept");
        assert_eq!(t.route("B").map(|r| r.queue_datas[0].perm), Some(perm::RW), "a new topic");
        assert_eq!(t.add_write_perm("b"), 2);
        assert_eq!(t.route("A").map(|r| r.queue_datas[0].perm), Some(perm::RW));
        assert_eq!(t.wipe_write_perm("nobody"), 0);
    }

    #[test]
    fn given_absurd_queue_counts_when_registering_should_refuse_the_whole_registration() {
        let t = RouteTable::default();
        let huge = TopicConfig::new("Huge", u32::MAX, 4);
        let ok = TopicConfig::new("Ok", 4, 4);
        let e = t.register(wire("b", vec![ok.clone(), huge])).expect_err("refused");
        assert!(matches!(e, RouteError::TooManyQueues { read: u32::MAX, .. }), "{e}");
        assert!(t.route("Ok").is_none(), "nothing of a refused registration is kept");
        assert_eq!(t.register(wire("b", vec![ok])), Ok(true));
        let q = QueueData { broker_name: "b".into(), write_queue_nums: 1025, ..Default::default() };
        assert!(t.register_topic("T", &[q]).is_err(), "a topic registration is bounded too");
        assert!(t.route("T").is_none());
    }

    #[test]
    fn given_a_connection_adding_topics_without_end_should_refuse_past_the_bound() {
        // Review L10: registrations only add topics, so one connection could grow the table.
        let t = RouteTable::default();
        let many: Vec<_> =
            (0..MAX_BROKER_TOPICS).map(|i| TopicConfig::new(format!("T{i}"), 1, 1)).collect();
        assert_eq!(t.register(wire("b", many)), Ok(true));
        let more = wire("b", vec![TopicConfig::new("OneMore", 1, 1)]);
        assert_eq!(t.register(more), Err(RouteError::TooManyTopics("b".into())));
        let again = wire("b", vec![TopicConfig::new("T0", 2, 2)]);
        assert_eq!(t.register(again), Ok(false), "updating a held topic is still accepted");
        let q = QueueData {
            broker_name: "b".into(),
            read_queue_nums: 1,
            write_queue_nums: 1,
            ..Default::default()
        };
        assert!(t.register_topic("OneMore", &[q]).is_err(), "nor by REGISTER_TOPIC_IN_NAMESRV");
        assert!(t.route("OneMore").is_none());
    }
}
