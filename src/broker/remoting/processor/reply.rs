//! Request/reply (`DefaultMQProducer.request()`, Java and Go): `SEND_REPLY_MESSAGE` (324, V1
//! header, what Go sends) and `SEND_REPLY_MESSAGE_V2` (325, what Java sends), as RocketMQ's
//! `ReplyMessageProcessor` serves them.
//!
//! A consumer answers a request with a reply message (`MessageUtil.createReplyMessage`:
//! topic `<cluster>_REPLY_TOPIC`, `MSG_TYPE=reply`, the request's `CORRELATION_ID` and
//! `REPLY_TO_CLIENT`, the requester's client id). The broker pushes it to the requester with
//! `PUSH_REPLY_MESSAGE_TO_CLIENT` (326) over the connection that client's producer heartbeat
//! came on (the core's [`producer_client_conn`](crate::broker::core::clients::ClientRegistry::producer_client_conn)),
//! waits for the requester's answer, and answers the replier `SUCCESS` when it took the reply,
//! `SYSTEM_ERROR` with RocketMQ's remark otherwise (no `REPLY_TO_CLIENT`, no connection of that
//! client, no answer in time). The reply is also stored in its topic (RocketMQ's
//! `storeReplyMessageEnable`, on by default), so a query finds it; a reply that cannot be
//! stored (the budget is full) is still pushed, as RocketMQ pushes it before it stores.

use std::time::Duration;

use crate::sync::Arc;

use super::send::{header, incoming, send_error};
use crate::broker::core::send::{store_message, SendError};
use crate::broker::core::Core;
use crate::broker::remoting::{ConnCtx, RemotingState, Reply};
use crate::remoting::code::{request_code, response_code};
use crate::remoting::header::{SendMessageRequestHeader, SendMessageResponseHeader, ToExtFields};
use crate::remoting::properties;
use crate::remoting::{ExtFields, RemotingCommand};
use crate::time::now_ms;

/// How long the requester has to take a reply (RocketMQ's `Broker2Client.callClient`: 10 s).
const PUSH_TIMEOUT: Duration = Duration::from_secs(10);

/// The property the broker stamps on a reply when it pushes it (`PUSH_REPLY_TIME`, ms).
const PUSH_REPLY_TIME: &str = "PUSH_REPLY_TIME";

/// `SEND_REPLY_MESSAGE` (324) and `SEND_REPLY_MESSAGE_V2` (325).
pub(crate) fn send_reply_message(
    core: &Arc<Core>,
    face: &Arc<RemotingState>,
    ctx: &ConnCtx,
    req: RemotingCommand,
) -> Reply {
    let h = match header(&req) {
        Ok(h) => h,
        Err(r) => return r,
    };
    let stored = match store(core, ctx, &req, &h) {
        Ok(s) => s,
        Err(r) => return r,
    };
    let answer = |code: i32, remark: Option<String>| {
        RemotingCommand::response_to(&req, code, remark).with_ext_fields(stored.to_ext_fields())
    };
    let Some(client) = properties::find(h.properties.as_bytes(), properties::REPLY_TO_CLIENT)
    else {
        tracing::warn!(peer = %ctx.peer, topic = h.topic, "a reply without REPLY_TO_CLIENT: nobody to push it to");
        let remark = format!("reply message properties[{}] is null", properties::REPLY_TO_CLIENT);
        return Reply::now(answer(response_code::SYSTEM_ERROR, Some(remark)));
    };
    let Some(conn) = core.clients.producer_client_conn(client) else {
        let remark = format!("push reply message fail, channel of <{client}> not found.");
        tracing::warn!(peer = %ctx.peer, %remark);
        return Reply::now(answer(response_code::SYSTEM_ERROR, Some(remark)));
    };
    // The requester answers later: the replier's answer waits in a task of its own. A one-way
    // reply needs no room for it; an answered one reserves it before the push goes out, so the
    // answer always finds room.
    let permit = if req.is_oneway() {
        None
    } else {
        match ctx.tx.clone().try_reserve_owned() {
            Ok(p) => Some(p),
            Err(_) => {
                let remark = "the broker cannot take more replies from this connection now".into();
                return Reply::now(answer(response_code::SYSTEM_BUSY, Some(remark)));
            }
        }
    };
    let push = push_request(core, ctx, &req, &h);
    let mut call = match face.call(conn, push) {
        Ok(call) => call,
        Err(e) => {
            let remark = format!("push reply message to <{client}> failed: {e}");
            tracing::warn!(peer = %ctx.peer, %remark);
            return Reply::now(answer(response_code::SYSTEM_ERROR, Some(remark)));
        }
    };
    let client = client.to_string();
    let peer = ctx.peer;
    let mut shutdown = ctx.shutdown.clone();
    let mut resp = answer(response_code::SUCCESS, None);
    tokio::spawn(async move {
        let result = tokio::select! {
            r = call.answer(PUSH_TIMEOUT) => r.map_err(|e| e.to_string()),
            _ = shutdown.changed() => Err("the broker is shutting down".to_string()),
        };
        match result {
            Ok(a) if a.code == response_code::SUCCESS => {}
            Ok(a) => {
                tracing::warn!(%peer, %client, code = a.code, remark = ?a.remark, "the requester refused a reply");
                resp.code = response_code::SYSTEM_ERROR;
                resp.remark = Some(format!("push reply message to <{client}> fail."));
            }
            Err(e) => {
                tracing::warn!(%peer, %client, error = %e, "a reply could not be pushed");
                resp.code = response_code::SYSTEM_ERROR;
                resp.remark = Some(format!("push reply message to <{client}> fail: {e}"));
            }
        }
        if let Some(permit) = permit {
            permit.send(resp);
        }
    });
    Reply::Nothing
}

