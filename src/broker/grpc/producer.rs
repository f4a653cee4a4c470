//! The producer RPCs: SendMessage, EndTransaction and RecallMessage
//! (`rocketmq5-grpc-pop-transactions.md` 1.5 and 1.9).
//!
//! `SendMessage` turns each v2 `Message` into the properties a remoting producer would have
//! sent (`UNIQ_KEY` = the client's message id, `TAGS`, `KEYS`, `__SHARDINGKEY`,
//! `TIMER_DELIVER_MS`, `TRAN_MSG` + `PGROUP` = the topic, as the proxy names gRPC producers),
//! and the view of them the core routes on straight from the message's fields (no parse of the
//! string it wrote), and stores it through the core's send path
//! ([`store_message`](crate::broker::core::send::store_message)): the same checks,
//! auto-creation, timers, half messages and counters as a remoting send. A refusal is the
//! core's [`SendError`](crate::broker::core::send::SendError), mapped to a `Code` by
//! [`send_status`](super::status::send_status). A FIFO message's group picks its queue
//! (`send::group_queue`), deterministically; the client's `queue_id` is ignored, as the proxy
//! ignores it.

use crate::sync::Arc;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use tonic::Request;

use super::convert::{duration_ms, is_system_key, timestamp_ms, TRACE_CONTEXT};
use super::pb::{
    self, Code, Encoding, EndTransactionRequest, EndTransactionResponse, MessageType,
    RecallMessageRequest, RecallMessageResponse, SendMessageRequest, SendMessageResponse,
    SendResultEntry, TransactionResolution, TransactionSource,
};
use super::service::Messaging;
use super::session::Session;
use super::status::{end_status, ok, recall_status, send_status, status};
use super::GrpcState;
use crate::broker::core::recall::recall;
use crate::broker::core::send::{send, Incoming, QueueChoice};
use crate::broker::core::topics;
use crate::broker::core::transaction::{
    self, CheckProducer, Ended, HalfCheck, ProducerCheck, CHECK_IMMUNITY,
};
use crate::broker::core::Core;
use crate::remoting::message::sys_flag;
use crate::remoting::properties::{self, Routing, MAX_PROPERTIES_LEN};
use crate::time::now_ms;

/// Most user properties a message may carry (the proxy's `maxUserPropertySize`).
pub(crate) const MAX_USER_PROPERTIES: usize = 128;
/// Most bytes of user properties (keys and values) a message may carry (the proxy's 16 KiB).
pub(crate) const MAX_USER_PROPERTIES_BYTES: usize = 16 * 1024;
/// Longest message group, bytes (the proxy's `maxMessageGroupSize`).
pub(crate) const MAX_MESSAGE_GROUP_LEN: usize = 64;
/// Longest orphaned-transaction recovery delay honoured, seconds (the proxy's 1 h).
const MAX_RECOVERY_SECS: u64 = 3600;

/// A status with `code`, for a message refused before it reached the store.
fn refuse(code: Code, message: impl Into<String>) -> pb::Status {
    status(code, message)
}

fn has_control(s: &str) -> bool {
    s.chars().any(char::is_control)
}

/// The properties, sys flag and queue choice of one v2 message, or the status refusing it.
#[derive(Debug)]
struct Converted {
    properties: Vec<u8>,
    sys_flag: i32,
    born_timestamp: i64,
    born_host: Option<IpAddr>,
    group: Option<String>,
    /// The values of `properties` the core routes on that are not the message's own fields.
    keys: Option<String>,
    due: Option<String>,
    immunity: Option<String>,
    transaction: bool,
}

