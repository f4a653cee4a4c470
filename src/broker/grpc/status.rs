//! RocketMQ's `Code` in a response's `Status`, and the remoting response code → `Code` mapping.
//!
//! The 5.x clients read every error from the `Status` inside a response that gRPC itself
//! answered OK; a raw gRPC error is a transport failure to them, which they retry (facts doc
//! 1.10). So every handler answers OK at the gRPC level with one of these.

use super::pb::{Code, Status};
use crate::remoting::code::response_code;

/// A `Status` with `code` and `message`.
pub(crate) fn status(code: Code, message: impl Into<String>) -> Status {
    Status { code: code as i32, message: message.into() }
}

/// `Status{OK, "OK"}`, as the proxy answers.
pub(crate) fn ok() -> Status {
    status(Code::Ok, "OK")
}

/// The `Code` a remoting response code becomes. The proxy (`ResponseBuilder`) maps SUCCESS,
/// SYSTEM_BUSY, REQUEST_CODE_NOT_SUPPORTED and SUBSCRIPTION_GROUP_NOT_EXIST and answers
/// INTERNAL_SERVER_ERROR for the rest; baiji also names the codes whose meaning a client can act
/// on (an unknown topic, a refused message, a permission) rather than hiding them.
pub(crate) fn from_remoting(code: i32) -> Code {
    match code {
        response_code::SUCCESS => Code::Ok,
        response_code::SYSTEM_BUSY => Code::TooManyRequests,
        response_code::REQUEST_CODE_NOT_SUPPORTED => Code::NotImplemented,
        response_code::SUBSCRIPTION_GROUP_NOT_EXIST => Code::ConsumerGroupNotFound,
        response_code::TOPIC_NOT_EXIST => Code::TopicNotFound,
        response_code::NO_PERMISSION => Code::Forbidden,
        response_code::MESSAGE_ILLEGAL | response_code::INVALID_PARAMETER => Code::BadRequest,
        response_code::FLUSH_DISK_TIMEOUT => Code::MasterPersistenceTimeout,
        response_code::FLUSH_SLAVE_TIMEOUT => Code::SlavePersistenceTimeout,
        response_code::SLAVE_NOT_AVAILABLE => Code::HaNotAvailable,
        _ => Code::InternalServerError,
    }
}

/// A `Status` for a remoting response code and its remark.
pub(crate) fn from_remoting_status(code: i32, remark: impl Into<String>) -> Status {
    status(from_remoting(code), remark)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn given_remoting_codes_when_mapping_should_follow_the_proxy_and_name_actionable_ones() {
        assert_eq!(from_remoting(response_code::SUCCESS), Code::Ok);
        assert_eq!(from_remoting(response_code::SYSTEM_BUSY), Code::TooManyRequests, "retried");
        assert_eq!(from_remoting(response_code::TOPIC_NOT_EXIST), Code::TopicNotFound);
        assert_eq!(from_remoting(response_code::SYSTEM_ERROR), Code::InternalServerError);
        assert_eq!(ok().code, 20_000, "OK is 20000 on the wire");
        assert_eq!(Code::ClientIdRequired as i32, 40_017);
        assert_eq!(Code::MessageBodyTooLarge as i32, 41_301);
    }
}
