//! The gRPC face's sessions as the core's admin views list clients
//! ([`ClientDirectory`](crate::broker::core::clients::ClientDirectory)), registered as Apache's
//! proxy registers gRPC clients with its broker (`ClientActivity.registerProducer` /
//! `registerConsumer`): a producer in one producer group per topic its Settings publish to, a
//! consumer in its group with its subscriptions, `CONSUME_ACTIVELY` for a SimpleConsumer and
//! `CONSUME_PASSIVELY` for a PushConsumer; client id, the address of its connection, the
//! language of its `x-mq-language` header. A session the face forgets (NotifyClientTermination,
//! expiry) is no longer listed.

use std::time::Instant;

use super::pb::{settings::PubSub, ClientType, FilterType, Settings};
use super::GrpcState;
use crate::broker::core::clients::{ClientConn, ClientDirectory, FaceClient, FaceRole};
use crate::remoting::body::{ConsumeType, ExpressionType, SubscriptionData};
use crate::remoting::subscription::{SubscriptionExpr, SUB_ALL};
use crate::remoting::{LanguageCode, BROKER_VERSION};
use crate::sync::Arc;

/// The gRPC face's sessions, for the core.
#[derive(Debug)]
pub(crate) struct GrpcClients(pub(crate) Arc<GrpcState>);

/// The remoting language of an SDK's `x-mq-language` (the proto's `Language` names; those
/// that differ from RocketMQ's `LanguageCode` are mapped, unknown ones are `OTHER`).
pub(crate) fn language(header: &str) -> LanguageCode {
    match header.to_ascii_uppercase().as_str() {
        "GOLANG" => LanguageCode::Go,
        "DOT_NET" => LanguageCode::Dotnet,
        other => LanguageCode::from_name(other),
    }
}

/// A v2 subscription entry as RocketMQ's `FilterAPI.build` makes it a `SubscriptionData`.
fn subscription(
    topic: &str,
    kind: FilterType,
    expression: &str,
    version_ms: u64,
) -> SubscriptionData {
    let mut sd = SubscriptionData {
        topic: topic.to_owned(),
        sub_version: version_ms as i64,
        ..SubscriptionData::default()
    };
    if kind == FilterType::Sql {
        sd.expression_type = ExpressionType::Sql92;
        sd.sub_string = expression.to_owned();
        return sd;
    }
    sd.expression_type = ExpressionType::Tag;
    let parsed = SubscriptionExpr::parse(expression);
    sd.code_set = parsed.codes();
    match parsed {
        SubscriptionExpr::All => sd.sub_string = SUB_ALL.to_owned(),
        SubscriptionExpr::Tags(tags) => {
            sd.sub_string = expression.to_owned();
            sd.tags_set = tags;
        }
    }
    sd
}

/// What a session's Settings make it in the admin views.
fn role(settings: Option<&Settings>, client_type: ClientType, seen_ms: u64) -> FaceRole {
    match settings.and_then(|s| s.pub_sub.as_ref()) {
        Some(PubSub::Publishing(p)) => {
            FaceRole::Producer(p.topics.iter().map(|t| t.name.clone()).collect())
        }
        Some(PubSub::Subscription(sub)) => {
            let Some(group) = sub.group.as_ref().map(|g| g.name.clone()) else {
                return FaceRole::Unknown;
            };
            let subscriptions = sub
                .subscriptions
                .iter()
                .filter_map(|e| {
                    let topic = e.topic.as_ref()?;
                    let (kind, text) = e.expression.as_ref().map_or((FilterType::Tag, ""), |x| {
                        (
                            FilterType::try_from(x.r#type).unwrap_or(FilterType::Tag),
                            x.expression.as_str(),
                        )
                    });
                    Some(subscription(&topic.name, kind, text, seen_ms))
                })
                .collect();
            let consume_type = match client_type {
                ClientType::SimpleConsumer => ConsumeType::ConsumeActively,
                _ => ConsumeType::ConsumePassively,
            };
            FaceRole::Consumer { group, consume_type, subscriptions }
        }
        None => FaceRole::Unknown,
    }
}

/// The client type of the last Heartbeat, else of the Settings.
fn client_type(st: &super::session::SessionState) -> ClientType {
    match (st.client_type, st.settings.as_ref()) {
        (ClientType::Unspecified, Some(s)) => s
            .client_type
            .and_then(|t| ClientType::try_from(t).ok())
            .unwrap_or(ClientType::Unspecified),
        (ty, _) => ty,
    }
}

impl ClientDirectory for GrpcClients {
    fn clients(&self) -> Vec<FaceClient> {
        let now = Instant::now();
        let now_ms = crate::time::now_ms();
        self.0
            .sessions
            .all()
            .into_iter()
            .map(|s| {
                let st = s.state();
                let ago = now.saturating_duration_since(st.last_seen).as_millis() as u64;
                let last_seen_ms = now_ms.saturating_sub(ago);
                let lang = st.sdk.as_ref().map_or(LanguageCode::Other, |(l, _)| language(l));
                FaceClient {
                    conn: ClientConn {
                        client_id: s.client_id().to_owned(),
                        addr: s.origin().map(|a| a.to_string()).unwrap_or_default(),
                        language: lang,
                        // Apache's proxy reads `x-mq-client-version` as a `MQVersion` name
                        // (`V5_0_0`), which no SDK sends (`5.0.7`), and falls back to its own
                        // version: the broker's.
                        version: BROKER_VERSION,
                    },
                    last_seen_ms,
                    role: role(st.settings.as_ref(), client_type(&st), last_seen_ms),
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn given_sdk_language_names_when_mapped_should_be_rocketmq_language_codes() {
        assert_eq!(language("GOLANG"), LanguageCode::Go);
        assert_eq!(language("PYTHON"), LanguageCode::Python);
        assert_eq!(language("DOT_NET"), LanguageCode::Dotnet);
        assert_eq!(language("NODE_JS"), LanguageCode::NodeJs);
        assert_eq!(language("klingon"), LanguageCode::Other);
    }

    #[test]
    fn given_tag_and_sql_entries_when_converted_should_read_as_filter_api_builds_them() {
        let all = subscription("T", FilterType::Tag, "*", 7);
        assert_eq!((all.sub_string.as_str(), all.tags_set.len()), ("*", 0));
        let tags = subscription("T", FilterType::Tag, "a || b", 7);
        assert_eq!(tags.tags_set, vec!["a".to_owned(), "b".to_owned()]);
        assert_eq!(tags.code_set.len(), 2);
        let sql = subscription("T", FilterType::Sql, "a > 1", 7);
        assert_eq!(
            (sql.expression_type, sql.sub_string.as_str()),
            (ExpressionType::Sql92, "a > 1")
        );
    }
}
