//! Producing: `SEND_MESSAGE` (V1 header), `SEND_MESSAGE_V2` (short names), one-way sends,
//! `SEND_BATCH_MESSAGE`, and topic auto-creation from `TBW102`.

use crate::sync::Arc;
use crate::sync::Ordering;

use super::{bad_header, retry, store_code};
use crate::broker::core::send::{
    check, store_batch, store_message, Batch, Incoming, QueueChoice, SendError, Stored, StoredBatch,
};
use crate::broker::core::topics::RETRY_PREFIX;
use crate::broker::core::transaction;
use crate::broker::core::Core;
use crate::broker::remoting::{ok, reply_error, ConnCtx, RemotingState, Reply};
use crate::remoting::code::response_code;
use crate::remoting::error::quote;
use crate::remoting::header::{
    SendHeaderVersion, SendMessageRequestHeader, SendMessageResponseHeader, ToExtFields,
};
use crate::remoting::message::{decode_batch, BatchEntry};
use crate::remoting::properties::{self, Routing, MAX_PROPERTIES_LEN};
use crate::remoting::RemotingCommand;

/// Most messages one batch may carry. The answer lists one 32-character msgId (plus a comma) per
/// message in one header field: 65,536 of them take about 2.1 MiB, so the answer to any batch
/// that is stored always fits a frame (a batch whose answer is dropped would be retried and
/// stored twice). A 4 MiB batch (RocketMQ's default maxMessageSize) of 64-byte messages fits.
const MAX_BATCH_ENTRIES: usize = 65_536;

/// `SEND_MESSAGE` (10) and `SEND_MESSAGE_V2` (310), answered or one-way.
pub(crate) fn send_message(
    core: &Arc<Core>,
    face: &Arc<RemotingState>,
    ctx: &ConnCtx,
    req: RemotingCommand,
) -> Reply {
    #[cfg(feature = "replicas")]
    if let Some(replica) = core.replica() {
        return through_set(core, face, ctx, req, Arc::clone(replica), false);
    }
    let reply = send_one(core, ctx, &req);
    count_oneway_rejection(face, &req, &reply);
    reply
}

/// `SEND_BATCH_MESSAGE` (320).
pub(crate) fn send_batch_message(
    core: &Arc<Core>,
    face: &Arc<RemotingState>,
    ctx: &ConnCtx,
    req: RemotingCommand,
) -> Reply {
    #[cfg(feature = "replicas")]
    if let Some(replica) = core.replica() {
        return through_set(core, face, ctx, req, Arc::clone(replica), true);
    }
    let reply = send_batch(core, ctx, &req);
    count_oneway_rejection(face, &req, &reply);
    reply
}

/// A send on a replica of a broker set: answered by a task once the set holds it (or refused
/// it), so the connection goes on reading meanwhile.
#[cfg(feature = "replicas")]
fn through_set(
    core: &Arc<Core>,
    face: &Arc<RemotingState>,
    ctx: &ConnCtx,
    req: RemotingCommand,
    replica: Arc<crate::broker::core::replica::Replica>,
    batch: bool,
) -> Reply {
    let (core, face, tx) = (Arc::clone(core), Arc::clone(face), ctx.tx.clone());
    let ctx = ctx.clone();
    tokio::spawn(async move {
        let reply = if batch {
            match batch_entries(&core, &req) {
                Ok((h, entries)) => {
                    let r = replica.send_batch(&core, &batch_of(&ctx, &h, &entries)).await;
                    answer_batch(&req, r)
                }
                Err(r) => r,
            }
        } else {
            match one_header(&core, &ctx, &req) {
                Ok((h, max)) => {
                    answer_one(&req, replica.send(&core, &incoming(&ctx, &req, &h, max)).await)
                }
                Err(r) => r,
            }
        };
        count_oneway_rejection(&face, &req, &reply);
        if let Reply::Now(resp) = reply {
            if !req.is_oneway() {
                // The connection is gone when this fails: nobody waits for the answer.
                let _ = tx.send(*resp).await;
            }
        }
    });
    Reply::Nothing
}

/// A one-way send that was refused cannot be told so: count it, so nothing disappears
/// uncounted. (A send refused for lack of memory is counted by the core, once.)
fn count_oneway_rejection(face: &RemotingState, req: &RemotingCommand, reply: &Reply) {
    if let Reply::Now(resp) = reply {
        if req.is_oneway() && resp.code != response_code::SUCCESS {
            face.counters.oneway_rejected.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(code = resp.code, remark = ?resp.remark, "one-way send refused");
        }
    }
}

