//! END_TRANSACTION (37) and CHECK_TRANSACTION_STATE (39) headers.

use crate::remoting::error::HeaderError;
use crate::remoting::ext::ExtFields;
use crate::remoting::header::{put_opt_str, FromExtFields, ToExtFields};

/// END_TRANSACTION request (`EndTransactionRequestHeader`), one-way from producers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EndTransactionRequestHeader<'a> {
    /// `topic`: the message's topic (the real one after a send, the half topic after a check).
    pub topic: Option<&'a str>,
    /// `producerGroup` (required): must equal the half message's `PGROUP`.
    pub producer_group: &'a str,
    /// `tranStateTableOffset` (required): the half message's queue offset.
    pub tran_state_table_offset: i64,
    /// `commitLogOffset` (required): decoded from the half message's offset msgId.
    pub commit_log_offset: i64,
    /// `commitOrRollback` (required): 8 commit, 12 rollback, 0 unknown.
    pub commit_or_rollback: i32,
    /// `fromTransactionCheck` (default `false`): the answer to a CHECK_TRANSACTION_STATE.
    pub from_transaction_check: bool,
    /// `msgId` (required): the message's UNIQ_KEY.
    pub msg_id: &'a str,
    /// `transactionId`.
    pub transaction_id: Option<&'a str>,
}

impl<'a> FromExtFields<'a> for EndTransactionRequestHeader<'a> {
    fn from_ext_fields(ext: &'a ExtFields) -> Result<Self, HeaderError> {
        Ok(Self {
            topic: ext.optional_str("topic"),
            producer_group: ext.required_str("producerGroup")?,
            tran_state_table_offset: ext.required_i64("tranStateTableOffset")?,
            commit_log_offset: ext.required_i64("commitLogOffset")?,
            commit_or_rollback: ext.required_i32("commitOrRollback")?,
            from_transaction_check: ext.optional_bool("fromTransactionCheck")?.unwrap_or(false),
            msg_id: ext.required_str("msgId")?,
            transaction_id: ext.optional_str("transactionId"),
        })
    }
}

impl ToExtFields for EndTransactionRequestHeader<'_> {
    fn write_ext_fields(&self, ext: &mut ExtFields) {
        put_opt_str(ext, "topic", self.topic);
        ext.insert("producerGroup", self.producer_group);
        ext.insert_i64("tranStateTableOffset", self.tran_state_table_offset);
        ext.insert_i64("commitLogOffset", self.commit_log_offset);
        ext.insert_i64("commitOrRollback", i64::from(self.commit_or_rollback));
        ext.insert_bool("fromTransactionCheck", self.from_transaction_check);
        ext.insert("msgId", self.msg_id);
        put_opt_str(ext, "transactionId", self.transaction_id);
    }
}

/// CHECK_TRANSACTION_STATE request (`CheckTransactionStateRequestHeader`), one-way from the
/// broker to one producer of the half message's group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckTransactionStateRequestHeader {
    /// `topic`: the topic the half message is stored in (`RMQ_SYS_TRANS_HALF_TOPIC`).
    pub topic: String,
    /// `tranStateTableOffset`: the half message's queue offset.
    pub tran_state_table_offset: i64,
    /// `commitLogOffset`: the half message's commit-log offset.
    pub commit_log_offset: i64,
    /// `msgId`: the message's UNIQ_KEY.
    pub msg_id: String,
    /// `transactionId`: the same UNIQ_KEY.
    pub transaction_id: String,
    /// `offsetMsgId`: the half message's offset msgId.
    pub offset_msg_id: String,
    /// `bname`: the broker's name.
    pub broker_name: String,
}

impl ToExtFields for CheckTransactionStateRequestHeader {
    fn write_ext_fields(&self, ext: &mut ExtFields) {
        ext.insert("topic", &self.topic);
        ext.insert_i64("tranStateTableOffset", self.tran_state_table_offset);
        ext.insert_i64("commitLogOffset", self.commit_log_offset);
        ext.insert("msgId", &self.msg_id);
        ext.insert("transactionId", &self.transaction_id);
        ext.insert("offsetMsgId", &self.offset_msg_id);
        ext.insert("bname", &self.broker_name);
    }
}

impl<'a> FromExtFields<'a> for CheckTransactionStateRequestHeader {
    fn from_ext_fields(ext: &'a ExtFields) -> Result<Self, HeaderError> {
        let text = |k: &str| ext.optional_str(k).unwrap_or_default().to_owned();
        Ok(Self {
            topic: text("topic"),
            tran_state_table_offset: ext.required_i64("tranStateTableOffset")?,
            commit_log_offset: ext.required_i64("commitLogOffset")?,
            msg_id: text("msgId"),
            transaction_id: text("transactionId"),
            offset_msg_id: text("offsetMsgId"),
            broker_name: text("bname"),
        })
    }
}

#[cfg(test)]
mod tests;
