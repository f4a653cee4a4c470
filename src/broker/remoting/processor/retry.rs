//! Retries and dead letters: `CONSUMER_SEND_MSG_BACK`, over the core's
//! [`send_back`](crate::broker::core::retry::send_back), which copies the message into
//! `%RETRY%<group>` (delayed) or `%DLQ%<group>`; this file reads the request and words the
//! answer.

use crate::sync::Arc;

use super::{bad_header, put_error};
use crate::broker::core::retry::{send_back, SendBack, SendBackError};
use crate::broker::core::Core;
use crate::broker::remoting::{ok, reply_error, ConnCtx, RemotingState, Reply};
use crate::remoting::code::response_code;
use crate::remoting::header::{ConsumerSendMsgBackRequestHeader, FromExtFields};
use crate::remoting::{ExtFields, RemotingCommand};

/// Clients older than this ignore `maxReconsumeTimes` (RocketMQ `V3_4_9`).
const VERSION_WITH_MAX_RECONSUME: i32 = 121;
/// The default maximum of a concurrently consuming group.
const DEFAULT_MAX_RECONSUME: i32 = 16;

/// The maximum reconsume times a request asks for (honoured from clients of `V3_4_9` on).
pub(crate) fn max_reconsume(req: &RemotingCommand, asked: Option<i32>) -> i32 {
    if req.version >= VERSION_WITH_MAX_RECONSUME {
        asked.unwrap_or(DEFAULT_MAX_RECONSUME)
    } else {
        DEFAULT_MAX_RECONSUME
    }
}

/// `CONSUMER_SEND_MSG_BACK` (36).
pub(crate) fn consumer_send_msg_back(
    core: &Arc<Core>,
    _face: &Arc<RemotingState>,
    _ctx: &ConnCtx,
    req: RemotingCommand,
) -> Reply {
    let h = match ConsumerSendMsgBackRequestHeader::from_ext_fields(&req.ext_fields) {
        Ok(h) => h,
        Err(e) => return bad_header(&req, &e),
    };
    let back = SendBack {
        offset: h.offset,
        group: h.group,
        delay_level: h.delay_level,
        max_reconsume_times: max_reconsume(&req, h.max_reconsume_times),
    };
    let result = send_back(core, &back);
    match result {
        Ok(()) => Reply::now(ok(&req, ExtFields::new())),
        Err(SendBackError::Lost) => reply_error(
            &req,
            response_code::SYSTEM_ERROR,
            format!("look message by offset failed, the offset is {}", h.offset),
        ),
        Err(SendBackError::Put(e)) => put_error(&req, &e),
    }
}