/// The send header of `req`, V1 or V2 as its code says (or, for a code that does not say, as
/// its fields show).
pub(super) fn header<'a>(req: &'a RemotingCommand) -> Result<SendMessageRequestHeader<'a>, Reply> {
    let version = SendHeaderVersion::for_request_code(req.code)
        .unwrap_or_else(|| SendHeaderVersion::detect(&req.ext_fields));
    SendMessageRequestHeader::decode(&req.ext_fields, version).map_err(|e| bad_header(req, &e))
}

/// The core's view of a single send (or reply) of `req` with header `h`, its properties
/// parsed once for routing.
pub(super) fn incoming<'a>(
    ctx: &ConnCtx,
    req: &'a RemotingCommand,
    h: &SendMessageRequestHeader<'a>,
    max_reconsume_times: i32,
) -> Incoming<'a> {
    Incoming {
        topic: h.topic,
        default_topic: h.default_topic,
        default_queues: h.default_topic_queue_nums,
        queue: QueueChoice::Asked(h.queue_id),
        flag: h.flag,
        sys_flag: h.sys_flag,
        born_timestamp: h.born_timestamp,
        born_host: ctx.peer,
        reconsume_times: h.reconsume_times,
        max_reconsume_times,
        body: &req.body,
        properties: h.properties.as_bytes(),
        routing: Routing::parse(h.properties.as_bytes()),
    }
}

fn send_one(core: &Arc<Core>, ctx: &ConnCtx, req: &RemotingCommand) -> Reply {
    let (h, max_reconsume_times) = match one_header(core, ctx, req) {
        Ok(h) => h,
        Err(r) => return r,
    };
    answer_one(req, store_message(core, &incoming(ctx, req, &h, max_reconsume_times)))
}

/// The header of a single send, after noting a request/reply requester, with the most times
/// a retry may be consumed.
fn one_header<'a>(
    core: &Arc<Core>,
    ctx: &ConnCtx,
    req: &'a RemotingCommand,
) -> Result<(SendMessageRequestHeader<'a>, i32), Reply> {
    let h = header(req)?;
    note_requester(core, ctx, h.properties);
    let max_reconsume_times = if h.topic.starts_with(RETRY_PREFIX) {
        retry::max_reconsume(req, h.max_reconsume_times)
    } else {
        i32::MAX
    };
    Ok((h, max_reconsume_times))
}

/// The answer to a single send.
fn answer_one(req: &RemotingCommand, r: Result<Stored, SendError>) -> Reply {
    match r {
        Ok(stored) => {
            let resp = SendMessageResponseHeader {
                msg_id: stored.msg_id,
                queue_id: stored.queue_id as i32,
                queue_offset: stored.queue_offset as i64,
                transaction_id: stored.half.then_some(stored.uniq_key),
                batch_uniq_id: None,
                recall_handle: stored.recall_handle,
            };
            Reply::now(ok(req, resp.to_ext_fields()))
        }
        Err(e) => send_error(req, &e),
    }
}

/// A request message of request/reply (`REPLY_TO_CLIENT` set, and not itself a reply) tells
/// which client is on this connection: its replies are pushed here.
fn note_requester(core: &Core, ctx: &ConnCtx, props: &str) {
    let props = props.as_bytes();
    if let Some(client) = properties::find(props, properties::REPLY_TO_CLIENT) {
        if properties::find(props, properties::MSG_TYPE) != Some("reply") {
            core.clients.note_requester(ctx.id, client);
        }
    }
}

fn send_batch(core: &Arc<Core>, ctx: &ConnCtx, req: &RemotingCommand) -> Reply {
    let (h, entries) = match batch_entries(core, req) {
        Ok(b) => b,
        Err(r) => return r,
    };
    answer_batch(req, store_batch(core, &batch_of(ctx, &h, &entries)))
}

