//! The consumer RPCs: ReceiveMessage, AckMessage, ChangeInvisibleDuration,
//! ForwardMessageToDeadLetterQueue and QueryAssignment ([`service`](super::service) delegates
//! each here).
//!
//! Not served yet: each answers `NOT_IMPLEMENTED` (50100) in its response `Status`, which the
//! clients treat as a failed call rather than a transport error.

use tonic::{Request, Response};

use super::pb::{
    AckMessageRequest, AckMessageResponse, ChangeInvisibleDurationRequest,
    ChangeInvisibleDurationResponse, Code, ForwardMessageToDeadLetterQueueRequest,
    ForwardMessageToDeadLetterQueueResponse, QueryAssignmentRequest, QueryAssignmentResponse,
    ReceiveMessageRequest, ReceiveMessageResponse,
};
use super::service::{Messaging, ReceiveStream};
use super::status::status;

const NOT_YET: &str = "not served by this broker yet";

/// `QueryAssignment`.
pub(crate) async fn query_assignment(
    _svc: &Messaging,
    _request: Request<QueryAssignmentRequest>,
) -> Result<Response<QueryAssignmentResponse>, tonic::Status> {
    Ok(Response::new(QueryAssignmentResponse {
        status: Some(status(Code::NotImplemented, NOT_YET)),
        assignments: Vec::new(),
    }))
}

/// `ReceiveMessage` (server streaming).
pub(crate) async fn receive_message(
    _svc: &Messaging,
    _request: Request<ReceiveMessageRequest>,
) -> Result<Response<ReceiveStream>, tonic::Status> {
    let only = ReceiveMessageResponse {
        content: Some(super::pb::receive_message_response::Content::Status(status(
            Code::NotImplemented,
            NOT_YET,
        ))),
    };
    let stream: ReceiveStream = Box::pin(tokio_stream::iter([Ok(only)]));
    Ok(Response::new(stream))
}

/// `AckMessage`.
pub(crate) async fn ack_message(
    _svc: &Messaging,
    _request: Request<AckMessageRequest>,
) -> Result<Response<AckMessageResponse>, tonic::Status> {
    Ok(Response::new(AckMessageResponse {
        status: Some(status(Code::NotImplemented, NOT_YET)),
        entries: Vec::new(),
    }))
}

/// `ChangeInvisibleDuration`.
pub(crate) async fn change_invisible_duration(
    _svc: &Messaging,
    _request: Request<ChangeInvisibleDurationRequest>,
) -> Result<Response<ChangeInvisibleDurationResponse>, tonic::Status> {
    Ok(Response::new(ChangeInvisibleDurationResponse {
        status: Some(status(Code::NotImplemented, NOT_YET)),
        receipt_handle: String::new(),
    }))
}

/// `ForwardMessageToDeadLetterQueue`.
pub(crate) async fn forward_message_to_dead_letter_queue(
    _svc: &Messaging,
    _request: Request<ForwardMessageToDeadLetterQueueRequest>,
) -> Result<Response<ForwardMessageToDeadLetterQueueResponse>, tonic::Status> {
    Ok(Response::new(ForwardMessageToDeadLetterQueueResponse {
        status: Some(status(Code::NotImplemented, NOT_YET)),
    }))
}
