//! HEART_BEAT (34) and CHECK_CLIENT_CONFIG (46) bodies.

use serde::de::IgnoredAny;
use serde::{Deserialize, Deserializer, Serialize};

use crate::remoting::body::{lenient_enum, null_default, JsonBody};

lenient_enum! {
    /// How a consumer group consumes.
    ConsumeType, default = ConsumePassively, {
        /// Pull and lite-pull consumers.
        ConsumeActively = "CONSUME_ACTIVELY",
        /// Push consumers.
        ConsumePassively = "CONSUME_PASSIVELY",
        /// 5.x pop consumers.
        ConsumePop = "CONSUME_POP",
    }
}

lenient_enum! {
    /// Whether a group shares queues (clustering) or every member reads everything.
    MessageModel, default = Clustering, {
        /// Every member reads every message; offsets are kept client-side.
        Broadcasting = "BROADCASTING",
        /// Queues are divided among members; offsets are kept on the broker.
        Clustering = "CLUSTERING",
    }
}

lenient_enum! {
    /// Where a group with no committed offset starts.
    ConsumeFromWhere, default = ConsumeFromLastOffset, {
        /// The end of the queue (default).
        ConsumeFromLastOffset = "CONSUME_FROM_LAST_OFFSET",
        /// Deprecated alias kept by Java.
        ConsumeFromLastOffsetAndFromMinWhenBootFirst = "CONSUME_FROM_LAST_OFFSET_AND_FROM_MIN_WHEN_BOOT_FIRST",
        /// Deprecated.
        ConsumeFromMinOffset = "CONSUME_FROM_MIN_OFFSET",
        /// Deprecated.
        ConsumeFromMaxOffset = "CONSUME_FROM_MAX_OFFSET",
        /// The start of the queue.
        ConsumeFromFirstOffset = "CONSUME_FROM_FIRST_OFFSET",
        /// The first message stored at or after a timestamp.
        ConsumeFromTimestamp = "CONSUME_FROM_TIMESTAMP",
    }
}

lenient_enum! {
    /// Language of a subscription expression; `TAG` when a client omits it (ali-ons does).
    ExpressionType, default = Tag, {
        /// `TagA || TagB` or `*`.
        Tag = "TAG",
        /// SQL92 over properties ([`crate::remoting::sql92`]).
        Sql92 = "SQL92",
    }
}

/// The client's heartbeat: its groups and their subscriptions.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HeartbeatData {
    /// `clientID`: `ip@instance[@unit]`.
    #[serde(rename = "clientID", default, deserialize_with = "null_default")]
    pub client_id: String,
    /// Producer groups of this client.
    #[serde(default, deserialize_with = "null_default")]
    pub producer_data_set: Vec<ProducerData>,
    /// Consumer groups of this client.
    #[serde(default, deserialize_with = "null_default")]
    pub consumer_data_set: Vec<ConsumerData>,
    /// Fingerprint of the subscription set (heartbeat V2).
    #[serde(default, deserialize_with = "null_default")]
    pub heartbeat_fingerprint: i64,
    /// Heartbeat V2: the subscriptions were left out because they did not change.
    #[serde(default, deserialize_with = "null_default")]
    pub without_sub: bool,
}

impl JsonBody for HeartbeatData {}

/// A producer group in a heartbeat: `{"groupName":"PG"}`, or just `"PG"` as
/// rocketmq-client-go 2.0 writes it (anything else reads as an empty name).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", from = "ProducerRepr")]
pub struct ProducerData {
    /// Group name.
    pub group_name: String,
}

/// The forms a producer entry arrives in.
#[derive(Deserialize)]
#[serde(untagged)]
enum ProducerRepr {
    Name(String),
    Object {
        #[serde(rename = "groupName", default, deserialize_with = "null_default")]
        group_name: String,
    },
    Other(IgnoredAny),
}

impl From<ProducerRepr> for ProducerData {
    fn from(repr: ProducerRepr) -> Self {
        match repr {
            ProducerRepr::Name(group_name) | ProducerRepr::Object { group_name } => {
                ProducerData { group_name }
            }
            ProducerRepr::Other(_) => ProducerData::default(),
        }
    }
}

