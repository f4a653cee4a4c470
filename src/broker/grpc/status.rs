//! RocketMQ's `Code` in a response's `Status`, and the core's refusals → `Code`.
//!
//! The 5.x clients read every error from the `Status` inside a response that gRPC itself
//! answered OK; a raw gRPC error is a transport failure to them, which they retry
//! (`rocketmq5-grpc-pop-transactions.md` 1.10). So every handler answers OK at the gRPC level
//! with one of these.

use super::pb::{Code, Status};
use crate::broker::core::recall::RecallError;
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
        // The proxy's `ProxyExceptionCode`s of an illegal message, as `convertToGrpcStatus`
        // answers them: a broken topic name, an oversized body or properties, an illegal
        // delivery time; a queue the topic lacks or a missing producer group is a bad request.
        SendError::InvalidTopic(_) => Code::IllegalTopic,
        SendError::BadQueue { .. } | SendError::NoProducerGroup => Code::BadRequest,
        SendError::Forbidden(_) => Code::Forbidden,
        SendError::BodyTooLarge { .. } => Code::MessageBodyTooLarge,
        SendError::PropertiesTooLarge(_) | SendError::Record(_) => Code::MessagePropertiesTooLarge,
        SendError::IllegalTimer(_) => Code::IllegalDeliveryTime,
        SendError::UnknownTopic(_) => Code::TopicNotFound,
        SendError::Store(e) => store_code(e),
        SendError::Unavailable(_) => Code::HaNotAvailable,
    };
    status(code, e.to_string())
}

/// The status of a refused `RecallMessage`, as the proxy answers it: the broker's refusals
/// (`ILLEGAL_OPERATION`) and a handle the proxy cannot decode are INTERNAL_SERVER_ERROR
/// (`ResponseBuilder`'s default, `ProducerProcessor.recallMessage`), an unknown topic
/// TOPIC_NOT_FOUND; the message is the broker's remark.
pub(crate) fn recall_status(e: &RecallError) -> Status {
    let code = match e {
        RecallError::UnknownTopic(_) => Code::TopicNotFound,
        RecallError::InvalidHandle
        | RecallError::TopicMismatch
        | RecallError::OtherBroker
        | RecallError::TimestampInvalid => Code::InternalServerError,
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

    #[test]
    fn given_an_illegal_message_when_mapping_should_answer_the_proxys_illegal_codes() {
        let code = |e: SendError| send_status(&e).code;
        assert_eq!(code(SendError::InvalidTopic("bad name".into())), 40_002, "ILLEGAL_TOPIC");
        let bad_queue = SendError::BadQueue { topic: "T".into(), asked: 9, queues: 8 };
        assert_eq!(code(bad_queue), Code::BadRequest as i32);
        assert_eq!(code(SendError::NoProducerGroup), Code::BadRequest as i32);
        assert_eq!(code(SendError::BodyTooLarge { size: 2, max: 1 }), 41_301);
        assert_eq!(code(SendError::PropertiesTooLarge(70_000)), 43_101, "PROPERTIES_TOO_LARGE");
        assert_eq!(code(SendError::IllegalTimer("x".into())), 40_012, "ILLEGAL_DELIVERY_TIME");
        assert_eq!(code(SendError::Forbidden("SCHEDULE_TOPIC_XXXX".into())), 40_300);
    }
}
