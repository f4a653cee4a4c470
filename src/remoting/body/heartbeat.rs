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
mod tests {
    use super::*;

    /// A heartbeat as rocketmq-client-rust 1.0.0 sends it (reference section 5.7, with the
    /// elided parts filled in).
    const RUST_CLIENT_HEARTBEAT: &str = r#"{"clientID":"192.168.1.10@12345#1700000000000","producerDataSet":[{"groupName":"PG"},{"groupName":"CLIENT_INNER_PRODUCER"}],"consumerDataSet":[{"groupName":"CG","consumeType":"CONSUME_PASSIVELY","messageModel":"CLUSTERING","consumeFromWhere":"CONSUME_FROM_LAST_OFFSET","subscriptionDataSet":[{"classFilterMode":false,"topic":"T","subString":"*","tagsSet":[],"codeSet":[],"subVersion":1700000000000,"expressionType":"TAG"},{"classFilterMode":false,"topic":"%RETRY%CG","subString":"*","tagsSet":[],"codeSet":[],"subVersion":1700000000001,"expressionType":"TAG"}],"unitMode":false}],"heartbeatFingerprint":0,"withoutSub":false}"#;

    /// A heartbeat as ali-ons sends it: no expressionType, fingerprint or withoutSub.
    const ALI_ONS_HEARTBEAT: &str = r#"{"clientID":"10.0.0.5@4242","consumerDataSet":[{"groupName":"CG","consumeType":"CONSUME_PASSIVELY","messageModel":"CLUSTERING","consumeFromWhere":"CONSUME_FROM_LAST_OFFSET","subscriptionDataSet":[{"topic":"T","subString":"*","classFilterMode":false,"tagsSet":[],"codeSet":[],"subVersion":1700000000000}],"unitMode":false}],"producerDataSet":[]}"#;

    #[test]
    fn given_rust_client_heartbeat_when_parsing_should_read_every_field() {
        let hb = HeartbeatData::from_json_slice(RUST_CLIENT_HEARTBEAT.as_bytes()).expect("parses");
        assert_eq!(hb.client_id, "192.168.1.10@12345#1700000000000");
        assert_eq!(hb.producer_data_set.len(), 2);
        let cg = hb.consumer_data_set.first().expect("one consumer group");
        assert_eq!(cg.consume_type, ConsumeType::ConsumePassively);
        assert_eq!(cg.message_model, MessageModel::Clustering);
        assert_eq!(cg.consume_from_where, ConsumeFromWhere::ConsumeFromLastOffset);
        assert_eq!(cg.subscription_data_set.len(), 2);
        let retry = cg.subscription_data_set.get(1).expect("retry subscription");
        assert_eq!(retry.topic, "%RETRY%CG");
        assert_eq!(retry.sub_string, "*");
        assert_eq!(retry.sub_version, 1_700_000_000_001);
        assert_eq!(retry.expression_type, ExpressionType::Tag);
        let back = HeartbeatData::from_json_slice(&hb.to_json_bytes().expect("serialisable"))
            .expect("re-parses");
        assert_eq!(back, hb, "heartbeat round trip");
    }

    /// A heartbeat as rocketmq-client-go v2.1 sends it (client-wire-facts row 14): `codeSet`
    /// as JSON strings, `subVersion` in nanoseconds, the raw `subString`, no fingerprint, and
    /// the hard-coded `consumeType:"PUSH"` (kept as an unknown name).
    const GO_CLIENT_HEARTBEAT: &str = r#"{"clientID":"10.0.0.7@12345#1700000000000000000","producerDataSet":[{"groupName":"PG"}],"consumerDataSet":[{"groupName":"CG","consumeType":"PUSH","messageModel":"CLUSTERING","consumeFromWhere":"CONSUME_FROM_FIRST_OFFSET","subscriptionDataSet":[{"classFilterMode":false,"topic":"T","subString":"TagA || TagB","tagsSet":["TagA","TagB"],"codeSet":["2598919","2598920"],"subVersion":1700000000123456789,"expressionType":"TAG"},{"classFilterMode":false,"topic":"%RETRY%CG","subString":"*","tagsSet":[],"codeSet":[],"subVersion":1700000000123456790,"expressionType":"TAG"}],"unitMode":false}]}"#;

