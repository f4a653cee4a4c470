//! `END_TRANSACTION` (37): a producer commits or rolls back a half message. Producers send it
//! one-way, so they never see a refusal: every refusal is logged and counted
//! ([`TransactionStats::end_refused`](crate::broker::TransactionStats::end_refused)); a
//! request that does ask for an answer gets RocketMQ's.

use std::sync::Arc;

use super::bad_header;
use crate::broker::core::transaction::{self, Ended};
use crate::broker::{ok, reply_error, ConnCtx, Reply, Shared};
use crate::remoting::header::{EndTransactionRequestHeader, FromExtFields};
use crate::remoting::{ExtFields, RemotingCommand};

/// `END_TRANSACTION` (37).
pub(crate) fn end_transaction(s: &Arc<Shared>, ctx: &ConnCtx, req: RemotingCommand) -> Reply {
    let h = match EndTransactionRequestHeader::from_ext_fields(&req.ext_fields) {
        Ok(h) => h,
        Err(e) => {
            s.transactions.refused();
            tracing::warn!(peer = %ctx.peer, error = %e, "END_TRANSACTION refused: bad header");
            return if req.is_oneway() { Reply::Nothing } else { bad_header(&req, &e) };
        }
    };
    match transaction::end(s, &h) {
        Ended::Undecided => {
            tracing::debug!(
                peer = %ctx.peer,
                msg_id = h.msg_id,
                from_check = h.from_transaction_check,
                remark = ?req.remark,
                "END_TRANSACTION with an unknown state: the message stays half"
            );
            Reply::Nothing
        }
        Ended::Done if req.is_oneway() => Reply::Nothing,
        Ended::Done => Reply::now(ok(&req, ExtFields::new())),
        Ended::Refused(code, remark) => {
            tracing::warn!(
                peer = %ctx.peer,
                producer_group = h.producer_group,
                msg_id = h.msg_id,
                tran_state_table_offset = h.tran_state_table_offset,
                commit_log_offset = h.commit_log_offset,
                commit_or_rollback = h.commit_or_rollback,
                from_check = h.from_transaction_check,
                %remark,
                "END_TRANSACTION refused"
            );
            if req.is_oneway() {
                Reply::Nothing
            } else {
                reply_error(&req, code, remark)
            }
        }
    }
}
