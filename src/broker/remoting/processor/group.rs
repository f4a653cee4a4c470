//! Subscription groups and offset resets: `UPDATE_AND_CREATE_SUBSCRIPTIONGROUP` (200) and its
//! list form (225),
//! `GET_ALL_SUBSCRIPTIONGROUP_CONFIG` (201), `DELETE_SUBSCRIPTIONGROUP` (207) and its list
//! form (5003),
//! `GET_SUBSCRIPTIONGROUP_CONFIG` (352) and `INVOKE_BROKER_TO_RESET_OFFSET` (222), which moves
//! the group's committed offsets and tells its running clients with
//! `RESET_CONSUMER_CLIENT_OFFSET` (220), as RocketMQ's `Broker2Client.resetOffset` does.
//!
//! A subscription group's config is kept as the JSON object the admin sent (RocketMQ's
//! `SubscriptionGroupConfig`, whatever version wrote it: its fields only, each of its type, at
//! most 16 KiB, bounded in number and in total) and given back as it came; baiji itself needs
//! little of it: a group exists once a heartbeat names it.

use crate::sync::Arc;

use super::{bad_body, bad_header};
use crate::broker::core::groups::{parse_config, parse_config_value};
use crate::broker::core::topics::is_internal_group;
use crate::broker::core::Core;
use crate::broker::remoting::{ok, reply_error, ConnCtx, RemotingState, Reply};
use crate::remoting::body::{
    DeleteSubscriptionGroupListRequestBody, JsonBody, MessageQueue, ResetOffsetBody,
    SubscriptionGroupList,
};
use crate::remoting::code::{request_code, response_code};
use crate::remoting::{ExtFields, RemotingCommand};

/// `UPDATE_AND_CREATE_SUBSCRIPTIONGROUP` (200): the body is a `SubscriptionGroupConfig`.
pub(crate) fn update_and_create_subscription_group(
    core: &Arc<Core>,
    _face: &Arc<RemotingState>,
    _ctx: &ConnCtx,
    req: RemotingCommand,
) -> Reply {
    let (name, config) = match parse_config(&req.body) {
        Ok(c) => c,
        Err(e) => return reply_error(&req, response_code::SYSTEM_ERROR, e.to_string()),
    };
    #[cfg(feature = "replicas")]
    if let Some(replica) = core.replica() {
        let size = req.body.len();
        return put_through_set(replica, _ctx, req, vec![(name, config, size)]);
    }
    if let Err(e) = core.put_group_config(name, config, req.body.len()) {
        return reply_error(&req, response_code::SYSTEM_ERROR, e.to_string());
    }
    Reply::now(ok(&req, Default::default()))
}

/// Group configs put through a broker set: answered once the set holds them (every replica
/// puts them alike).
#[cfg(feature = "replicas")]
fn put_through_set(
    replica: &Arc<crate::broker::core::replica::Replica>,
    ctx: &ConnCtx,
    req: RemotingCommand,
    configs: Vec<(String, serde_json::Map<String, serde_json::Value>, usize)>,
) -> Reply {
    let (replica, tx) = (Arc::clone(replica), ctx.tx.clone());
    tokio::spawn(async move {
        let reply = match replica.put_groups(configs).await {
            Ok(()) => ok(&req, Default::default()),
            Err(e) => {
                RemotingCommand::response_to(&req, response_code::SYSTEM_ERROR, Some(e.to_string()))
            }
        };
        if !req.is_oneway() {
            // The connection is gone when this fails: nobody waits for the answer.
            let _ = tx.send(reply).await;
        }
    });
    Reply::Nothing
}

/// `UPDATE_AND_CREATE_SUBSCRIPTIONGROUP_LIST` (225, `mqadmin updateSubGroupList`): body
/// `{"groupConfigList":[SubscriptionGroupConfig…]}`, each config checked and bounded as
/// `UPDATE_AND_CREATE_SUBSCRIPTIONGROUP` checks its body; all are stored or none.
pub(crate) fn update_and_create_subscription_group_list(
    core: &Arc<Core>,
    _face: &Arc<RemotingState>,
    _ctx: &ConnCtx,
    req: RemotingCommand,
) -> Reply {
    let list = match SubscriptionGroupList::from_json_slice(&req.body) {
        Ok(l) => l,
        Err(e) => return bad_body(&req, "SubscriptionGroupList", e),
    };
    let mut configs = Vec::with_capacity(list.group_config_list.len());
    for value in &list.group_config_list {
        match parse_config_value(value) {
            Ok(c) => configs.push(c),
            Err(e) => return reply_error(&req, response_code::SYSTEM_ERROR, e.to_string()),
        }
    }
    #[cfg(feature = "replicas")]
    if let Some(replica) = core.replica() {
        return put_through_set(replica, _ctx, req, configs);
    }
    if let Err(e) = core.put_group_configs(configs) {
        return reply_error(&req, response_code::SYSTEM_ERROR, e.to_string());
    }
    Reply::now(ok(&req, Default::default()))
}