    #[test]
    fn given_go_client_heartbeat_when_parsing_should_read_string_codes_and_nanosecond_versions() {
        let hb = HeartbeatData::from_json_slice(GO_CLIENT_HEARTBEAT.as_bytes()).expect("parses");
        let sub = hb
            .consumer_data_set
            .first()
            .and_then(|c| c.subscription_data_set.first())
            .expect("subscription");
        assert_eq!(sub.code_set, vec![2_598_919, 2_598_920], "codes given as strings");
        assert_eq!(sub.tags_set, vec!["TagA".to_string(), "TagB".to_string()]);
        assert_eq!(sub.sub_version, 1_700_000_000_123_456_789, "nanoseconds fit");
        let cg = hb.consumer_data_set.first().expect("one consumer group");
        assert_eq!(cg.consume_type, ConsumeType::Other("PUSH".into()));
        assert_eq!(cg.message_model, MessageModel::Clustering);
        let mixed = HeartbeatData::from_json_slice(
            br#"{"consumerDataSet":[{"groupName":"G","subscriptionDataSet":[{"topic":"T","codeSet":[1,"-2"," 3",null,"x"]}]}]}"#,
        )
        .expect("ints, strings and junk codes are all tolerated");
        let sub = mixed
            .consumer_data_set
            .first()
            .and_then(|c| c.subscription_data_set.first())
            .expect("subscription");
        assert_eq!(sub.code_set, vec![1, -2, 3], "unparsable codes are skipped");
    }

    #[test]
    fn given_go_2_0_heartbeat_with_producer_names_as_strings_when_parsing_should_read_them() {
        // rocketmq-client-go 2.0 declares `type producerData string`: the set is a list of names.
        let hb = HeartbeatData::from_json_slice(
            br#"{"clientID":"10.0.0.7@1","producerDataSet":["PG",{"groupName":"PG2"},7],"consumerDataSet":[{"groupName":"CG","consumeType":"PUSH","messageModel":"CLUSTERING","consumeFromWhere":"CONSUME_FROM_FIRST_OFFSET","subscriptionDataSet":[],"unitMode":false}]}"#,
        )
        .expect("a Go 2.0 heartbeat parses");
        let names: Vec<&str> = hb.producer_data_set.iter().map(|p| p.group_name.as_str()).collect();
        assert_eq!(names, ["PG", "PG2", ""], "names, objects, and junk as an empty name");
        assert_eq!(hb.consumer_data_set.len(), 1);
    }

    #[test]
    fn given_ali_ons_heartbeat_when_parsing_should_default_missing_fields() {
        let hb = HeartbeatData::from_json_slice(ALI_ONS_HEARTBEAT.as_bytes()).expect("parses");
        let sub = hb
            .consumer_data_set
            .first()
            .and_then(|c| c.subscription_data_set.first())
            .expect("subscription");
        assert_eq!(sub.expression_type, ExpressionType::Tag, "missing expressionType is TAG");
        assert_eq!(hb.heartbeat_fingerprint, 0);
        assert!(!hb.without_sub);
    }

    #[test]
    fn given_unknown_enum_names_and_nulls_when_parsing_should_not_fail() {
        let hb = HeartbeatData::from_json_slice(
            br#"{"clientID":null,"consumerDataSet":[{"groupName":"G","consumeType":"CONSUME_SOMEHOW","messageModel":null,"consumeFromWhere":3,"subscriptionDataSet":null}],"extra":{"x":1}}"#,
        )
        .expect("lenient");
        let cg = hb.consumer_data_set.first().expect("group");
        assert_eq!(cg.consume_type, ConsumeType::Other("CONSUME_SOMEHOW".into()));
        assert_eq!(cg.message_model, MessageModel::Clustering, "null is the default");
        assert_eq!(cg.consume_from_where, ConsumeFromWhere::Other("3".into()));
        assert!(cg.subscription_data_set.is_empty());
        let json = serde_json::to_string(&cg.consume_type).expect("serialisable");
        assert_eq!(json, r#""CONSUME_SOMEHOW""#, "unknown names are kept verbatim");
    }

    #[test]
    fn given_check_client_config_body_when_round_tripping_should_be_identical() {
        let body = CheckClientConfigBody {
            client_id: "c".into(),
            group: "g".into(),
            subscription_data: SubscriptionData {
                topic: "T".into(),
                sub_string: "a > 1".into(),
                expression_type: ExpressionType::Sql92,
                ..SubscriptionData::default()
            },
            namespace: None,
        };
        let json = body.to_json_bytes().expect("serialisable");
        assert_eq!(CheckClientConfigBody::from_json_slice(&json).expect("parses"), body);
    }
}
