//! One processor file per request family, named like RocketMQ's.

pub(crate) mod admin;
pub(crate) mod client;
pub(crate) mod config;
pub(crate) mod group;
pub(crate) mod lock;
pub(crate) mod offset;
pub(crate) mod pop;
pub(crate) mod pull;
pub(crate) mod query;
pub(crate) mod recall;
pub(crate) mod relay;
pub(crate) mod reply;
pub(crate) mod retry;
pub(crate) mod send;
pub(crate) mod stats;
pub(crate) mod transaction;

use crate::broker::core::record::PutError;
use crate::broker::core::send::store_remark;
use crate::remoting::code::response_code;
use crate::remoting::error::quote;
use crate::remoting::{HeaderError, RemotingCommand};
use crate::store::StoreError;

use crate::broker::core::groups::GroupError;
pub(crate) use crate::broker::core::groups::MAX_GROUP_LEN;
use crate::broker::core::Core;
use crate::broker::remoting::{reply_error, Reply};

/// The answer to a request whose custom header is missing a field or has a malformed one.
pub(crate) fn bad_header(req: &RemotingCommand, e: &HeaderError) -> Reply {
    reply_error(req, response_code::SYSTEM_ERROR, e.to_string())
}

/// The answer to a request whose JSON body does not decode as RocketMQ's class `class`.
pub(crate) fn bad_body(req: &RemotingCommand, class: &str, e: impl std::fmt::Display) -> Reply {
    reply_error(req, response_code::SYSTEM_ERROR, format!("bad {class}: {e}"))
}

/// RocketMQ's response code for a store error.
pub(crate) fn store_code(e: &StoreError) -> i32 {
    match e {
        StoreError::UnknownTopic(_) => response_code::TOPIC_NOT_EXIST,
        StoreError::MessageTooLarge { .. } => response_code::MESSAGE_ILLEGAL,
        StoreError::Full { .. } => response_code::SYSTEM_BUSY,
        // RocketMQ's answer to a group it will not create (`autoCreateSubscriptionGroup`
        // off); the remark says why.
        StoreError::UnknownGroup { .. } | StoreError::TooManySubscriptions { .. } => {
            response_code::SUBSCRIPTION_GROUP_NOT_EXIST
        }
        _ => response_code::SYSTEM_ERROR,
    }
}

/// The RocketMQ response code and remark for a store error.
pub(crate) fn store_error(req: &RemotingCommand, e: &StoreError) -> Reply {
    reply_error(req, store_code(e), store_remark(e))
}

/// The answer to a message that cannot be stored: `MESSAGE_ILLEGAL` for a record that could not
/// be written out again (RocketMQ's `PROPERTIES_SIZE_EXCEEDED`), else as [`store_error`].
pub(crate) fn put_error(req: &RemotingCommand, e: &PutError) -> Reply {
    match e {
        PutError::Record(e) => reply_error(req, response_code::MESSAGE_ILLEGAL, e.to_string()),
        PutError::Store(e) => store_error(req, e),
    }
}

/// Whether `group` may store offsets: a name of at most [`MAX_GROUP_LEN`] characters, of a
/// group a heartbeat made known (RocketMQ 5 refuses offsets of groups it has no subscription
/// config for). Bounds the offsets a client can make the broker keep.
pub(crate) fn check_offset_group(
    core: &Core,
    req: &RemotingCommand,
    group: &str,
) -> Result<(), Reply> {
    core.check_group(group, false).map_err(|e| group_error(req, &e))
}

/// The answer to a group the core refused.
pub(crate) fn group_error(req: &RemotingCommand, e: &GroupError) -> Reply {
    let code = match e {
        GroupError::BadName => response_code::SYSTEM_ERROR,
        GroupError::Unknown(_) => response_code::SUBSCRIPTION_GROUP_NOT_EXIST,
    };
    reply_error(req, code, e.to_string())
}

/// A queue id from a header as `u32`, or the answer to send when it is negative.
pub(crate) fn queue_id(
    req: &RemotingCommand,
    q: i32,
    topic: &str,
    queues: u32,
) -> Result<u32, Reply> {
    u32::try_from(q).ok().filter(|q| *q < queues).ok_or_else(|| {
        reply_error(
            req,
            response_code::SYSTEM_ERROR,
            format!(
                "queueId[{q}] is illegal, topic:[{}] topicConfig.readQueueNums:[{queues}]",
                quote(topic)
            ),
        )
    })
}
