//! RocketMQ's `Code` in a response's `Status`, and the core's refusals → `Code`.
//!
//! The 5.x clients read every error from the `Status` inside a response that gRPC itself
//! answered OK; a raw gRPC error is a transport failure to them, which they retry
//! (`rocketmq5-grpc-pop-transactions.md` 1.10). So every handler answers OK at the gRPC level
//! with one of these.

use super::pb::{Code, Status};
use crate::broker::core::send::SendError;
use crate::broker::core::transaction::EndError;
use crate::store::StoreError;

/// A `Status` with `code` and `message`.
pub(crate) fn status(code: Code, message: impl Into<String>) -> Status {
    Status { code: code as i32, message: message.into() }
}

/// `Status{OK, "OK"}`, as the proxy answers.
pub(crate) fn ok() -> Status {
    status(Code::Ok, "OK")
}

/// The `Code` of a store error a send met. The proxy (`ResponseBuilder`) maps a busy broker,
/// an unknown subscription group and an unsupported request and answers
/// INTERNAL_SERVER_ERROR for the rest; baiji also names the codes whose meaning a client can
/// act on (an unknown topic, a refused message) rather than hiding them.
fn store_code(e: &StoreError) -> Code {
    match e {
        StoreError::Full { .. } => Code::TooManyRequests,
        StoreError::UnknownTopic(_) => Code::TopicNotFound,
        StoreError::MessageTooLarge { .. } => Code::BadRequest,
        StoreError::UnknownGroup { .. } => Code::ConsumerGroupNotFound,
        _ => Code::InternalServerError,
    }
}

/// The status of a refused send: the core's remark with the `Code` a client acts on.
pub(crate) fn send_status(e: &SendError) -> Status {
    let code = match e {
        SendError::InvalidTopic(_) | SendError::BadQueue { .. } => Code::InternalServerError,
        SendError::Forbidden(_) => Code::Forbidden,
        SendError::BodyTooLarge { .. } => Code::MessageBodyTooLarge,
        SendError::PropertiesTooLarge(_)
        | SendError::NoProducerGroup
        | SendError::IllegalTimer(_)
        | SendError::Record(_) => Code::BadRequest,
        SendError::UnknownTopic(_) => Code::TopicNotFound,
        SendError::Store(e) => store_code(e),
    };
    status(code, e.to_string())
}

/// The status of a refused `EndTransaction`.
pub(crate) fn end_status(e: &EndError) -> Status {
    let code = match e {
        EndError::Busy(_) => Code::TooManyRequests,
        _ => Code::InternalServerError,
    };
    status(code, e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn given_core_refusals_when_mapping_should_follow_the_proxy_and_name_actionable_ones() {
        let full = SendError::Store(StoreError::Full { used: 1, budget: 1 });
        assert_eq!(send_status(&full).code, Code::TooManyRequests as i32, "retried");
        let unknown = SendError::UnknownTopic("T".into());
        assert_eq!(send_status(&unknown).code, Code::TopicNotFound as i32);
        let other = SendError::Store(StoreError::Other("x".into()));
        assert_eq!(send_status(&other).code, Code::InternalServerError as i32);
        let big = SendError::BodyTooLarge { size: 2, max: 1 };
        assert_eq!(send_status(&big).code, Code::MessageBodyTooLarge as i32);
        assert_eq!(ok().code, 20_000, "OK is 20000 on the wire");
        assert_eq!(Code::ClientIdRequired as i32, 40_017);
        assert_eq!(Code::MessageBodyTooLarge as i32, 41_301);
    }
}
