//! Topic administration: `UPDATE_AND_CREATE_TOPIC`, `DELETE_TOPIC_IN_BROKER`,
//! `GET_ALL_TOPIC_CONFIG`.

use crate::sync::Arc;

use super::{bad_header, store_error};
use crate::broker::core::topics::{self, perm};
use crate::broker::core::Core;
use crate::broker::remoting::{json_reply, ok, reply_error, ConnCtx, RemotingState, Reply};
use crate::remoting::body::TopicConfig;
use crate::remoting::code::response_code;
use crate::remoting::error::quote;
use crate::remoting::header::{CreateTopicRequestHeader, DeleteTopicRequestHeader, FromExtFields};
use crate::remoting::RemotingCommand;

/// `UPDATE_AND_CREATE_TOPIC` (17). An in-memory topic cannot change its queue count once it
/// exists; asking for another count keeps the existing one and says so.
pub(crate) fn update_and_create_topic(
    core: &Arc<Core>,
    _face: &Arc<RemotingState>,
    _ctx: &ConnCtx,
    req: RemotingCommand,
) -> Reply {
    let h = match CreateTopicRequestHeader::from_ext_fields(&req.ext_fields) {
        Ok(h) => h,
        Err(e) => return bad_header(&req, &e),
    };
    if let Err(remark) = topics::validate_topic(h.topic) {
        return reply_error(&req, response_code::SYSTEM_ERROR, remark);
    }
    if topics::is_system_topic(h.topic) {
        return reply_error(
            &req,
            response_code::SYSTEM_ERROR,
            format!("The topic[{}] is conflict with system topic.", quote(h.topic)),
        );
    }
    let q = |n: i32| u32::try_from(n).ok().filter(|n| (1..=crate::store::MAX_QUEUES).contains(n));
    let (Some(read), Some(write)) = (q(h.read_queue_nums), q(h.write_queue_nums)) else {
        return reply_error(
            &req,
            response_code::SYSTEM_ERROR,
            format!("queue counts must be between 1 and {}", crate::store::MAX_QUEUES),
        );
    };
    let mut conf = TopicConfig::new(h.topic, read, write);
    conf.perm = u32::try_from(h.perm).unwrap_or(perm::RW) & (perm::RW | perm::INHERIT);
    conf.topic_sys_flag = u32::try_from(h.topic_sys_flag).unwrap_or(0);
    conf.order = h.order;
    match core.create_topic(conf) {
        Ok(c) if c.read_queue_nums != read.max(write) && c.read_queue_nums != read => Reply::now(
            RemotingCommand::response_to(
                &req,
                response_code::SUCCESS,
                Some(format!("topic {} exists with {} queues; baiji cannot change the queue count of a live topic", quote(h.topic), c.read_queue_nums)),
            ),
        ),
        Ok(_) => Reply::now(ok(&req, Default::default())),
        Err(e) => store_error(&req, &e),
    }
}

/// `DELETE_TOPIC_IN_BROKER` (215): the topic and everything in it.
pub(crate) fn delete_topic_in_broker(
    core: &Arc<Core>,
    _face: &Arc<RemotingState>,
    _ctx: &ConnCtx,
    req: RemotingCommand,
) -> Reply {
    let h = match DeleteTopicRequestHeader::from_ext_fields(&req.ext_fields) {
        Ok(h) => h,
        Err(e) => return bad_header(&req, &e),
    };
    if topics::is_system_topic(h.topic) {
        return reply_error(
            &req,
            response_code::SYSTEM_ERROR,
            format!("The topic[{}] is conflict with system topic.", quote(h.topic)),
        );
    }
    core.delete_topic(h.topic);
    Reply::now(ok(&req, Default::default()))
}

/// `GET_ALL_TOPIC_CONFIG` (21).
pub(crate) fn get_all_topic_config(
    core: &Arc<Core>,
    _face: &Arc<RemotingState>,
    _ctx: &ConnCtx,
    req: RemotingCommand,
) -> Reply {
    let wrapper = core.topics.serialize_wrapper();
    json_reply(&req, &wrapper)
}