/// `GET_SUBSCRIPTIONGROUP_CONFIG` (352).
pub(crate) fn get_subscription_group_config(
    core: &Arc<Core>,
    _face: &Arc<RemotingState>,
    _ctx: &ConnCtx,
    req: RemotingCommand,
) -> Reply {
    let group = match req.ext_fields.required_str("group") {
        Ok(g) => g,
        Err(e) => return bad_header(&req, &e),
    };
    match core.groups.get(group) {
        Some(c) => match serde_json::to_vec(&c) {
            Ok(b) => Reply::now(ok(&req, Default::default()).with_body(b)),
            Err(e) => reply_error(&req, response_code::SYSTEM_ERROR, e.to_string()),
        },
        None => reply_error(
            &req,
            response_code::SUBSCRIPTION_GROUP_NOT_EXIST,
            format!("The consumer group {group} not exist"),
        ),
    }
}

/// `GET_ALL_SUBSCRIPTIONGROUP_CONFIG` (201): `{"subscriptionGroupTable":{...},"dataVersion":...}`.
pub(crate) fn get_all_subscription_group_config(
    core: &Arc<Core>,
    _face: &Arc<RemotingState>,
    _ctx: &ConnCtx,
    req: RemotingCommand,
) -> Reply {
    let table = core.groups.all();
    let body = serde_json::json!({
        "subscriptionGroupTable": table,
        "forbiddenTable": {},
        "dataVersion": core.topics.data_version(),
    });
    match serde_json::to_vec(&body) {
        Ok(b) => Reply::now(ok(&req, Default::default()).with_body(b)),
        Err(e) => reply_error(&req, response_code::SYSTEM_ERROR, e.to_string()),
    }
}

/// The remark refusing to delete `group` when it is a system group (`CID_RMQ_SYS_*`, as
/// RocketMQ's `MixAll.isSysConsumerGroup`): baiji's own tasks hold the delay, timer and half
/// queues with such groups, and deleting one (with `cleanOffset`) would release every waiting
/// message at once.
fn refuse_system_group(group: &str) -> Option<String> {
    (group.starts_with(SYS_GROUP_PREFIX) || is_internal_group(group)).then(|| {
        format!(
            "the consumer group {} is a system group of the broker; it cannot be deleted",
            crate::remoting::error::quote(group)
        )
    })
}

/// The prefix of RocketMQ's system consumer groups (`MixAll.CID_RMQ_SYS_PREFIX`).
const SYS_GROUP_PREFIX: &str = "CID_RMQ_SYS_";

/// Forgets `group`'s config; with `clean`, a group without running members also stops
/// holding messages (its offsets are forgotten). The caller has refused system groups
/// ([`refuse_system_group`]).
fn delete_group(core: &Core, group: &str, clean: bool) {
    core.remove_group_config(group);
    if clean && core.clients.consumer_ids(group).is_empty() {
        for topic in super::stats::topics_of_group(core, group) {
            core.store.unsubscribe(group, &topic);
        }
    }
}

/// `DELETE_SUBSCRIPTIONGROUP` (207): see [`delete_group`].
pub(crate) fn delete_subscription_group(
    core: &Arc<Core>,
    _face: &Arc<RemotingState>,
    _ctx: &ConnCtx,
    req: RemotingCommand,
) -> Reply {
    let group = match req.ext_fields.required_str("groupName") {
        Ok(g) => g,
        Err(e) => return bad_header(&req, &e),
    };
    let clean = match req.ext_fields.optional_bool("cleanOffset") {
        Ok(c) => c.unwrap_or(false),
        Err(e) => return bad_header(&req, &e),
    };
    if let Some(remark) = refuse_system_group(group) {
        return reply_error(&req, response_code::SYSTEM_ERROR, remark);
    }
    // On a broker set the other replicas would keep the config (and the offsets).
    if let Err(why) = core.unreplicated("group deletions are") {
        return reply_error(&req, response_code::SYSTEM_ERROR, why);
    }
    delete_group(core, group, clean);
    Reply::now(ok(&req, Default::default()))
}