impl Converted {
    /// The view of `properties` the core routes on, from the message's fields (the same
    /// values [`Routing::parse`] would read from the string [`convert`] wrote: its system
    /// pairs are the reserved keys, which no user property may use, except
    /// `CHECK_IMMUNITY_TIME_IN_SECONDS`, where a user's non-empty value comes first).
    fn routing<'a>(&'a self, m: &'a pb::Message, topic: &'a str) -> Routing<'a> {
        let sys = m.system_properties.as_ref();
        let user = |k: &str| m.user_properties.get(k).map(String::as_str).filter(|v| !v.is_empty());
        Routing {
            uniq_key: sys.map(|s| s.message_id.as_str()),
            tags: sys.and_then(|s| s.tag.as_deref()),
            keys: self.keys.as_deref(),
            timer_deliver_ms: self.due.as_deref(),
            tran_msg: self.transaction.then_some("true"),
            pgroup: self.transaction.then_some(topic),
            check_immunity: user(CHECK_IMMUNITY).or(self.immunity.as_deref()),
            ..Routing::default()
        }
    }
}

fn convert(max_delay_sec: u64, topic: &str, m: &pb::Message) -> Result<Converted, pb::Status> {
    let none = pb::SystemProperties::default();
    let sys = m.system_properties.as_ref().unwrap_or(&none);
    let mut props = Vec::new();
    let mut put = |k: &str, v: &str, code: Code| {
        properties::write_pair(&mut props, k, v)
            .map_err(|_| refuse(code, format!("{k} must not contain the characters 0x01 or 0x02")))
    };
    if sys.message_id.trim().is_empty() {
        return Err(refuse(Code::IllegalMessageId, "message id cannot be blank"));
    }
    put(properties::UNIQ_KEY, &sys.message_id, Code::IllegalMessageId)?;
    if let Some(tag) = &sys.tag {
        if tag.trim().is_empty() || tag.contains('|') || has_control(tag) {
            return Err(refuse(
                Code::IllegalMessageTag,
                "tag cannot be blank, contain '|' or control characters",
            ));
        }
        put(properties::TAGS, tag, Code::IllegalMessageTag)?;
    }
    if !sys.keys.is_empty() {
        if sys.keys.iter().any(|k| k.trim().is_empty() || has_control(k)) {
            return Err(refuse(
                Code::IllegalMessageKey,
                "a key cannot be blank or contain control characters",
            ));
        }
        put(properties::KEYS, &sys.keys.join(" "), Code::IllegalMessageKey)?;
    }
    let keys = (!sys.keys.is_empty()).then(|| sys.keys.join(" "));
    let mut user_bytes = 0usize;
    if m.user_properties.len() > MAX_USER_PROPERTIES {
        return Err(refuse(
            Code::MessagePropertiesTooLarge,
            format!("at most {MAX_USER_PROPERTIES} user properties are accepted"),
        ));
    }
    // Sorted, so the stored properties do not depend on the map's iteration order.
    let mut user: Vec<(&String, &String)> = m.user_properties.iter().collect();
    user.sort();
    for (k, v) in user {
        if k.is_empty() || is_system_key(k) || has_control(k) {
            return Err(refuse(
                Code::IllegalMessagePropertyKey,
                format!("property key {k:?} is reserved or illegal"),
            ));
        }
        user_bytes += k.len() + v.len();
        put(k, v, Code::IllegalMessagePropertyKey)?;
    }
    if user_bytes > MAX_USER_PROPERTIES_BYTES {
        return Err(refuse(
            Code::MessagePropertiesTooLarge,
            format!("user properties take {user_bytes} bytes; at most {MAX_USER_PROPERTIES_BYTES}"),
        ));
    }
    let ty = MessageType::try_from(sys.message_type).unwrap_or(MessageType::Unspecified);
    let group = sys.message_group.clone().filter(|_| ty != MessageType::Transaction);
    if let Some(g) = &sys.message_group {
        if g.trim().is_empty() || g.len() > MAX_MESSAGE_GROUP_LEN || has_control(g) {
            return Err(refuse(
                Code::IllegalMessageGroup,
                format!("message group must be 1 to {MAX_MESSAGE_GROUP_LEN} bytes without control characters"),
            ));
        }
        put(properties::SHARDING_KEY, g, Code::IllegalMessageGroup)?;
    }
    let mut due_ms = None;
    if let Some(at) = &sys.delivery_timestamp {
        let due = timestamp_ms(at);
        let max_ms = i64::try_from(max_delay_sec.saturating_mul(1000)).unwrap_or(i64::MAX);
        let now = i64::try_from(now_ms()).unwrap_or(i64::MAX);
        if due.saturating_sub(now) > max_ms {
            return Err(refuse(
                Code::IllegalDeliveryTime,
                format!("the delivery time is more than {max_ms} ms ahead"),
            ));
        }
        let due = due.max(0).to_string();
        put(properties::TIMER_DELIVER_MS, &due, Code::IllegalDeliveryTime)?;
        due_ms = Some(due);
    }
    if let Some(trace) = sys.trace_context.as_deref().filter(|t| !t.is_empty()) {
        put(TRACE_CONTEXT, trace, Code::BadRequest)?;
    }
    let mut flag = 0;
    let mut immunity = None;
    let transaction = ty == MessageType::Transaction;
    if transaction {
        put(properties::TRAN_MSG, "true", Code::BadRequest)?;
        put(properties::PGROUP, topic, Code::IllegalTopic)?;
        if let Some(d) = &sys.orphaned_transaction_recovery_duration {
            let secs = ((duration_ms(d) / 1000).min(MAX_RECOVERY_SECS)).to_string();
            put(CHECK_IMMUNITY, &secs, Code::BadRequest)?;
            immunity = Some(secs);
        }
        flag |= sys_flag::TRANSACTION_PREPARED;
    }
    if sys.body_encoding == Encoding::Gzip as i32 {
        flag |= sys_flag::COMPRESSED;
    }
    if props.len() > MAX_PROPERTIES_LEN {
        return Err(refuse(
            Code::MessagePropertiesTooLarge,
            "the message properties are too large",
        ));
    }
    Ok(Converted {
        properties: props,
        sys_flag: flag,
        born_timestamp: sys.born_timestamp.as_ref().map_or(0, timestamp_ms),
        born_host: sys.born_host.parse().ok(),
        group,
        keys,
        due: due_ms,
        immunity,
        transaction,
    })
}

