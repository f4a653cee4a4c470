//! VIEW_MESSAGE_BY_ID (33) and QUERY_MESSAGE (12) headers.

ext_header! {
    /// VIEW_MESSAGE_BY_ID request.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub struct ViewMessageRequestHeader<'a> {
        /// `offset`: commit-log offset decoded from an offset msgId.
        pub offset: i64 = "offset",
        /// `topic` (5.x, optional).
        pub topic: Option<&'a str> = "topic",
    }
}

ext_header! {
    /// QUERY_MESSAGE request.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub struct QueryMessageRequestHeader<'a> {
        /// `topic`.
        pub topic: &'a str = "topic",
        /// `key`: a `KEYS` token or, with [`unique_key_query`](Self::unique_key_query), a
        /// UNIQ_KEY.
        pub key: &'a str = "key",
        /// `maxNum`: at most this many messages.
        pub max_num: i32 = "maxNum",
        /// `beginTimestamp`, milliseconds.
        pub begin_timestamp: i64 = "beginTimestamp",
        /// `endTimestamp`, milliseconds.
        pub end_timestamp: i64 = "endTimestamp",
        /// Ext field `_UNIQUE_KEY_QUERY` is `true` (written only then).
        pub unique_key_query: bool = "_UNIQUE_KEY_QUERY" [default: false, sparse],
    }
}

ext_header! {
    /// QUERY_MESSAGE response.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub struct QueryMessageResponseHeader {
        /// `indexLastUpdateTimestamp`.
        pub index_last_update_timestamp: i64 = "indexLastUpdateTimestamp",
        /// `indexLastUpdatePhyoffset`.
        pub index_last_update_phyoffset: i64 = "indexLastUpdatePhyoffset",
    }
}

#[cfg(test)]
mod tests;
