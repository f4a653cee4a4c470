//! `RECALL_MESSAGE` (370, RocketMQ 5.3.2): recall a timer message before it is due, answered
//! as `RecallMessageProcessor` answers ([`core::recall`](crate::broker::core::recall)).

use crate::sync::Arc;

use super::bad_header;
use crate::broker::core::recall::{recall, RecallError};
use crate::broker::core::Core;
use crate::broker::remoting::{ok, reply_error, ConnCtx, RemotingState, Reply};
use crate::remoting::code::response_code;
use crate::remoting::header::{
    FromExtFields, RecallMessageRequestHeader, RecallMessageResponseHeader, ToExtFields,
    DEFAULT_MSG_REGION,
};
use crate::remoting::RemotingCommand;

/// `RECALL_MESSAGE` (370): `SUCCESS` with the handle's `msgId`, or RocketMQ's refusal.
pub(crate) fn recall_message(
    core: &Arc<Core>,
    _face: &Arc<RemotingState>,
    ctx: &ConnCtx,
    req: RemotingCommand,
) -> Reply {
    let h = match RecallMessageRequestHeader::from_ext_fields(&req.ext_fields) {
        Ok(h) => h,
        Err(e) => return bad_header(&req, &e),
    };
    match recall(core, h.topic, h.recall_handle) {
        Ok(r) => {
            if !r.found {
                tracing::debug!(topic = h.topic, msg_id = %r.msg_id, peer = %ctx.peer, "recall of no waiting timer message");
            }
            let mut ext = RecallMessageResponseHeader { msg_id: r.msg_id }.to_ext_fields();
            ext.insert("MSG_REGION", DEFAULT_MSG_REGION);
            Reply::now(ok(&req, ext))
        }
        Err(e) => reply_error(&req, code(&e), e.to_string()),
    }
}

/// RocketMQ's response code of a refused recall.
fn code(e: &RecallError) -> i32 {
    match e {
        RecallError::UnknownTopic(_) => response_code::TOPIC_NOT_EXIST,
        RecallError::InvalidHandle
        | RecallError::TopicMismatch
        | RecallError::OtherBroker
        | RecallError::TimestampInvalid => response_code::ILLEGAL_OPERATION,
    }
}
