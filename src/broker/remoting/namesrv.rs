//! The name server's request codes: `REGISTER_BROKER`, `UNREGISTER_BROKER`,
//! `GET_ROUTEINFO_BY_TOPIC`, `GET_BROKER_CLUSTER_INFO`, `GET_ALL_TOPIC_LIST_FROM_NAMESERVER`,
//! `REGISTER_TOPIC_IN_NAMESRV`, `DELETE_TOPIC_IN_NAMESRV`, `GET_TOPICS_BY_CLUSTER`,
//! `GET_SYSTEM_TOPIC_LIST_FROM_NS` and the graceful-drain pair `WIPE_WRITE_PERM_OF_BROKER` /
//! `ADD_WRITE_PERM_OF_BROKER`, over the core's route table
//! ([`RouteTable`](crate::broker::core::routes::RouteTable)).
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

use crate::sync::Arc;

use super::{json_reply, ok, reply_error, ConnCtx, RemotingState, Reply};
use crate::broker::core::routes::{Registration, RouteError};
use crate::broker::core::Core;
use crate::remoting::body::{JsonBody, TopicList, TopicRouteData};
use crate::remoting::code::response_code;
use crate::remoting::header::{
    FromExtFields, GetRouteInfoRequestHeader, RegisterBrokerRequestHeader,
    RegisterBrokerResponseHeader, ToExtFields, UnregisterBrokerRequestHeader,
};
use crate::remoting::{ExtFields, RemotingCommand};

