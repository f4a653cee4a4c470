//! Client management: `HEART_BEAT`, `UNREGISTER_CLIENT`, `GET_CONSUMER_LIST_BY_GROUP`,
//! `CHECK_CLIENT_CONFIG`.

use crate::sync::Arc;

use super::{bad_header, MAX_GROUP_LEN};
use crate::broker::core::groups::valid_name;
use crate::broker::core::topics::{perm, RETRY_PREFIX};
use crate::broker::core::Core;
use crate::broker::remoting::{json_reply, ok, reply_error, ConnCtx, RemotingState, Reply};
use crate::remoting::body::{
    CheckClientConfigBody, ConsumerListBody, ExpressionType, HeartbeatData, JsonBody, TopicConfig,
};
use crate::remoting::code::response_code;
use crate::remoting::error::quote;
use crate::remoting::header::{
    FromExtFields, GetConsumerListByGroupRequestHeader, UnregisterClientRequestHeader,
};
use crate::remoting::{ExtFields, RemotingCommand};

/// Most producers, consumers and subscriptions, all together, one heartbeat may carry.
pub(crate) const MAX_HEARTBEAT_ENTRIES: usize = 4096;

/// Refuses a heartbeat beyond the bounds: too many entries, a blank or over-long group name,
/// a subscription whose topic is not a valid topic name (such as `{}`, which has none).
fn check_heartbeat(hb: &HeartbeatData) -> Result<(), String> {
    let entries = hb
        .consumer_data_set
        .iter()
        .fold(hb.producer_data_set.len().saturating_add(hb.consumer_data_set.len()), |n, c| {
            n.saturating_add(c.subscription_data_set.len())
        });
    if entries > MAX_HEARTBEAT_ENTRIES {
        return Err(format!(
            "a heartbeat carries at most {MAX_HEARTBEAT_ENTRIES} producers, consumers and subscriptions; this one has {entries}"
        ));
    }
    let bad_name = |g: &str| !valid_name(g);
    if hb.producer_data_set.iter().any(|p| bad_name(&p.group_name)) {
        return Err(format!(
            "a producer group name is blank or longer than {MAX_GROUP_LEN} characters"
        ));
    }
    for c in &hb.consumer_data_set {
        if bad_name(&c.group_name) {
            return Err(format!(
                "a consumer group name is blank or longer than {MAX_GROUP_LEN} characters"
            ));
        }
        for sd in &c.subscription_data_set {
            crate::broker::core::topics::validate_topic(&sd.topic).map_err(|e| {
                format!("a subscription of group {} names no valid topic: {e}", c.group_name)
            })?;
        }
    }
    Ok(())
}

/// `HEART_BEAT` (34): registers producers, consumers and their subscriptions; creates each
/// consumer group's `%RETRY%<group>` topic.
pub(crate) fn heart_beat(
    core: &Arc<Core>,
    _face: &Arc<RemotingState>,
    ctx: &ConnCtx,
    req: RemotingCommand,
) -> Reply {
    let hb = match HeartbeatData::from_json_slice(&req.body) {
        Ok(hb) => hb,
        Err(e) => {
            return reply_error(
                &req,
                response_code::SYSTEM_ERROR,
                format!("bad heartbeat body: {e}"),
            )
        }
    };
    if let Err(why) = check_heartbeat(&hb) {
        return reply_error(&req, response_code::SYSTEM_ERROR, why);
    }
    for c in &hb.consumer_data_set {
        if c.group_name.is_empty() {
            continue;
        }
        let retry = format!("{RETRY_PREFIX}{}", c.group_name);
        if core.topics.get(&retry).is_none()
            && crate::broker::core::topics::validate_topic(&retry).is_ok()
        {
            let mut conf = TopicConfig::new(retry.clone(), 1, 1);
            conf.perm = perm::RW;
            if let Err(e) = core.create_topic(conf) {
                tracing::warn!(topic = %retry, error = %e, "cannot create the retry topic");
            }
        }
    }
    core.clients.note_client(ctx.id, req.language, req.version);
    core.clients.heartbeat(core, ctx.id, &hb);
    let mut ext = ExtFields::new();
    ext.insert("IS_SUPPORT_HEART_BEAT_V2", "false");
    Reply::now(ok(&req, ext))
}

/// `UNREGISTER_CLIENT` (35).
pub(crate) fn unregister_client(
    core: &Arc<Core>,
    _face: &Arc<RemotingState>,
    _ctx: &ConnCtx,
    req: RemotingCommand,
) -> Reply {
    let h = match UnregisterClientRequestHeader::from_ext_fields(&req.ext_fields) {
        Ok(h) => h,
        Err(e) => return bad_header(&req, &e),
    };
    core.clients.unregister(core, h.client_id, h.producer_group, h.consumer_group);
    Reply::now(ok(&req, ExtFields::new()))
}

/// `GET_CONSUMER_LIST_BY_GROUP` (38): every live member of the group, sorted.
pub(crate) fn get_consumer_list_by_group(
    core: &Arc<Core>,
    _face: &Arc<RemotingState>,
    _ctx: &ConnCtx,
    req: RemotingCommand,
) -> Reply {
    let h = match GetConsumerListByGroupRequestHeader::from_ext_fields(&req.ext_fields) {
        Ok(h) => h,
        Err(e) => return bad_header(&req, &e),
    };
    let ids = core.clients.consumer_ids(h.consumer_group);
    if ids.is_empty() {
        return reply_error(
            &req,
            response_code::SYSTEM_ERROR,
            format!("no consumer for this group, {}", quote(h.consumer_group)),
        );
    }
    json_reply(&req, &ConsumerListBody { consumer_id_list: ids })
}

/// `CHECK_CLIENT_CONFIG` (46): tag subscriptions always pass; an SQL92 expression is compiled
/// and refused with `SUBSCRIPTION_PARSE_FAILED` and the parse error as remark, as RocketMQ
/// (with `enablePropertyFilter`) answers; other expression types are not supported.
pub(crate) fn check_client_config(
    _core: &Arc<Core>,
    _face: &Arc<RemotingState>,
    _ctx: &ConnCtx,
    req: RemotingCommand,
) -> Reply {
    let body = match CheckClientConfigBody::from_json_slice(&req.body) {
        Ok(b) => b,
        Err(e) => return reply_error(&req, response_code::SYSTEM_ERROR, format!("bad body: {e}")),
    };
    let sub = &body.subscription_data;
    match &sub.expression_type {
        ExpressionType::Tag => Reply::now(ok(&req, ExtFields::new())),
        ExpressionType::Sql92 => match crate::broker::core::filter::compile(&sub.sub_string) {
            Ok(_) => Reply::now(ok(&req, ExtFields::new())),
            Err(e) => reply_error(&req, response_code::SUBSCRIPTION_PARSE_FAILED, e.to_string()),
        },
        other => reply_error(
            &req,
            response_code::SYSTEM_ERROR,
            format!("The broker does not support consumer to filter message by {}", other.as_str()),
        ),
    }
}
