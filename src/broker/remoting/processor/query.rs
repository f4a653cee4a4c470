//! Lookups: `VIEW_MESSAGE_BY_ID` (by commit-log offset, what offset msgIds decode to) and
//! `QUERY_MESSAGE` (by key or unique key). The in-memory store keeps no key index: a query
//! scans the topic's retained messages within the time range, which costs nothing on the
//! send path and is fast enough for an operator's lookup.

use crate::sync::Arc;

use crate::broker::core::topics;
use crate::broker::remoting::acl;
use crate::broker::security::acl::{Resource, SUB};

use bytes::{Bytes, BytesMut};

use super::bad_header;
use crate::broker::core::record::{self, split_physical_offset, Placement};
use crate::broker::core::Core;
use crate::broker::remoting::{ok, reply_error, ConnCtx, RemotingState, Reply};
use crate::remoting::code::response_code;
use crate::remoting::header::{
    FromExtFields, QueryMessageRequestHeader, QueryMessageResponseHeader, ToExtFields,
    ViewMessageRequestHeader,
};
use crate::remoting::properties;
use crate::remoting::RemotingCommand;
use crate::store::{Filter, StoredRef};

/// `VIEW_MESSAGE_BY_ID` (33).
pub(crate) fn view_message_by_id(
    core: &Arc<Core>,
    face: &Arc<RemotingState>,
    ctx: &ConnCtx,
    req: RemotingCommand,
) -> Reply {
    let h = match ViewMessageRequestHeader::from_ext_fields(&req.ext_fields) {
        Ok(h) => h,
        Err(e) => return bad_header(&req, &e),
    };
    let not_found = || {
        reply_error(
            &req,
            response_code::SYSTEM_ERROR,
            format!("can not find message by the offset: {}", h.offset),
        )
    };
    let Some((uid, queue, offset)) = split_physical_offset(h.offset) else { return not_found() };
    let Some(topic) = core.store.topic_by_uid(uid) else { return not_found() };
    // Under ACL, `SUB` on the message's topic (review-e77444b L3: any account could read any
    // topic's messages by enumerating offset ids); internal topics (undecided half messages,
    // waiting delays and timers) for admin accounts only.
    let name = topic.name();
    let internal = topics::is_internal_topic(name) || topics::is_system_topic(name);
    let needs = vec![(Resource::topic(std::borrow::Cow::Borrowed(name)), SUB)];
    if let Some(refused) = acl::check_found(face.acl.as_deref(), ctx, &req, needs, internal) {
        return refused;
    }
    match encoded_at(core, topic.as_ref(), uid, queue, offset) {
        Some((_, _, body)) => Reply::now(ok(&req, Default::default()).with_body(body)),
        None => not_found(),
    }
}

/// The message stored at `offset` of queue `queue` of `topic` (uid `uid`): its record, store
/// time, and its encoding as `VIEW_MESSAGE_BY_ID` answers it (RocketMQ's
/// `selectOneMessageByOffset` bytes); `None` when it is no longer stored.
pub(super) fn encoded_at(
    core: &Core,
    topic: &dyn crate::store::TopicStore,
    uid: u32,
    queue: u32,
    offset: u64,
) -> Option<(Bytes, u64, Bytes)> {
    let (rec, ts) = core.store.get(topic, queue, offset)?;
    let at = Placement {
        topic: topic.name(),
        topic_uid: uid,
        queue,
        offset,
        store_timestamp: ts,
        store_host: core.store_host,
    };
    let mut body = BytesMut::new();
    match record::write_out(&rec, &at, &core.cluster_property, &mut body) {
        Ok(n) if n > 0 => Some((rec, ts, body.freeze())),
        _ => None,
    }
}

/// `QUERY_MESSAGE` (12).
pub(crate) fn query_message(
    core: &Arc<Core>,
    _face: &Arc<RemotingState>,
    _ctx: &ConnCtx,
    req: RemotingCommand,
) -> Reply {
    let h = match QueryMessageRequestHeader::from_ext_fields(&req.ext_fields) {
        Ok(h) => h,
        Err(e) => return bad_header(&req, &e),
    };
    let not_found = |why: &str| reply_error(&req, response_code::QUERY_NOT_FOUND, why.to_string());
    let Some(topic) = core.store.topic(h.topic) else {
        return not_found("can not find message, the topic does not exist");
    };
    let max = usize::try_from(h.max_num).unwrap_or(0).clamp(1, 64);
    let begin = u64::try_from(h.begin_timestamp).unwrap_or(0);
    let end = u64::try_from(h.end_timestamp).ok().filter(|e| *e > 0).unwrap_or(u64::MAX);
    let mut body = BytesMut::new();
    let mut found = 0usize;
    for queue in 0..topic.queue_count() {
        let Some(mut from) = core.store.offset_for_timestamp(topic.as_ref(), queue, begin) else {
            continue;
        };
        loop {
            let mut past_end = false;
            let mut visit = |m: StoredRef<'_>| {
                if m.store_timestamp > end {
                    past_end = true;
                    return false;
                }
                if found < max && matches_key(m.record, h.key, h.unique_key_query) {
                    let at = Placement {
                        topic: topic.name(),
                        topic_uid: topic.uid(),
                        queue,
                        offset: m.offset,
                        store_timestamp: m.store_timestamp,
                        store_host: core.store_host,
                    };
                    if let Ok(n) =
                        record::write_out(m.record, &at, &core.cluster_property, &mut body)
                    {
                        found += usize::from(n > 0);
                    }
                }
                true
            };
            let Ok(out) = topic.read(queue, from, 1024, &Filter::All, &mut visit) else { break };
            if past_end || out.found == 0 || found >= max || out.next_offset <= from {
                break;
            }
            from = out.next_offset;
        }
    }
    if found == 0 {
        return not_found("can not find message, maybe time range not correct");
    }
    let resp = QueryMessageResponseHeader {
        index_last_update_timestamp: crate::time::now_ms() as i64,
        index_last_update_phyoffset: 0,
    };
    Reply::now(ok(&req, resp.to_ext_fields()).with_body(Bytes::from(body)))
}

fn matches_key(rec: &Bytes, key: &str, unique_only: bool) -> bool {
    let Some(d) = record::decode(rec) else { return false };
    if properties::find(d.properties, properties::UNIQ_KEY) == Some(key) {
        return true;
    }
    !unique_only && properties::keys(d.properties).any(|k| k == key)
}
