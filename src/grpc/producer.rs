//! The producer RPCs: SendMessage and EndTransaction.

use tonic::Request;

use super::pb::{
    Code, EndTransactionRequest, EndTransactionResponse, SendMessageRequest, SendMessageResponse,
};
use super::service::Messaging;
use super::status::status;

/// `SendMessage`.
pub(crate) fn send_message(
    _svc: &Messaging,
    _request: Request<SendMessageRequest>,
) -> SendMessageResponse {
    SendMessageResponse {
        status: Some(status(Code::NotImplemented, "not served by this broker yet")),
        entries: Vec::new(),
    }
}

/// `EndTransaction`.
pub(crate) fn end_transaction(
    _svc: &Messaging,
    _request: Request<EndTransactionRequest>,
) -> EndTransactionResponse {
    EndTransactionResponse {
        status: Some(status(Code::NotImplemented, "not served by this broker yet")),
    }
}