/// Stores one message; its result entry.
async fn send_one(svc: &Messaging, peer: SocketAddr, m: &pb::Message) -> SendResultEntry {
    let failed = |s: pb::Status| SendResultEntry { status: Some(s), ..SendResultEntry::default() };
    let topic = m.topic.as_ref().map(|t| t.name.as_str()).unwrap_or_default();
    if let Err(remark) = topics::validate_topic(topic) {
        return failed(refuse(Code::IllegalTopic, remark));
    }
    if topics::is_system_topic(topic)
        || topic.starts_with(topics::RETRY_PREFIX)
        || topic.starts_with(topics::DLQ_PREFIX)
    {
        return failed(refuse(Code::IllegalTopic, format!("cannot send to topic {topic}")));
    }
    if m.body.is_empty() {
        return failed(refuse(Code::MessageBodyEmpty, "the message body is empty"));
    }
    let c = match convert(svc.core.config.timer_max_delay_sec, topic, m) {
        Ok(c) => c,
        Err(s) => return failed(s),
    };
    let incoming = Incoming {
        topic,
        default_topic: "",
        default_queues: i32::try_from(svc.core.config.default_queues).unwrap_or(8),
        queue: match &c.group {
            Some(g) => QueueChoice::Group(g),
            None => QueueChoice::Any,
        },
        flag: 0,
        sys_flag: c.sys_flag,
        born_timestamp: c.born_timestamp,
        born_host: c.born_host.map_or(peer, |ip| SocketAddr::new(ip, peer.port())),
        reconsume_times: 0,
        max_reconsume_times: i32::MAX,
        body: &m.body,
        properties: &c.properties,
        routing: c.routing(m, topic),
    };
    match send(&svc.core, &incoming).await {
        Ok(stored) => SendResultEntry {
            status: Some(ok()),
            message_id: stored.uniq_key.clone(),
            transaction_id: if stored.half { stored.uniq_key } else { String::new() },
            offset: i64::try_from(stored.queue_offset).unwrap_or(i64::MAX),
            recall_handle: stored.recall_handle.unwrap_or_default(),
        },
        Err(e) => failed(send_status(&e)),
    }
}

