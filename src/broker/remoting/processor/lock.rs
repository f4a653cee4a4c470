//! Orderly consumption: `LOCK_BATCH_MQ`, `UNLOCK_BATCH_MQ`.

use crate::sync::Arc;

use super::MAX_GROUP_LEN;
use crate::broker::core::locks::MAX_LOCK_BATCH;
use crate::broker::core::Core;
use crate::broker::remoting::{json_reply, ok, reply_error, ConnCtx, RemotingState, Reply};
use crate::remoting::body::{JsonBody, LockBatchRequestBody, LockBatchResponseBody, MessageQueue};
use crate::remoting::code::response_code;
use crate::remoting::{ExtFields, RemotingCommand};

/// The request body, within bounds: a group name of at most 255 characters and at most
/// [`MAX_LOCK_BATCH`] queues.
fn body(req: &RemotingCommand) -> Result<LockBatchRequestBody, Reply> {
    let b = LockBatchRequestBody::from_json_slice(&req.body).map_err(|e| {
        reply_error(req, response_code::SYSTEM_ERROR, format!("bad lock body: {e}"))
    })?;
    if b.mq_set.len() > MAX_LOCK_BATCH {
        return Err(reply_error(
            req,
            response_code::SYSTEM_ERROR,
            format!("mqSet names {} queues; at most {MAX_LOCK_BATCH} per request", b.mq_set.len()),
        ));
    }
    if b.consumer_group.chars().count() > MAX_GROUP_LEN {
        return Err(reply_error(
            req,
            response_code::SYSTEM_ERROR,
            format!("the consumer group name is longer than {MAX_GROUP_LEN} characters"),
        ));
    }
    Ok(b)
}

/// The queues of `mqs` this broker has: its broker name, an existing topic, a queue id in
/// range. Others cannot be consumed here, so they are never locked (and never stored).
fn own_queues(core: &Core, mqs: Vec<MessageQueue>) -> Vec<MessageQueue> {
    mqs.into_iter()
        .filter(|mq| {
            mq.broker_name == core.config.broker_name
                && core
                    .store
                    .topic(&mq.topic)
                    .is_some_and(|t| u32::try_from(mq.queue_id).is_ok_and(|q| q < t.queue_count()))
        })
        .collect()
}

/// `LOCK_BATCH_MQ` (41): answers the subset of the queues now locked by the client.
pub(crate) fn lock_batch_mq(
    core: &Arc<Core>,
    _face: &Arc<RemotingState>,
    _ctx: &ConnCtx,
    req: RemotingCommand,
) -> Reply {
    let b = match body(&req) {
        Ok(b) => b,
        Err(r) => return r,
    };
    let mqs = own_queues(core, b.mq_set);
    let granted = core.locks.lock(&b.consumer_group, &b.client_id, &mqs);
    json_reply(&req, &LockBatchResponseBody { lock_ok_mq_set: granted })
}

/// `UNLOCK_BATCH_MQ` (42).
pub(crate) fn unlock_batch_mq(
    core: &Arc<Core>,
    _face: &Arc<RemotingState>,
    _ctx: &ConnCtx,
    req: RemotingCommand,
) -> Reply {
    let b = match body(&req) {
        Ok(b) => b,
        Err(r) => return r,
    };
    core.locks.unlock(&b.consumer_group, &b.client_id, &b.mq_set);
    Reply::now(ok(&req, ExtFields::new()))
}