/// A consumer group in a heartbeat.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ConsumerData {
    /// Group name.
    #[serde(default, deserialize_with = "null_default")]
    pub group_name: String,
    /// Push, pull or pop.
    #[serde(default)]
    pub consume_type: ConsumeType,
    /// Clustering or broadcasting.
    #[serde(default)]
    pub message_model: MessageModel,
    /// Start position for a group without a committed offset.
    #[serde(default)]
    pub consume_from_where: ConsumeFromWhere,
    /// The group's subscriptions (one per topic, including `%RETRY%<group>`).
    #[serde(default, deserialize_with = "null_default")]
    pub subscription_data_set: Vec<SubscriptionData>,
    /// Unit mode.
    #[serde(default, deserialize_with = "null_default")]
    pub unit_mode: bool,
}

/// One subscription of a consumer group.
///
/// Build the broker-side filter with
/// [`TagMatcher::for_subscription`](crate::remoting::subscription::TagMatcher::for_subscription).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SubscriptionData {
    /// Class filter mode (obsolete).
    #[serde(default, deserialize_with = "null_default")]
    pub class_filter_mode: bool,
    /// Topic.
    #[serde(default, deserialize_with = "null_default")]
    pub topic: String,
    /// The expression as written, `*` for everything.
    #[serde(default, deserialize_with = "null_default")]
    pub sub_string: String,
    /// Tag names of the expression.
    #[serde(default, deserialize_with = "null_default")]
    pub tags_set: Vec<String>,
    /// `String.hashCode` of each tag (see the caveat in
    /// [`subscription`](crate::remoting::subscription)). Java writes numbers, Go writes them as
    /// JSON strings (`["2598919"]`); both are read, and an entry that is neither is skipped.
    #[serde(default, deserialize_with = "lenient_codes")]
    pub code_set: Vec<i32>,
    /// Version of the subscription (a timestamp: milliseconds from Java, nanoseconds from Go);
    /// a number or a numeric string.
    #[serde(default, deserialize_with = "lenient_i64")]
    pub sub_version: i64,
    /// Expression language; `TAG` when absent.
    #[serde(default)]
    pub expression_type: ExpressionType,
}

/// An integer as a JSON number or as a JSON string holding one (how the Go client writes
/// the tag codes of a subscription, client-wire-facts row 14).
#[derive(Deserialize)]
#[serde(untagged)]
enum LenientInt {
    Number(i64),
    Text(String),
    Other(IgnoredAny),
}

impl LenientInt {
    fn value(self) -> Option<i64> {
        match self {
            LenientInt::Number(n) => Some(n),
            LenientInt::Text(s) => s.trim().parse().ok(),
            LenientInt::Other(_) => None,
        }
    }
}

/// `codeSet`: numbers (Java) or numeric strings (Go); `null` is empty; entries that are neither
/// or do not fit an `i32` are skipped.
fn lenient_codes<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<i32>, D::Error> {
    let raw = Option::<Vec<LenientInt>>::deserialize(deserializer)?.unwrap_or_default();
    Ok(raw.into_iter().filter_map(|c| c.value().and_then(|n| i32::try_from(n).ok())).collect())
}

/// A number or a numeric string; `null` and anything else is 0.
fn lenient_i64<'de, D: Deserializer<'de>>(deserializer: D) -> Result<i64, D::Error> {
    Ok(Option::<LenientInt>::deserialize(deserializer)?.and_then(LenientInt::value).unwrap_or(0))
}

/// CHECK_CLIENT_CONFIG request body.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CheckClientConfigBody {
    /// Client id.
    #[serde(default, deserialize_with = "null_default")]
    pub client_id: String,
    /// Consumer group.
    #[serde(default, deserialize_with = "null_default")]
    pub group: String,
    /// The subscription to check.
    #[serde(default, deserialize_with = "null_default")]
    pub subscription_data: SubscriptionData,
    /// Namespace (5.x).
    #[serde(default)]
    pub namespace: Option<String>,
}

impl JsonBody for CheckClientConfigBody {}

#[cfg(test)]
mod tests;