/// `SendMessage`: each message stored on its own; the response status is the entries' common
/// one, or `MULTIPLE_RESULTS` when they differ (as the proxy answers).
pub(crate) async fn send_message(
    svc: &Messaging,
    request: Request<SendMessageRequest>,
) -> SendMessageResponse {
    if let Err(s) = svc.session(&request) {
        return SendMessageResponse { status: Some(s), entries: Vec::new() };
    }
    let peer =
        request.remote_addr().unwrap_or(SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0));
    let req = request.into_inner();
    if req.messages.is_empty() {
        return SendMessageResponse {
            status: Some(status(Code::BadRequest, "no message to send")),
            entries: Vec::new(),
        };
    }
    let mut entries = Vec::with_capacity(req.messages.len());
    for m in &req.messages {
        entries.push(send_one(svc, peer, m).await);
    }
    let first = entries.first().and_then(|e| e.status.clone()).unwrap_or_else(ok);
    let same = entries.iter().all(|e| e.status.as_ref().map(|s| s.code) == Some(first.code));
    let status = if same { first } else { status(Code::MultipleResults, "multiple results") };
    SendMessageResponse { status: Some(status), entries }
}

/// `EndTransaction`: commits or rolls back the half message the transaction id names (1.9).
/// An unknown resolution (the client's UNKNOWN) decides nothing and is answered OK.
pub(crate) fn end_transaction(
    svc: &Messaging,
    request: Request<EndTransactionRequest>,
) -> EndTransactionResponse {
    let answer = |s: pb::Status| EndTransactionResponse { status: Some(s) };
    if let Err(s) = svc.session(&request) {
        return answer(s);
    }
    let req = request.into_inner();
    if req.transaction_id.trim().is_empty() {
        return answer(status(Code::InvalidTransactionId, "the transaction id is blank"));
    }
    let commit = match TransactionResolution::try_from(req.resolution) {
        Ok(TransactionResolution::Commit) => true,
        Ok(TransactionResolution::Rollback) => false,
        _ => return answer(ok()),
    };
    let from_check = req.source == TransactionSource::SourceServerCheck as i32;
    match transaction::end_by_transaction_id(&svc.core, &req.transaction_id, commit, from_check) {
        Some(Ended::Done) => answer(ok()),
        Some(Ended::Refused(e)) => {
            // The client sees the status (unlike remoting's one-way END_TRANSACTION): debug only.
            tracing::debug!(transaction = %req.transaction_id, error = %e, "gRPC EndTransaction refused");
            answer(end_status(&e))
        }
        None => {
            svc.core.transactions.refused();
            answer(status(
                Code::InvalidTransactionId,
                format!("no undecided transaction {}", req.transaction_id),
            ))
        }
    }
}

/// `RecallMessage`: takes a timer message back before it is due, by the handle its send
/// receipt carried ([`recall`]); OK with the message id, or the proxy's refusal
/// ([`recall_status`]).
pub(crate) fn recall_message(
    svc: &Messaging,
    request: Request<RecallMessageRequest>,
) -> RecallMessageResponse {
    let answer =
        |s: pb::Status, message_id: String| RecallMessageResponse { status: Some(s), message_id };
    if let Err(s) = svc.session(&request) {
        return answer(s, String::new());
    }
    let req = request.into_inner();
    let topic = req.topic.as_ref().map(|t| t.name.as_str()).unwrap_or_default();
    if let Err(remark) = topics::validate_topic(topic) {
        return answer(refuse(Code::IllegalTopic, remark), String::new());
    }
    match recall(&svc.core, topic, &req.recall_handle) {
        Ok(r) => answer(ok(), r.msg_id),
        Err(e) => answer(recall_status(&e), String::new()),
    }
}

