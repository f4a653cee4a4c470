//! Orderly consumption: `LOCK_BATCH_MQ`, `UNLOCK_BATCH_MQ`.

use std::sync::Arc;

use crate::broker::{ok, reply_error, ConnCtx, Reply, Shared};
use crate::remoting::body::{JsonBody, LockBatchRequestBody, LockBatchResponseBody};
use crate::remoting::code::response_code;
use crate::remoting::{ExtFields, RemotingCommand};

fn body(req: &RemotingCommand) -> Result<LockBatchRequestBody, Reply> {
    LockBatchRequestBody::from_json_slice(&req.body)
        .map_err(|e| reply_error(req, response_code::SYSTEM_ERROR, format!("bad lock body: {e}")))
}

/// `LOCK_BATCH_MQ` (41): answers the subset of the queues now locked by the client.
pub(crate) fn lock_batch_mq(s: &Arc<Shared>, _ctx: &ConnCtx, req: RemotingCommand) -> Reply {
    let b = match body(&req) {
        Ok(b) => b,
        Err(r) => return r,
    };
    let granted = s.locks.lock(&b.consumer_group, &b.client_id, &b.mq_set);
    match (LockBatchResponseBody { lock_ok_mq_set: granted }).to_json_bytes() {
        Ok(body) => Reply::now(ok(&req, ExtFields::new()).with_body(body)),
        Err(e) => reply_error(&req, response_code::SYSTEM_ERROR, e.to_string()),
    }
}

/// `UNLOCK_BATCH_MQ` (42).
pub(crate) fn unlock_batch_mq(s: &Arc<Shared>, _ctx: &ConnCtx, req: RemotingCommand) -> Reply {
    let b = match body(&req) {
        Ok(b) => b,
        Err(r) => return r,
    };
    s.locks.unlock(&b.consumer_group, &b.client_id, &b.mq_set);
    Reply::now(ok(&req, ExtFields::new()))
}