/// `GET_ROUTEINFO_BY_TOPIC` (105).
pub(crate) fn get_route_info(
    core: &Arc<Core>,
    _face: &Arc<RemotingState>,
    _ctx: &ConnCtx,
    req: RemotingCommand,
) -> Reply {
    let h = match GetRouteInfoRequestHeader::from_ext_fields(&req.ext_fields) {
        Ok(h) => h,
        Err(e) => return reply_error(&req, response_code::SYSTEM_ERROR, e.to_string()),
    };
    match core.routes.route(h.topic) {
        Some(route) => json_reply(&req, &route),
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
    core: &Arc<Core>,
    _face: &Arc<RemotingState>,
    _ctx: &ConnCtx,
    req: RemotingCommand,
) -> Reply {
    json_reply(&req, &core.routes.cluster_info())
}

/// `GET_ALL_TOPIC_LIST_FROM_NAMESERVER` (206).
pub(crate) fn get_all_topic_list(
    core: &Arc<Core>,
    _face: &Arc<RemotingState>,
    _ctx: &ConnCtx,
    req: RemotingCommand,
) -> Reply {
    json_reply(&req, &TopicList { topic_list: core.routes.topic_list(), broker_addr: None })
}

/// `REGISTER_BROKER` (103): a broker (baiji or RocketMQ) joins this name server.
pub(crate) fn register_broker(
    core: &Arc<Core>,
    _face: &Arc<RemotingState>,
    ctx: &ConnCtx,
    req: RemotingCommand,
) -> Reply {
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
    let registered = core.routes.register(Registration {
        cluster: h.cluster_name.to_string(),
        broker_name: h.broker_name.to_string(),
        broker_id,
        addr: h.broker_addr.to_string(),
        topics,
        conn: Some(ctx.id),
        replace_topics: false,
    });
    let new = match registered {
        Ok(new) => new,
        Err(e @ RouteError::OwnBroker(..)) => {
            return reply_error(&req, response_code::SYSTEM_ERROR, e.to_string())
        }
        Err(e) => {
            tracing::warn!(broker = %h.broker_name, addr = %h.broker_addr, error = %e, "broker registration refused");
            return reply_error(&req, response_code::INVALID_PARAMETER, e.to_string());
        }
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
pub(crate) fn unregister_broker(
    core: &Arc<Core>,
    _face: &Arc<RemotingState>,
    _ctx: &ConnCtx,
    req: RemotingCommand,
) -> Reply {
    match UnregisterBrokerRequestHeader::from_ext_fields(&req.ext_fields) {
        Ok(h) => {
            if core.routes.unregister(h.broker_name, u64::try_from(h.broker_id).unwrap_or(0)) {
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
    core: &Arc<Core>,
    _face: &Arc<RemotingState>,
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
    match core.routes.register_topic(&topic, &route.queue_datas) {
        Ok(true) => {}
        Ok(false) => {
            tracing::warn!(%topic, queues = ?route.queue_datas, "topic registration names an unregistered broker; ignored");
        }
        Err(e) => return reply_error(&req, response_code::INVALID_PARAMETER, e.to_string()),
    }
    Reply::now(ok(&req, ExtFields::new()))
}

/// `DELETE_TOPIC_IN_NAMESRV` (216): `mqadmin deleteTopic` removes a topic from the routes, of
/// every broker or of those of `clusterName`.
pub(crate) fn delete_topic_in_namesrv(
    core: &Arc<Core>,
    _face: &Arc<RemotingState>,
    _ctx: &ConnCtx,
    req: RemotingCommand,
) -> Reply {
    match req.ext_fields.required_str("topic") {
        Ok(topic) => {
            let cluster = req.ext_fields.optional_str("clusterName").filter(|c| !c.is_empty());
            core.routes.delete_topic(topic, cluster);
            Reply::now(ok(&req, ExtFields::new()))
        }
        Err(e) => reply_error(&req, response_code::SYSTEM_ERROR, e.to_string()),
    }
}

/// `WIPE_WRITE_PERM_OF_BROKER` (205, `mqadmin wipeWritePerm`): header `brokerName`; the
/// broker's topics are routed read-only (see
/// [`RouteTable::wipe_write_perm`](crate::broker::core::routes::RouteTable::wipe_write_perm)),
/// answered with response header `wipeTopicCount`.
pub(crate) fn wipe_write_perm_of_broker(
    core: &Arc<Core>,
    _face: &Arc<RemotingState>,
    _ctx: &ConnCtx,
    req: RemotingCommand,
) -> Reply {
    change_write_perm(req, "wipeTopicCount", "wiped", |b| core.routes.wipe_write_perm(b))
}

/// `ADD_WRITE_PERM_OF_BROKER` (327, `mqadmin addWritePerm`): header `brokerName`; the
/// broker's topics are routed writable again, answered with response header `addTopicCount`.
pub(crate) fn add_write_perm_of_broker(
    core: &Arc<Core>,
    _face: &Arc<RemotingState>,
    _ctx: &ConnCtx,
    req: RemotingCommand,
) -> Reply {
    change_write_perm(req, "addTopicCount", "added", |b| core.routes.add_write_perm(b))
}

/// The drain pair's one shape: `change` applied to the header's `brokerName`, the number of
/// topics it changed answered under `count_key`.
fn change_write_perm(
    req: RemotingCommand,
    count_key: &str,
    done: &str,
    change: impl FnOnce(&str) -> usize,
) -> Reply {
    match req.ext_fields.required_str("brokerName") {
        Ok(broker) => {
            let n = change(broker);
            tracing::info!(%broker, topics = n, "write permission of broker {done}");
            let mut h = ExtFields::new();
            h.insert_i64(count_key, i64::try_from(n).unwrap_or(i64::MAX));
            Reply::now(ok(&req, h))
        }
        Err(e) => reply_error(&req, response_code::SYSTEM_ERROR, e.to_string()),
    }
}

/// `GET_TOPICS_BY_CLUSTER` (224): header `cluster`; body a `TopicList` of the topics of that
/// cluster's brokers.
pub(crate) fn get_topics_by_cluster(
    core: &Arc<Core>,
    _face: &Arc<RemotingState>,
    _ctx: &ConnCtx,
    req: RemotingCommand,
) -> Reply {
    match req.ext_fields.required_str("cluster") {
        Ok(cluster) => json_reply(
            &req,
            &TopicList { topic_list: core.routes.topics_by_cluster(cluster), broker_addr: None },
        ),
        Err(e) => reply_error(&req, response_code::SYSTEM_ERROR, e.to_string()),
    }
}

/// `GET_SYSTEM_TOPIC_LIST_FROM_NS` (304, the dashboard's topic page): body a `TopicList` of
/// the cluster and broker names, with `brokerAddr` of one broker (see
/// [`RouteTable::system_topic_list`](crate::broker::core::routes::RouteTable::system_topic_list)).
pub(crate) fn get_system_topic_list(
    core: &Arc<Core>,
    _face: &Arc<RemotingState>,
    _ctx: &ConnCtx,
    req: RemotingCommand,
) -> Reply {
    json_reply(&req, &core.routes.system_topic_list())
}
