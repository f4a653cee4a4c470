//! `END_TRANSACTION` (37): a producer commits or rolls back a half message; and
//! `CHECK_TRANSACTION_STATE` (39), the check the broker sends a remoting producer about a half
//! message nobody decided ([`RemotingProducers`], the remoting face's [`ProducerCheck`]).
//!
//! Producers send it
//! one-way, so they never see a refusal: every refusal is logged and counted
//! ([`TransactionStats::end_refused`](crate::broker::TransactionStats::end_refused)); a
//! request that does ask for an answer gets RocketMQ's.

use crate::sync::Arc;

use bytes::BytesMut;
use tokio::sync::mpsc;

use super::bad_header;
use crate::broker::core::delay::rewrite_properties;
use crate::broker::core::record::physical_offset;
use crate::broker::core::transaction::{
    self, CheckProducer, Decision, EndError, Ended, HalfCheck, ProducerCheck, CHECK_TIMES,
    HALF_TOPIC,
};
use crate::broker::core::Core;
use crate::broker::remoting::{ok, reply_error, ConnCtx, Outgoing, RemotingState, Reply};
use crate::remoting::code::{request_code, response_code};
use crate::remoting::header::{
    CheckTransactionStateRequestHeader, EndTransactionRequestHeader, FromExtFields, ToExtFields,
};
use crate::remoting::message::{encode_record, sys_flag, StoredRecord};
use crate::remoting::msgid::encode_offset_msg_id;
use crate::remoting::{properties, ExtFields, RemotingCommand};

/// `END_TRANSACTION` (37).
pub(crate) fn end_transaction(
    core: &Arc<Core>,
    _face: &Arc<RemotingState>,
    ctx: &ConnCtx,
    req: RemotingCommand,
) -> Reply {
    let h = match EndTransactionRequestHeader::from_ext_fields(&req.ext_fields) {
        Ok(h) => h,
        Err(e) => {
            core.transactions.refused();
            tracing::warn!(peer = %ctx.peer, error = %e, "END_TRANSACTION refused: bad header");
            return if req.is_oneway() { Reply::Nothing } else { bad_header(&req, &e) };
        }
    };
    let commit = match h.commit_or_rollback {
        sys_flag::TRANSACTION_COMMIT => true,
        sys_flag::TRANSACTION_ROLLBACK => false,
        _ => {
            // Neither commit nor rollback (unknown state): only logged, never answered.
            tracing::debug!(
                peer = %ctx.peer,
                msg_id = h.msg_id,
                from_check = h.from_transaction_check,
                remark = ?req.remark,
                "END_TRANSACTION with an unknown state: the message stays half"
            );
            return Reply::Nothing;
        }
    };
    let decision = Decision {
        producer_group: h.producer_group,
        tran_state_table_offset: h.tran_state_table_offset,
        commit_log_offset: h.commit_log_offset,
        commit,
        from_transaction_check: h.from_transaction_check,
    };
    match transaction::end(core, &decision) {
        Ended::Done if req.is_oneway() => Reply::Nothing,
        Ended::Done => Reply::now(ok(&req, ExtFields::new())),
        Ended::Refused(e) => {
            let code = match e {
                EndError::Busy(_) => response_code::SYSTEM_BUSY,
                EndError::PastImmunity => response_code::ILLEGAL_OPERATION,
                EndError::IllegalTimer(_) => response_code::MESSAGE_ILLEGAL,
                _ => response_code::SYSTEM_ERROR,
            };
            let remark = e.to_string();
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

/// The remoting face's producers, as the transaction checker reaches them: the connection of a
/// live producer of the group (the one that sent a heartbeat last).
#[derive(Debug)]
pub(crate) struct RemotingProducers(pub(crate) Arc<RemotingState>);

impl ProducerCheck for RemotingProducers {
    fn producer(&self, core: &Core, group: &str) -> Option<Box<dyn CheckProducer>> {
        let tx = self.0.channel(core.clients.producer_conn(group)?)?;
        Some(Box::new(ProducerConnection { face: Arc::clone(&self.0), tx }))
    }
}

/// A remoting producer's connection: it gets a one-way `CHECK_TRANSACTION_STATE`.
struct ProducerConnection {
    face: Arc<RemotingState>,
    tx: mpsc::Sender<Outgoing>,
}

impl CheckProducer for ProducerConnection {
    fn ask(&self, core: &Core, half: &HalfCheck<'_>) -> bool {
        check_request(core, &self.face, half).is_some_and(|cmd| self.tx.try_send(cmd).is_ok())
    }
}

/// The `CHECK_TRANSACTION_STATE` request for one half message: header as RocketMQ's
/// `AbstractTransactionalMessageCheckListener.sendCheckMessage`, body the message as a pull
/// returns it, with its real topic and queue restored and `TRANSACTION_CHECK_TIMES` set.
fn check_request(core: &Core, face: &RemotingState, c: &HalfCheck<'_>) -> Option<RemotingCommand> {
    let d = &c.record;
    let topic_uid = c.topic_uid;
    let real_topic = properties::find(d.properties, properties::REAL_TOPIC).unwrap_or(HALF_TOPIC);
    let real_queue: i32 = properties::find(d.properties, properties::REAL_QID)
        .and_then(|q| q.trim().parse().ok())
        .unwrap_or(0);
    let n = c.checks.to_string();
    let props = rewrite_properties(d.properties, &[], &[(CHECK_TIMES, &n)]);
    let phys = physical_offset(topic_uid, 0, c.offset);
    let offset = i64::try_from(c.offset).ok()?;
    let mut body = BytesMut::new();
    let written = encode_record(
        &StoredRecord {
            queue_id: real_queue,
            flag: d.flag,
            queue_offset: offset,
            physical_offset: phys,
            sys_flag: d.sys_flag,
            born_timestamp: d.born_timestamp,
            born_host: d.born_host,
            store_timestamp: i64::try_from(c.stored_at).unwrap_or(i64::MAX),
            store_host: core.store_host,
            reconsume_times: d.reconsume_times,
            prepared_tx_offset: 0,
            body: d.body,
            topic: real_topic,
            properties: &props,
            extra_properties: &core.cluster_property,
        },
        &mut body,
    );
    if let Err(e) = written {
        tracing::warn!(error = %e, offset = c.offset, "a half message cannot be encoded for its check");
        return None;
    }
    let header = CheckTransactionStateRequestHeader {
        topic: HALF_TOPIC.to_owned(),
        tran_state_table_offset: offset,
        commit_log_offset: phys,
        msg_id: c.uniq.to_owned(),
        transaction_id: c.uniq.to_owned(),
        offset_msg_id: encode_offset_msg_id(core.store_host, phys),
        broker_name: core.config.broker_name.clone(),
    };
    Some(
        RemotingCommand::oneway_request(request_code::CHECK_TRANSACTION_STATE, face.next_opaque())
            .with_ext_fields(header.to_ext_fields())
            .with_body(body.freeze()),
    )
}
