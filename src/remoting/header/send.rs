//! SEND_MESSAGE (10), SEND_MESSAGE_V2 (310), SEND_BATCH_MESSAGE (320) and SEND_REPLY_MESSAGE
//! (324/325) headers, and the send response.

use crate::remoting::code::request_code;
use crate::remoting::error::HeaderError;
use crate::remoting::ext::{value, ExtFields};
use crate::remoting::header::{put_opt_i64, put_opt_str, FromExtFields, ToExtFields};

/// Region the Java broker reports in `MSG_REGION` by default.
pub const DEFAULT_MSG_REGION: &str = "DefaultRegion";

/// Which field names a send header uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendHeaderVersion {
    /// Long names (`producerGroup`, `topic`, …): `SEND_MESSAGE`, `SEND_REPLY_MESSAGE`.
    V1,
    /// One-letter names `a`..`n`: `SEND_MESSAGE_V2`, `SEND_BATCH_MESSAGE`,
    /// `SEND_REPLY_MESSAGE_V2`.
    V2,
}

impl SendHeaderVersion {
    /// The version a request code implies; `None` for codes that are not sends.
    #[must_use]
    pub fn for_request_code(code: i32) -> Option<Self> {
        match code {
            request_code::SEND_MESSAGE | request_code::SEND_REPLY_MESSAGE => Some(Self::V1),
            request_code::SEND_MESSAGE_V2
            | request_code::SEND_BATCH_MESSAGE
            | request_code::SEND_REPLY_MESSAGE_V2 => Some(Self::V2),
            _ => None,
        }
    }

    /// Guesses the version from the fields present: V2 if `b` (topic) is there and `topic` is
    /// not. Prefer [`for_request_code`](Self::for_request_code) when the code is known.
    #[must_use]
    pub fn detect(ext: &ExtFields) -> Self {
        if ext.contains_key("b") && !ext.contains_key("topic") {
            Self::V2
        } else {
            Self::V1
        }
    }

    /// Wire names of the 14 fields in this version, in `a`..`n` order.
    const fn names(self) -> &'static [&'static str; 14] {
        match self {
            Self::V1 => &[
                "producerGroup",
                "topic",
                "defaultTopic",
                "defaultTopicQueueNums",
                "queueId",
                "sysFlag",
                "bornTimestamp",
                "flag",
                "properties",
                "reconsumeTimes",
                "unitMode",
                "maxReconsumeTimes",
                "batch",
                "brokerName",
            ],
            Self::V2 => &["a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l", "m", "n"],
        }
    }
}

/// The send request header, V1 and V2 alike (V2 only renames the fields).
///
/// `a`..`h` are required; the rest default as the Java broker does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SendMessageRequestHeader<'a> {
    /// `producerGroup` / `a`.
    pub producer_group: &'a str,
    /// `topic` / `b`.
    pub topic: &'a str,
    /// `defaultTopic` / `c` (`TBW102`), template for auto-created topics.
    pub default_topic: &'a str,
    /// `defaultTopicQueueNums` / `d`, queue count for auto-created topics.
    pub default_topic_queue_nums: i32,
    /// `queueId` / `e`; negative asks the broker to pick.
    pub queue_id: i32,
    /// `sysFlag` / `f`, message system flags.
    pub sys_flag: i32,
    /// `bornTimestamp` / `g`, milliseconds.
    pub born_timestamp: i64,
    /// `flag` / `h`, user flag stored as is.
    pub flag: i32,
    /// `properties` / `i`, the properties string; empty when absent.
    pub properties: &'a str,
    /// `reconsumeTimes` / `j`; 0 when absent.
    pub reconsume_times: i32,
    /// `unitMode` / `k`; false when absent.
    pub unit_mode: bool,
    /// `maxReconsumeTimes` / `l`; absent means the group's default.
    pub max_reconsume_times: Option<i32>,
    /// `batch` / `m`; false when absent.
    pub batch: bool,
    /// `brokerName` / `n`.
    pub broker_name: Option<&'a str>,
}

impl<'a> SendMessageRequestHeader<'a> {
    /// Reads the header using the field names of `version`.
    ///
    /// # Errors
    ///
    /// [`HeaderError`] naming the wire field (for example `<b>` in V2) that is missing or
    /// malformed.
    pub fn decode(ext: &'a ExtFields, version: SendHeaderVersion) -> Result<Self, HeaderError> {
        let names = version.names();
        let [a, b, c, d, e, f, g, h, _, j, k, l, m, _] = *names;
        // One pass for the 14 fields (they usually come in this order), then the same typed
        // readings and errors as the getters.
        let [va, vb, vc, vd, ve, vf, vg, vh, vi, vj, vk, vl, vm, vn] = ext.get_many(names);
        Ok(Self {
            producer_group: value::required_str(a, va)?,
            topic: value::required_str(b, vb)?,
            default_topic: value::required_str(c, vc)?,
            default_topic_queue_nums: value::required_int(d, vd)?,
            queue_id: value::required_int(e, ve)?,
            sys_flag: value::required_int(f, vf)?,
            born_timestamp: value::required_int(g, vg)?,
            flag: value::required_int(h, vh)?,
            properties: vi.unwrap_or_default(),
            reconsume_times: value::optional_int(j, vj)?.unwrap_or(0),
            unit_mode: value::optional_bool(k, vk)?.unwrap_or(false),
            max_reconsume_times: value::optional_int(l, vl)?,
            batch: value::optional_bool(m, vm)?.unwrap_or(false),
            broker_name: vn,
        })
    }