/// Stores the reply in its topic; the answer's header. A reply the store cannot take (the
/// budget is full) is still pushed, with RocketMQ's placeholder header (`msgId` `0`, offset
/// 0); one that breaks a send rule (its topic, its queue, its size) is refused at once.
fn store(
    core: &Arc<Core>,
    ctx: &ConnCtx,
    req: &RemotingCommand,
    h: &SendMessageRequestHeader<'_>,
) -> Result<SendMessageResponseHeader, Reply> {
    let m = incoming(ctx, req, h, i32::MAX);
    match store_message(core, &m) {
        Ok(stored) => Ok(SendMessageResponseHeader {
            msg_id: stored.msg_id,
            queue_id: stored.queue_id as i32,
            queue_offset: stored.queue_offset as i64,
            transaction_id: None,
            batch_uniq_id: None,
            recall_handle: None,
        }),
        Err(e @ SendError::Store(_)) => {
            tracing::warn!(peer = %ctx.peer, topic = h.topic, error = %e, "a reply is pushed without being stored");
            Ok(SendMessageResponseHeader {
                msg_id: "0".into(),
                queue_id: h.queue_id.max(0),
                queue_offset: 0,
                transaction_id: None,
                batch_uniq_id: None,
                recall_handle: None,
            })
        }
        Err(e) => Err(send_error(req, &e)),
    }
}

/// The `PUSH_REPLY_MESSAGE_TO_CLIENT` request carrying the reply (RocketMQ's
/// `ReplyMessageRequestHeader`, every field the Java client requires, and the body as sent).
fn push_request(
    core: &Core,
    ctx: &ConnCtx,
    req: &RemotingCommand,
    h: &SendMessageRequestHeader<'_>,
) -> RemotingCommand {
    let now = now_ms().to_string();
    let props = crate::broker::core::delay::rewrite_properties(
        h.properties.as_bytes(),
        &[],
        &[(PUSH_REPLY_TIME, &now)],
    );
    let mut ext = ExtFields::new();
    ext.insert("producerGroup", h.producer_group);
    ext.insert("topic", h.topic);
    ext.insert("defaultTopic", h.default_topic);
    ext.insert_i64("defaultTopicQueueNums", i64::from(h.default_topic_queue_nums));
    ext.insert_i64("queueId", i64::from(h.queue_id));
    ext.insert_i64("sysFlag", i64::from(h.sys_flag));
    ext.insert_i64("bornTimestamp", h.born_timestamp);
    ext.insert_i64("flag", i64::from(h.flag));
    ext.insert("properties", String::from_utf8_lossy(&props).as_ref());
    ext.insert_i64("reconsumeTimes", i64::from(h.reconsume_times));
    ext.insert_bool("unitMode", h.unit_mode);
    // `host:port` without the leading `/` of Java's `SocketAddress.toString()`: the Java client
    // parses it back with `string2SocketAddress`, which then resolves a real address.
    ext.insert("bornHost", ctx.peer.to_string().as_str());
    ext.insert("storeHost", core.store_host.to_string().as_str());
    ext.insert("storeTimestamp", &now);
    RemotingCommand::request(request_code::PUSH_REPLY_MESSAGE_TO_CLIENT, 0)
        .with_ext_fields(ext)
        .with_body(req.body.clone())
}