/// The header and messages of a batch, checked as a whole.
fn batch_entries<'a>(
    core: &Arc<Core>,
    req: &'a RemotingCommand,
) -> Result<(SendMessageRequestHeader<'a>, Vec<BatchEntry>), Reply> {
    let h = header(req)?;
    if h.topic.starts_with(RETRY_PREFIX) {
        return Err(reply_error(
            req,
            response_code::MESSAGE_ILLEGAL,
            format!("batch request does not support retry group {}", quote(h.topic)),
        ));
    }
    if h.topic.len() > 127 {
        return Err(reply_error(
            req,
            response_code::MESSAGE_ILLEGAL,
            format!("message topic length too long {}", h.topic.len()),
        ));
    }
    // RocketMQ checks the whole batch body, not each entry, against maxMessageSize; checking it
    // before decoding also bounds what decoding allocates.
    if let Err(e) = check(core, h.topic, req.body.len(), h.properties.len()) {
        return Err(send_error(req, &e));
    }
    if transaction::is_half(h.sys_flag, &Routing::parse(h.properties.as_bytes())) {
        return Err(reply_error(
            req,
            response_code::MESSAGE_ILLEGAL,
            "a batch cannot carry transactional (half) messages".into(),
        ));
    }
    let entries = match decode_batch(&req.body) {
        Ok(e) if !e.is_empty() => e,
        Ok(_) => {
            return Err(reply_error(
                req,
                response_code::MESSAGE_ILLEGAL,
                "the batch is empty".into(),
            ))
        }
        Err(e) => {
            return Err(reply_error(
                req,
                response_code::MESSAGE_ILLEGAL,
                format!("bad batch body: {e}"),
            ))
        }
    };
    if entries.len() > MAX_BATCH_ENTRIES {
        return Err(reply_error(
            req,
            response_code::MESSAGE_ILLEGAL,
            format!(
                "the batch has {} messages; at most {MAX_BATCH_ENTRIES} are accepted",
                entries.len()
            ),
        ));
    }
    if let Some(e) = entries.iter().find(|e| e.properties.len() > MAX_PROPERTIES_LEN) {
        return Err(reply_error(
            req,
            response_code::MESSAGE_ILLEGAL,
            format!(
                "the message properties size {} exceeds the maximum {MAX_PROPERTIES_LEN} bytes",
                e.properties.len()
            ),
        ));
    }
    Ok((h, entries))
}

/// The core's view of a batch.
fn batch_of<'a>(
    ctx: &ConnCtx,
    h: &SendMessageRequestHeader<'a>,
    entries: &'a [BatchEntry],
) -> Batch<'a> {
    Batch {
        topic: h.topic,
        default_topic: h.default_topic,
        default_queues: h.default_topic_queue_nums,
        queue: h.queue_id,
        sys_flag: h.sys_flag,
        born_timestamp: h.born_timestamp,
        born_host: ctx.peer,
        reconsume_times: h.reconsume_times,
        entries,
    }
}

/// The answer to a batch.
fn answer_batch(req: &RemotingCommand, r: Result<StoredBatch, SendError>) -> Reply {
    match r {
        Ok(stored) => {
            let resp = SendMessageResponseHeader {
                msg_id: stored.msg_ids.join(","),
                queue_id: stored.queue_id as i32,
                queue_offset: stored.first_offset as i64,
                transaction_id: None,
                batch_uniq_id: None,
                recall_handle: None,
            };
            Reply::now(ok(req, resp.to_ext_fields()))
        }
        Err(e) => send_error(req, &e),
    }
}

/// The remoting answer to a refused send: RocketMQ's response code, and the core's remark.
pub(crate) fn send_error(req: &RemotingCommand, e: &SendError) -> Reply {
    let code = match e {
        SendError::InvalidTopic(_) | SendError::BadQueue { .. } => response_code::SYSTEM_ERROR,
        SendError::Forbidden(_) => response_code::NO_PERMISSION,
        SendError::BodyTooLarge { .. }
        | SendError::PropertiesTooLarge(_)
        | SendError::NoProducerGroup
        | SendError::IllegalTimer(_)
        | SendError::Record(_) => response_code::MESSAGE_ILLEGAL,
        SendError::UnknownTopic(_) => response_code::TOPIC_NOT_EXIST,
        SendError::Store(e) => store_code(e),
        SendError::Unavailable(_) => response_code::SERVICE_NOT_AVAILABLE,
    };
    reply_error(req, code, e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::StoreError;

    #[test]
    fn given_send_refusals_when_answering_should_use_rocketmqs_codes() {
        let req = RemotingCommand::request(crate::remoting::code::request_code::SEND_MESSAGE, 7);
        let code = |e: SendError| match send_error(&req, &e) {
            Reply::Now(r) => (r.code, r.remark.unwrap_or_default()),
            Reply::Nothing => (0, String::new()),
        };
        let full = StoreError::Full { used: 9, budget: 10 };
        let (c, remark) = code(SendError::Store(full));
        assert_eq!(c, response_code::SYSTEM_BUSY, "a full budget is SYSTEM_BUSY: clients retry");
        assert!(remark.starts_with("[REJECT]system busy"), "RocketMQ's wording: {remark}");
        assert_eq!(code(SendError::UnknownTopic("T".into())).0, response_code::TOPIC_NOT_EXIST);
        assert_eq!(code(SendError::Forbidden("T".into())).0, response_code::NO_PERMISSION);
        let big = SendError::BodyTooLarge { size: 2, max: 1 };
        assert_eq!(
            code(big),
            (
                response_code::MESSAGE_ILLEGAL,
                "the message body size 2 exceeds the maximum 1 bytes".into()
            )
        );
    }
}
