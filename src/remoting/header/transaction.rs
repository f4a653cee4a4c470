//! END_TRANSACTION (37) and CHECK_TRANSACTION_STATE (39) headers.

ext_header! {
    /// END_TRANSACTION request (`EndTransactionRequestHeader`), one-way from producers.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub struct EndTransactionRequestHeader<'a> {
        /// `topic`: the message's topic (the real one after a send, the half topic after a
        /// check).
        pub topic: Option<&'a str> = "topic",
        /// `producerGroup` (required): must equal the half message's `PGROUP`.
        pub producer_group: &'a str = "producerGroup",
        /// `tranStateTableOffset` (required): the half message's queue offset.
        pub tran_state_table_offset: i64 = "tranStateTableOffset",
        /// `commitLogOffset` (required): decoded from the half message's offset msgId.
        pub commit_log_offset: i64 = "commitLogOffset",
        /// `commitOrRollback` (required): 8 commit, 12 rollback, 0 unknown.
        pub commit_or_rollback: i32 = "commitOrRollback",
        /// `fromTransactionCheck` (default `false`): the answer to a CHECK_TRANSACTION_STATE.
        pub from_transaction_check: bool = "fromTransactionCheck" [default: false],
        /// `msgId` (required): the message's UNIQ_KEY.
        pub msg_id: &'a str = "msgId",
        /// `transactionId`.
        pub transaction_id: Option<&'a str> = "transactionId",
    }
}

ext_header! {
    /// CHECK_TRANSACTION_STATE request (`CheckTransactionStateRequestHeader`), one-way from the
    /// broker to one producer of the half message's group. Its texts read as empty when absent.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct CheckTransactionStateRequestHeader {
        /// `topic`: the topic the half message is stored in (`RMQ_SYS_TRANS_HALF_TOPIC`).
        pub topic: String = "topic" [default: ""],
        /// `tranStateTableOffset`: the half message's queue offset.
        pub tran_state_table_offset: i64 = "tranStateTableOffset",
        /// `commitLogOffset`: the half message's commit-log offset.
        pub commit_log_offset: i64 = "commitLogOffset",
        /// `msgId`: the message's UNIQ_KEY.
        pub msg_id: String = "msgId" [default: ""],
        /// `transactionId`: the same UNIQ_KEY.
        pub transaction_id: String = "transactionId" [default: ""],
        /// `offsetMsgId`: the half message's offset msgId.
        pub offset_msg_id: String = "offsetMsgId" [default: ""],
        /// `bname`: the broker's name.
        pub broker_name: String = "bname" [default: ""],
    }
}

#[cfg(test)]
mod tests;