/// The gRPC face's producers, as the transaction checker reaches them: a producer publishing
/// to the topic the half message's group names (gRPC producers' group is the topic, as the
/// proxy names them), with a Telemetry stream open.
#[derive(Debug)]
pub(crate) struct GrpcProducers(pub(crate) Arc<GrpcState>);

impl ProducerCheck for GrpcProducers {
    fn producer(&self, _core: &Core, group: &str) -> Option<Box<dyn CheckProducer>> {
        let session = self.0.sessions.producers_of(group).into_iter().next()?;
        Some(Box::new(TelemetryStream(session)))
    }
}

/// A gRPC producer's Telemetry stream: it gets a `RecoverOrphanedTransactionCommand` with the
/// message (real topic and queue, as the proxy sends it), and answers with
/// `EndTransaction{source = SOURCE_SERVER_CHECK}`. Never waits: a producer not reading its
/// stream misses this check.
struct TelemetryStream(Arc<Session>);

impl CheckProducer for TelemetryStream {
    fn ask(&self, core: &Core, half: &HalfCheck<'_>) -> bool {
        let d = &half.record;
        let p = d.properties;
        let real_topic = properties::find(p, properties::REAL_TOPIC).unwrap_or_default();
        let queue_id = properties::find(p, properties::REAL_QID)
            .and_then(|q| q.trim().parse().ok())
            .unwrap_or(0);
        let transaction_id =
            properties::find(p, properties::UNIQ_KEY).unwrap_or_default().to_owned();
        let at = super::convert::Delivered {
            topic: real_topic,
            queue_id,
            queue_offset: i64::try_from(half.offset).unwrap_or(i64::MAX),
            store_timestamp_ms: i64::try_from(half.stored_at).unwrap_or(i64::MAX),
            store_host: core.store_host,
            receipt_handle: None,
            invisible_ms: None,
            reconsume_times: d.reconsume_times,
        };
        let message = super::convert::to_message(d, &at);
        let cmd = pb::TelemetryCommand {
            status: None,
            command: Some(pb::telemetry_command::Command::RecoverOrphanedTransactionCommand(
                pb::RecoverOrphanedTransactionCommand { message: Some(message), transaction_id },
            )),
        };
        self.0.push(cmd)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(ty: MessageType, user: &[(&str, &str)]) -> pb::Message {
        pb::Message {
            topic: Some(pb::Resource { resource_namespace: String::new(), name: "T".into() }),
            user_properties: user.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            system_properties: Some(pb::SystemProperties {
                message_id: "01ABC".into(),
                tag: Some("TagA".into()),
                keys: vec!["k1".into(), "k2".into()],
                message_type: ty as i32,
                delivery_timestamp: Some(super::super::convert::timestamp(
                    i64::try_from(now_ms()).unwrap_or(i64::MAX) + 5_000,
                )),
                orphaned_transaction_recovery_duration: Some(super::super::convert::duration(
                    30_000,
                )),
                ..Default::default()
            }),
            body: b"body".to_vec(),
        }
    }

    #[test]
    fn given_v2_messages_when_converted_should_route_as_the_written_string_parses() {
        let cases = [
            message(MessageType::Normal, &[]),
            message(MessageType::Delay, &[("color", "blue")]),
            message(MessageType::Transaction, &[]),
            message(MessageType::Transaction, &[(CHECK_IMMUNITY, "7")]),
            message(MessageType::Transaction, &[(CHECK_IMMUNITY, "")]),
            message(MessageType::Normal, &[(CHECK_IMMUNITY, "9")]),
        ];
        for m in &cases {
            let c = convert(3600, "T", m).expect("a valid message");
            assert_eq!(
                c.routing(m, "T"),
                Routing::parse(&c.properties),
                "the view from the fields is the view of the string: {:?}",
                c.properties
            );
        }
    }
}