/// `DELETE_SUBSCRIPTIONGROUP_LIST` (5003, what rocketmq-admin-cli's `deleteSubGroup` sends):
/// body `{"groupNameList":[…],"cleanOffset":…}`, each group as [`delete_group`].
pub(crate) fn delete_subscription_group_list(
    core: &Arc<Core>,
    _face: &Arc<RemotingState>,
    _ctx: &ConnCtx,
    req: RemotingCommand,
) -> Reply {
    let body = match DeleteSubscriptionGroupListRequestBody::from_json_slice(&req.body) {
        Ok(b) => b,
        Err(e) => return bad_body(&req, "DeleteSubscriptionGroupListRequestBody", e),
    };
    // All or nothing: a list naming a system group deletes none of them.
    if let Some(remark) = body.group_name_list.iter().find_map(|g| refuse_system_group(g)) {
        return reply_error(&req, response_code::SYSTEM_ERROR, remark);
    }
    if let Err(why) = core.unreplicated("group deletions are") {
        return reply_error(&req, response_code::SYSTEM_ERROR, why);
    }
    for group in &body.group_name_list {
        delete_group(core, group, body.clean_offset);
    }
    Reply::now(ok(&req, Default::default()))
}

/// `INVOKE_BROKER_TO_RESET_OFFSET` (222): per queue of the topic, the first offset stored at
/// or after `timestamp` (the end for -1); unless `isForce`, a queue whose committed offset is
/// already before that keeps it. The offsets are committed, sent to each running client of
/// the group (`RESET_CONSUMER_CLIENT_OFFSET`, one-way) and returned. Without a running client
/// nothing changes and the answer is `CONSUMER_NOT_ONLINE`, as RocketMQ's (admin tools then
/// commit the offsets themselves with `UPDATE_CONSUMER_OFFSET`).
pub(crate) fn invoke_broker_to_reset_offset(
    core: &Arc<Core>,
    face: &Arc<RemotingState>,
    _ctx: &ConnCtx,
    req: RemotingCommand,
) -> Reply {
    let ext = &req.ext_fields;
    let (topic, group, timestamp, force) = match (
        ext.required_str("topic"),
        ext.required_str("group"),
        ext.required_i64("timestamp"),
        ext.optional_bool("isForce"),
    ) {
        (Ok(t), Ok(g), Ok(ts), Ok(f)) => (t, g, ts, f.unwrap_or(false)),
        (Err(e), ..) | (_, Err(e), ..) | (_, _, Err(e), _) | (.., Err(e)) => {
            return bad_header(&req, &e)
        }
    };
    let Some(t) = core.store.topic(topic) else {
        return reply_error(&req, response_code::SYSTEM_ERROR, format!("topic[{topic}] not exist"));
    };
    let clients: Vec<_> =
        core.clients.member_conns(group).into_iter().filter_map(|c| face.channel(c)).collect();
    if clients.is_empty() {
        return reply_error(
            &req,
            response_code::CONSUMER_NOT_ONLINE,
            format!("Consumer not online, so can not reset offset, Group: {group} Topic: {topic} Timestamp: {timestamp}"),
        );
    }
    let mut body = ResetOffsetBody::default();
    for q in 0..t.queue_count() {
        let (_, max) = t.offsets(q).unwrap_or((0, 0));
        let at = if timestamp < 0 {
            max
        } else {
            core.store.offset_for_timestamp(t.as_ref(), q, timestamp as u64).unwrap_or(max)
        };
        let committed = core.store.committed(group, topic, q);
        let offset = match committed {
            Some(c) if !force && c <= at => c,
            _ => at,
        };
        if committed != Some(offset) {
            let _ = core.commit_offset(group, topic, q, offset);
        }
        let mq = MessageQueue {
            topic: topic.to_string(),
            broker_name: core.config.broker_name.clone(),
            queue_id: q as i32,
        };
        body.offset_table.push((mq, offset as i64));
    }
    let bytes = match body.to_json_bytes() {
        Ok(b) => b,
        Err(e) => return reply_error(&req, response_code::SYSTEM_ERROR, e.to_string()),
    };
    for tx in clients {
        let mut h = ExtFields::new();
        h.insert("topic", topic);
        h.insert("group", group);
        h.insert_i64("timestamp", timestamp);
        h.insert_bool("isForce", force);
        let cmd = RemotingCommand::oneway_request(
            request_code::RESET_CONSUMER_CLIENT_OFFSET,
            face.next_opaque(),
        )
        .with_ext_fields(h)
        .with_body(bytes.clone());
        // A client whose channel is full misses the reset; it still finds the committed
        // offsets when it next rebalances.
        let _ = tx.try_send(cmd);
    }
    Reply::now(ok(&req, Default::default()).with_body(bytes))
}