    /// Writes the header with the field names of `version`.
    pub fn write_ext_fields_as(&self, ext: &mut ExtFields, version: SendHeaderVersion) {
        let [a, b, c, d, e, f, g, h, i, j, k, l, m, n] = *version.names();
        ext.insert(a, self.producer_group);
        ext.insert(b, self.topic);
        ext.insert(c, self.default_topic);
        ext.insert_i64(d, i64::from(self.default_topic_queue_nums));
        ext.insert_i64(e, i64::from(self.queue_id));
        ext.insert_i64(f, i64::from(self.sys_flag));
        ext.insert_i64(g, self.born_timestamp);
        ext.insert_i64(h, i64::from(self.flag));
        ext.insert(i, self.properties);
        ext.insert_i64(j, i64::from(self.reconsume_times));
        ext.insert_bool(k, self.unit_mode);
        put_opt_i64(ext, l, self.max_reconsume_times.map(i64::from));
        ext.insert_bool(m, self.batch);
        put_opt_str(ext, n, self.broker_name);
    }
}

/// Detects the version with [`SendHeaderVersion::detect`].
impl<'a> FromExtFields<'a> for SendMessageRequestHeader<'a> {
    fn from_ext_fields(ext: &'a ExtFields) -> Result<Self, HeaderError> {
        Self::decode(ext, SendHeaderVersion::detect(ext))
    }
}

/// Writes V1 (long) names.
impl ToExtFields for SendMessageRequestHeader<'_> {
    fn write_ext_fields(&self, ext: &mut ExtFields) {
        self.write_ext_fields_as(ext, SendHeaderVersion::V1);
    }
}

/// The send response header. `msgId`, `queueId` and `queueOffset` are required by the Rust
/// client; the encoder also writes `MSG_REGION` and `TRACE_ON` as the Java 5.x broker does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SendMessageResponseHeader {
    /// Offset msgId (batch: the ids of all messages joined by commas).
    pub msg_id: String,
    /// Queue the message went to.
    pub queue_id: i32,
    /// Queue offset of the (first) message.
    pub queue_offset: i64,
    /// Transaction id, for transactional sends.
    pub transaction_id: Option<String>,
    /// Unique id of a batch.
    pub batch_uniq_id: Option<String>,
    /// `recallHandle`: the handle a timer message is recalled with (RocketMQ 5.3.2).
    pub recall_handle: Option<String>,
}

impl FromExtFields<'_> for SendMessageResponseHeader {
    fn from_ext_fields(ext: &ExtFields) -> Result<Self, HeaderError> {
        Ok(Self {
            msg_id: ext.required_str("msgId")?.to_owned(),
            queue_id: ext.required_i32("queueId")?,
            queue_offset: ext.required_i64("queueOffset")?,
            transaction_id: ext.optional_str("transactionId").map(str::to_owned),
            batch_uniq_id: ext.optional_str("batchUniqId").map(str::to_owned),
            recall_handle: ext.optional_str("recallHandle").map(str::to_owned),
        })
    }
}

impl ToExtFields for SendMessageResponseHeader {
    fn write_ext_fields(&self, ext: &mut ExtFields) {
        ext.insert("msgId", &self.msg_id);
        ext.insert_i64("queueId", i64::from(self.queue_id));
        ext.insert_i64("queueOffset", self.queue_offset);
        put_opt_str(ext, "transactionId", self.transaction_id.as_deref());
        put_opt_str(ext, "batchUniqId", self.batch_uniq_id.as_deref());
        put_opt_str(ext, "recallHandle", self.recall_handle.as_deref());
        ext.insert("MSG_REGION", DEFAULT_MSG_REGION);
        ext.insert("TRACE_ON", "true");
    }
}

ext_header! {
    /// RECALL_MESSAGE (370) request (`RecallMessageRequestHeader`, RocketMQ 5.3.2): recall a
    /// timer message before it is due. Java clients also send `bname` (ignored).
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub struct RecallMessageRequestHeader<'a> {
        /// `producerGroup` (nullable).
        pub producer_group: Option<&'a str> = "producerGroup",
        /// `topic` (required): the message's topic.
        pub topic: &'a str = "topic",
        /// `recallHandle` (required): from the send answer.
        pub recall_handle: &'a str = "recallHandle",
    }
}

ext_header! {
    /// RECALL_MESSAGE response (`RecallMessageResponseHeader`).
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct RecallMessageResponseHeader {
        /// `msgId`: the recalled message's `UNIQ_KEY`.
        pub msg_id: String = "msgId",
    }
}

#[cfg(test)]
mod tests;
