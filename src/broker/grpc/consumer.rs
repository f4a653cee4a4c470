//! The consumer RPCs: ReceiveMessage, AckMessage, ChangeInvisibleDuration,
//! ForwardMessageToDeadLetterQueue and QueryAssignment ([`service`](super::service) delegates
//! each here), over the POP consumption the remoting face uses ([`crate::broker::core::pop`]).
//!
//! * **ReceiveMessage** (`docs/rocketmq5-grpc-pop-transactions.md` 1.6) pops every queue of this broker for the group (the
//!   request's queue id is ignored, as the proxy ignores it), long-polling for the request's
//!   `long_polling_timeout` (else the deadline less half the request timeout) clamped to
//!   [5 s, 20 s] and to the deadline; a deadline under 5 s is `ILLEGAL_POLLING_TIME`. A simple
//!   consumer's `invisible_duration` must lie in [10 s, 12 h] (`ILLEGAL_INVISIBLE_TIME`); a push
//!   consumer's `auto_renew` pops for 60 s and the broker renews the delivery while the client
//!   lives ([`crate::broker::grpc::receipt`]). FIFO groups pop in order, blocked per queue, with the
//!   request's `attempt_id`. Messages whose attempts ran out (the group's `retryMaxTimes + 1`)
//!   go to `%DLQ%<group>` instead. The stream is `status OK, message…, delivery_timestamp`, or
//!   `status MESSAGE_NOT_FOUND, delivery_timestamp`, or one error status.
//! * **AckMessage**, **ChangeInvisibleDuration** (which answers a new handle; the old one is
//!   then refused) and **ForwardMessageToDeadLetterQueue** take the receipt handles of
//!   [`ReceiptHandle`]; one that does not parse, names another topic or is no longer the
//!   latest delivery is `INVALID_RECEIPT_HANDLE` (40013), on which clients stop retrying.
//! * **QueryAssignment** (1.2): one queue with id -1 for this broker, or every readable queue
//!   for a FIFO group.
//!
//! A message popped for a client that went away before the answer was handed to the
//! transport is nacked (visible again after 1 s), as the proxy does ([`Delivering`]); an
//! `auto_renew` delivery is renewed only from then on.

use crate::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tonic::{Request, Response};

use super::convert::{duration_ms, timestamp, to_message, Delivered};
use super::pb::{
    self, receive_message_response::Content, AckMessageRequest, AckMessageResponse,
    AckMessageResultEntry, Assignment, ChangeInvisibleDurationRequest,
    ChangeInvisibleDurationResponse, Code, FilterType, ForwardMessageToDeadLetterQueueRequest,
    ForwardMessageToDeadLetterQueueResponse, QueryAssignmentRequest, QueryAssignmentResponse,
    ReceiveMessageRequest, ReceiveMessageResponse,
};
use super::route;
use super::service::{Messaging, ReceiveStream};
use super::session::Session;
use super::settings::retry_max_times;
use super::status::{ok, status};
use super::GrpcState;
use crate::broker::core::groups::GroupError;
use crate::broker::core::pop::{self as popper, FilterExpr, PopCall, PopError};
use crate::broker::core::record;
use crate::broker::core::topics;
use crate::broker::core::Core;
use crate::broker::grpc::receipt::{ReceiptHandle, Taken, DEFAULT_INVISIBLE_MS, RENEW_TICK};
use crate::store::{AckOutcome, PopInit, PopReceipt, StoreError};
use crate::time::now_ms;

/// Shortest long-polling time, ms (the proxy's `grpcClientConsumerMinLongPollingTimeoutMillis`).
pub(crate) const MIN_POLLING_MS: u64 = 5_000;
/// Longest long-polling time, ms (`grpcClientConsumerMaxLongPollingTimeoutMillis`).
pub(crate) const MAX_POLLING_MS: u64 = 20_000;
/// Shortest invisible time a simple consumer may ask for, ms (`minInvisibleTimeMillsForRecv`).
pub(crate) const MIN_INVISIBLE_MS: u64 = 10_000;
/// Longest invisible time, ms (`maxInvisibleTimeMills`).
pub(crate) use crate::broker::core::pop::MAX_INVISIBLE_MS;
/// Most messages one receive hands out (RocketMQ's pop maximum).
pub(crate) const MAX_BATCH: usize = 32;
/// The request timeout assumed when a client's Settings name none, ms.
const DEFAULT_REQUEST_TIMEOUT_MS: u64 = 3_000;

fn name(r: Option<&pb::Resource>) -> &str {
    r.map_or("", |r| r.name.as_str())
}

/// The time left before the request's `grpc-timeout`, if it sent one.
fn remaining(metadata: &tonic::metadata::MetadataMap) -> Option<Duration> {
    let v = metadata.get("grpc-timeout")?.to_str().ok()?;
    let (digits, unit) = v.split_at(v.len().checked_sub(1)?);
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n.saturating_mul(3600)),
        "M" => Duration::from_secs(n.saturating_mul(60)),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

/// Whether `group` consumes in order: the client's Settings as the server answered them,
/// else the group's config.
fn fifo(core: &Core, session: &Session, group: &str) -> bool {
    let from_settings = match session.settings().and_then(|st| st.pub_sub) {
        Some(pb::settings::PubSub::Subscription(sub)) => sub.fifo,
        _ => None,
    };
    from_settings.unwrap_or_else(|| core.groups.orderly(group))
}

pub(crate) fn one_status(st: pb::Status) -> Result<Response<ReceiveStream>, tonic::Status> {
    let only = ReceiveMessageResponse { content: Some(Content::Status(st)) };
    let stream: ReceiveStream = Box::pin(tokio_stream::iter([Ok(only)]));
    Ok(Response::new(stream))
}

/// The status for a refused pop.
fn pop_status(e: &PopError) -> pb::Status {
    let code = match e {
        PopError::UnknownTopic(_) => Code::TopicNotFound,
        PopError::NoPermission(_) => Code::Forbidden,
        PopError::Group(GroupError::BadName) => Code::IllegalConsumerGroup,
        PopError::Group(GroupError::Unknown(_)) => Code::ConsumerGroupNotFound,
        PopError::BadQueue { .. } => Code::BadRequest,
        PopError::BadFilter(_) => Code::IllegalFilterExpression,
        PopError::Store(e) => return store_status(e),
    };
    status(code, e.to_string())
}

/// The status for a store error on a receipt or a pop.
fn store_status(e: &StoreError) -> pb::Status {
    let code = match e {
        StoreError::StaleReceipt { .. } => Code::InvalidReceiptHandle,
        StoreError::UnknownTopic(_) => Code::TopicNotFound,
        StoreError::UnknownGroup { .. } => Code::ConsumerGroupNotFound,
        // Retryable: the client backs off, and idle groups are released meanwhile.
        StoreError::Full { .. } | StoreError::TooManySubscriptions { .. } => Code::TooManyRequests,
        _ => Code::InternalServerError,
    };
    let message = match e {
        StoreError::StaleReceipt { .. } => format!("{e}: the receipt handle is stale"),
        other => other.to_string(),
    };
    status(code, message)
}

/// The polling time of a receive, or the status to answer when the deadline leaves too little.
fn polling_ms(
    req: &ReceiveMessageRequest,
    left: Option<Duration>,
    request_timeout_ms: u64,
) -> Result<u64, pb::Status> {
    let left_ms = left.map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    let asked = match (&req.long_polling_timeout, left_ms) {
        (Some(d), _) => duration_ms(d),
        (None, Some(left)) => left.saturating_sub(request_timeout_ms / 2),
        (None, None) => MAX_POLLING_MS,
    };
    let poll = asked.clamp(MIN_POLLING_MS, MAX_POLLING_MS);
    match left_ms {
        Some(left) if poll > left => {
            if left >= MIN_POLLING_MS {
                Ok(left)
            } else {
                Err(status(
                    Code::IllegalPollingTime,
                    format!("the deadline leaves {left} ms, less than the {MIN_POLLING_MS} ms of the shortest poll"),
                ))
            }
        }
        _ => Ok(poll),
    }
}

/// `ReceiveMessage` (server streaming).
pub(crate) async fn receive_message(
    svc: &Messaging,
    request: Request<ReceiveMessageRequest>,
) -> Result<Response<ReceiveStream>, tonic::Status> {
    let session = match svc.session(&request) {
        Ok(s) => s,
        Err(st) => return one_status(st),
    };
    let left = remaining(request.metadata());
    let req = request.into_inner();
    let core = &svc.core;
    let client = session.client_id().to_owned();
    let group = name(req.group.as_ref()).to_owned();
    let topic = name(req.message_queue.as_ref().and_then(|q| q.topic.as_ref())).to_owned();
    if group.is_empty() {
        return one_status(status(Code::IllegalConsumerGroup, "the consumer group is blank"));
    }
    if topic.is_empty() {
        return one_status(status(Code::IllegalTopic, "the topic is blank"));
    }
    let request_timeout_ms = session
        .settings()
        .and_then(|st| st.request_timeout)
        .map_or(DEFAULT_REQUEST_TIMEOUT_MS, |d| duration_ms(&d));
    let poll_ms = match polling_ms(&req, left, request_timeout_ms) {
        Ok(p) => p,
        Err(st) => return one_status(st),
    };
    let invisible_ms = if req.auto_renew {
        DEFAULT_INVISIBLE_MS
    } else {
        let asked = req.invisible_duration.as_ref().map(duration_ms);
        match asked {
            Some(ms) if (MIN_INVISIBLE_MS..=MAX_INVISIBLE_MS).contains(&ms) => ms,
            _ => {
                return one_status(status(
                    Code::IllegalInvisibleTime,
                    format!(
                        "the invisible duration {} is not within [{MIN_INVISIBLE_MS} ms, {MAX_INVISIBLE_MS} ms]",
                        asked.map_or_else(|| "(none)".to_owned(), |ms| format!("{ms} ms"))
                    ),
                ))
            }
        }
    };
    let expr = req.filter_expression.as_ref();
    let text = expr.map(|f| f.expression.trim()).filter(|e| !e.is_empty()).unwrap_or("*");
    let filter = match expr.map(|f| f.r#type) {
        Some(t) if t == FilterType::Sql as i32 => FilterExpr::Sql(text),
        _ => FilterExpr::Tag(text),
    };
    let call = PopCall {
        group: &group,
        topic: &topic,
        queue: None,
        max: usize::try_from(req.batch_size).unwrap_or(1).clamp(1, MAX_BATCH),
        invisible_ms,
        order: fifo(core, &session, &group),
        attempt_id: req.attempt_id.as_deref().filter(|a| !a.is_empty()),
        filter,
        init: PopInit::Max,
        max_attempts: retry_max_times(core, &group).saturating_add(1),
        seed: rand_seed(&client),
        // The request names its group, and RocketMQ creates a subscription group on first use
        // (`autoCreateSubscriptionGroup`, on by default): a SimpleConsumer may receive before
        // its Settings have reached the broker (Python does not wait for them).
        announced: true,
    };
    let deadline = tokio::time::Instant::now() + Duration::from_millis(poll_ms);
    let mut last = false;
    let mut items = loop {
        let batch = match popper::pop_once(core, &call, now_ms()) {
            Ok(b) => b,
            Err(e) => return one_status(pop_status(&e)),
        };
        let items = deliver(svc, invisible_ms, &batch);
        if !items.is_empty() {
            let mut all =
                vec![(ReceiveMessageResponse { content: Some(Content::Status(ok())) }, None)];
            all.extend(items);
            break all;
        }
        if last {
            let st = status(Code::MessageNotFound, "no new message");
            break vec![(ReceiveMessageResponse { content: Some(Content::Status(st)) }, None)];
        }
        // Cancelled with the request when the client goes away.
        last = !popper::wait_for_more(core, &batch, deadline).await;
    };
    let at = timestamp(i64::try_from(now_ms()).unwrap_or(i64::MAX));
    items.push((ReceiveMessageResponse { content: Some(Content::DeliveryTimestamp(at)) }, None));
    let stream: ReceiveStream = Box::pin(Delivering {
        items: items.into(),
        core: Arc::clone(&svc.core),
        grpc: Arc::clone(&svc.grpc),
        client,
        group,
        renew: req.auto_renew.then_some(invisible_ms),
    });
    Ok(Response::new(stream))
}

/// Spreads the first queue popped over clients.
fn rand_seed(client: &str) -> u32 {
    client.bytes().fold(0u32, |h, b| h.wrapping_mul(31).wrapping_add(u32::from(b)))
}

/// A delivered message the stream still holds: the topic it is stored in (the one received
/// from, or the group's pop retry topic) and its receipt.
type Held = (Arc<str>, PopReceipt);

/// The messages of a pop as stream items (with their receipt handles), each with what
/// [`Delivering`] needs to settle it. The batch counts them out, and acknowledges a record
/// that cannot be read (it would come back forever). A message revived into the group's pop
/// retry topic is shown under the topic received from, with its queue and offset there, its
/// stored reconsume count and a handle naming the retry topic (as the proxy shows what
/// RocketMQ's revive copied).
fn deliver(
    svc: &Messaging,
    invisible_ms: u64,
    batch: &popper::PopBatch,
) -> Vec<(ReceiveMessageResponse, Option<Held>)> {
    let shown = batch.topic.name();
    let names: Vec<(u32, Arc<str>)> = std::iter::once(&batch.topic)
        .chain(batch.retried.as_ref().map(|r| &r.topic))
        .map(|t| (t.uid(), Arc::from(t.name())))
        .collect();
    let mut items = Vec::with_capacity(batch.len());
    batch.write_out(|t, m| {
        let d = &m.delivery;
        let rec = record::decode(&d.payload)?;
        let receipt = PopReceipt { queue: d.queue, offset: d.offset, pop_time: batch.pop_time };
        let handle = ReceiptHandle { topic_uid: t.uid(), receipt };
        let redeliveries = i32::try_from(m.attempts.saturating_sub(1)).unwrap_or(i32::MAX);
        let at = Delivered {
            topic: shown,
            queue_id: i32::try_from(d.queue).unwrap_or(i32::MAX),
            queue_offset: i64::try_from(d.offset).unwrap_or(i64::MAX),
            store_timestamp_ms: i64::try_from(d.timestamp).unwrap_or(i64::MAX),
            store_host: svc.core.store_host,
            receipt_handle: Some(handle.encode()),
            invisible_ms: Some(invisible_ms),
            reconsume_times: rec.reconsume_times.max(0).saturating_add(redeliveries),
        };
        let message = to_message(&rec, &at);
        let bytes = message.body.len();
        let stored = names
            .iter()
            .find(|(uid, _)| *uid == t.uid())
            .map_or_else(|| Arc::from(t.name()), |(_, n)| Arc::clone(n));
        items.push((
            ReceiveMessageResponse { content: Some(Content::Message(message)) },
            Some((stored, receipt)),
        ));
        Some(bytes)
    });
    items
}

/// How long a popped message the response never handed to the transport stays invisible, ms
/// (the proxy's `NACK_INVISIBLE_TIME`).
pub(crate) const NACK_INVISIBLE_MS: u64 = 1_000;

/// A `ReceiveMessage` response stream that settles what it carries as it goes
/// (review-e77444b M3): an `auto_renew` delivery is tracked for renewal only once its item is
/// taken by the transport, and every message it still holds when it is dropped (the client
/// went away, the connection was reset before the answer was written) is made visible again
/// after [`NACK_INVISIBLE_MS`], as the proxy's
/// `ReceiveMessageResponseStreamWriter.processThrowableWhenWriteMessage` nacks what it failed
/// to write. Before, such deliveries were renewed for up to 3 h while the session lived.
pub(crate) struct Delivering {
    items: std::collections::VecDeque<(ReceiveMessageResponse, Option<Held>)>,
    core: Arc<Core>,
    grpc: Arc<GrpcState>,
    client: String,
    group: String,
    /// Renewed by the server once handed out (`auto_renew`), invisible for this long first.
    renew: Option<u64>,
}

impl Delivering {
    /// Hands the transport one item after another; see the type's docs.
    fn poll_item(&mut self) -> Option<ReceiveMessageResponse> {
        let (item, held) = self.items.pop_front()?;
        if let (Some((topic, r)), Some(invisible_ms)) = (held, self.renew) {
            let names = (self.group.as_str(), &*topic);
            if !self.grpc.renewals.track(&self.client, names, r, invisible_ms) {
                let refused = self.grpc.renewals.refused();
                // Logged at the 1st, 2nd, 4th, 8th... refusal: the count, not a flood.
                if refused.is_power_of_two() {
                    tracing::warn!(client = %self.client, refused, "renewal table or this client's share of it full: deliveries are not renewed and come back after their invisible time");
                }
            }
        }
        Some(item)
    }
}

impl tokio_stream::Stream for Delivering {
    type Item = Result<ReceiveMessageResponse, tonic::Status>;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        std::task::Poll::Ready(self.poll_item().map(Ok))
    }
}

impl Drop for Delivering {
    fn drop(&mut self) {
        let now = now_ms();
        let mut nacked = false;
        for (_, held) in self.items.drain(..) {
            let Some((topic, r)) = held else { continue };
            // Refused only if acknowledged or redelivered meanwhile: nothing to do then.
            nacked |= self
                .core
                .store
                .change_invisible(&self.group, &topic, r, NACK_INVISIBLE_MS, now)
                .is_ok();
        }
        if nacked {
            tracing::debug!(client = %self.client, "undelivered messages nacked");
            popper::note_change(&self.core);
        }
    }
}

/// A receipt handle of `topic` checked, and the engine's latest receipt for it, its renewal
/// (if any) taken out of the table until the store answered ([`Renewals::take`]).
///
/// [`Renewals::take`]: crate::broker::grpc::receipt::Renewals::take
struct Resolved {
    /// The handle the client holds.
    handle: ReceiptHandle,
    /// The engine's receipt now (a renewed delivery has a later pop time).
    current: PopReceipt,
    /// The renewal taken out: given back if the store refuses the receipt.
    taken: Taken,
    /// The topic the message is stored in: the one the request names, or the group's pop
    /// retry topic for it (a revived message).
    topic: String,
}

impl Resolved {
    /// The store refused the receipt: the delivery is renewed as before.
    fn refused(self, svc: &Messaging, client: &str) {
        svc.grpc.renewals.put_back(client, self.taken);
    }
}

fn resolve(
    svc: &Messaging,
    client: &str,
    group: &str,
    topic: &str,
    text: &str,
) -> Result<Resolved, pb::Status> {
    let core = &svc.core;
    let invalid = |why: &str| status(Code::InvalidReceiptHandle, format!("{why}: {text:?}"));
    let Some(handle) = ReceiptHandle::parse(text.trim()) else {
        return Err(invalid("malformed receipt handle"));
    };
    let Some(t) = core.store.topic(topic) else {
        return Err(status(Code::TopicNotFound, format!("topic {topic} does not exist")));
    };
    let stored = if t.uid() == handle.topic_uid {
        topic.to_owned()
    } else {
        let retry = topics::pop_retry_topic(group, topic);
        match core.store.topic(&retry) {
            Some(r) if r.uid() == handle.topic_uid => retry,
            _ => return Err(invalid("the receipt handle is not of this topic")),
        }
    };
    let taken = svc.grpc.renewals.take(client, (group, &stored), handle.receipt);
    Ok(Resolved { handle, current: taken.current, taken, topic: stored })
}

/// A request naming the group and topic of a receipt handle (ack, change, forward).
trait ReceiptRequest {
    /// The consumer group's name (empty when absent).
    fn group(&self) -> &str;
    /// The topic's name (empty when absent).
    fn topic(&self) -> &str;
}

macro_rules! receipt_request {
    ($($t:ty),*) => {$(
        impl ReceiptRequest for $t {
            fn group(&self) -> &str {
                name(self.group.as_ref())
            }
            fn topic(&self) -> &str {
                name(self.topic.as_ref())
            }
        }
    )*};
}
receipt_request!(
    AckMessageRequest,
    ChangeInvisibleDurationRequest,
    ForwardMessageToDeadLetterQueueRequest
);

/// The preamble the receipt-handle calls share: the caller's session, and the request with
/// its group and topic checked non-blank.
fn receipt_call<T: ReceiptRequest>(
    svc: &Messaging,
    request: Request<T>,
) -> Result<(Arc<Session>, T), pb::Status> {
    let session = svc.session(&request)?;
    let req = request.into_inner();
    check_names(req.group(), req.topic())?;
    Ok((session, req))
}

fn check_names(group: &str, topic: &str) -> Result<(), pb::Status> {
    if group.is_empty() {
        return Err(status(Code::IllegalConsumerGroup, "the consumer group is blank"));
    }
    if topic.is_empty() {
        return Err(status(Code::IllegalTopic, "the topic is blank"));
    }
    Ok(())
}

/// `AckMessage`: each entry on its own; the response status is theirs when they agree, else
/// `MULTIPLE_RESULTS`.
pub(crate) async fn ack_message(
    svc: &Messaging,
    request: Request<AckMessageRequest>,
) -> Result<Response<AckMessageResponse>, tonic::Status> {
    let answer = |st: pb::Status| {
        Ok(Response::new(AckMessageResponse { status: Some(st), entries: Vec::new() }))
    };
    let (session, req) = match receipt_call(svc, request) {
        Ok(c) => c,
        Err(st) => return answer(st),
    };
    let core = &svc.core;
    let client = session.client_id();
    let (group, topic) = (req.group(), req.topic());
    if req.entries.is_empty() {
        return answer(status(Code::BadRequest, "no entry to acknowledge"));
    }
    let mut entries = Vec::with_capacity(req.entries.len());
    let mut unblocks = false;
    let mut room_freed = false;
    for e in &req.entries {
        let st = match resolve(svc, client, group, topic, &e.receipt_handle) {
            Err(st) => st,
            Ok(r) => match core.store.pop_ack(group, &r.topic, r.current) {
                Ok(ack) => {
                    unblocks |= ack.outcome == AckOutcome::Acked;
                    room_freed |= ack.room_freed;
                    ok()
                }
                Err(err) => {
                    r.refused(svc, client);
                    store_status(&err)
                }
            },
        };
        entries.push(AckMessageResultEntry {
            message_id: e.message_id.clone(),
            receipt_handle: e.receipt_handle.clone(),
            status: Some(st),
        });
    }
    // The rest of an ordered queue may be unblocked now, or a queue that had its in-flight
    // maximum has room again (review-e77444b M5).
    if room_freed || (unblocks && fifo(core, &session, group)) {
        popper::note_change(core);
    }
    let first = entries.first().and_then(|e| e.status.clone()).unwrap_or_else(ok);
    let overall = if entries.iter().all(|e| e.status.as_ref().map(|s| s.code) == Some(first.code)) {
        first
    } else {
        status(Code::MultipleResults, "the entries have different results")
    };
    Ok(Response::new(AckMessageResponse { status: Some(overall), entries }))
}

/// `ChangeInvisibleDuration`: the message becomes visible again after the new duration, from
/// now; the answer carries the new handle (the old one is stale from then on).
pub(crate) async fn change_invisible_duration(
    svc: &Messaging,
    request: Request<ChangeInvisibleDurationRequest>,
) -> Result<Response<ChangeInvisibleDurationResponse>, tonic::Status> {
    let answer = |st: pb::Status, handle: String| {
        Ok(Response::new(ChangeInvisibleDurationResponse {
            status: Some(st),
            receipt_handle: handle,
        }))
    };
    let (session, req) = match receipt_call(svc, request) {
        Ok(c) => c,
        Err(st) => return answer(st, String::new()),
    };
    let core = &svc.core;
    let client = session.client_id();
    let (group, topic) = (req.group(), req.topic());
    let invisible_ms = match req.invisible_duration.as_ref().map(duration_ms) {
        Some(ms) if ms <= MAX_INVISIBLE_MS => ms,
        _ => {
            return answer(
                status(
                    Code::IllegalInvisibleTime,
                    format!("the invisible duration must lie within [0, {MAX_INVISIBLE_MS} ms]"),
                ),
                String::new(),
            )
        }
    };
    let r = match resolve(svc, client, group, topic, &req.receipt_handle) {
        Ok(r) => r,
        Err(st) => return answer(st, String::new()),
    };
    match core.store.change_invisible(group, &r.topic, r.current, invisible_ms, now_ms()) {
        Ok(renewed) => {
            popper::note_change(core);
            // The client handles the message itself from now on (a nack, or a simple
            // consumer's explicit time): no more server-side renewal (taken by `resolve`).
            let receipt = PopReceipt { pop_time: renewed, ..r.handle.receipt };
            let new = ReceiptHandle { receipt, ..r.handle };
            answer(ok(), new.encode())
        }
        Err(e) => {
            r.refused(svc, client);
            answer(store_status(&e), String::new())
        }
    }
}

/// `ForwardMessageToDeadLetterQueue`: a FIFO push consumer gave up on a message; it moves to
/// `%DLQ%<group>` and is acknowledged.
pub(crate) async fn forward_message_to_dead_letter_queue(
    svc: &Messaging,
    request: Request<ForwardMessageToDeadLetterQueueRequest>,
) -> Result<Response<ForwardMessageToDeadLetterQueueResponse>, tonic::Status> {
    let answer = |st: pb::Status| {
        Ok(Response::new(ForwardMessageToDeadLetterQueueResponse { status: Some(st) }))
    };
    let (session, req) = match receipt_call(svc, request) {
        Ok(c) => c,
        Err(st) => return answer(st),
    };
    let core = &svc.core;
    let client = session.client_id();
    let (group, topic) = (req.group(), req.topic());
    let r = match resolve(svc, client, group, topic, &req.receipt_handle) {
        Ok(r) => r,
        Err(st) => return answer(st),
    };
    let attempts = u32::try_from(req.delivery_attempt).unwrap_or(1).max(1);
    match popper::forward_to_dlq(core, group, &r.topic, r.current, attempts) {
        // Settled: its renewal was taken by `resolve`.
        Ok(()) => answer(ok()),
        Err(e) => {
            r.refused(svc, client);
            answer(store_status(&e))
        }
    }
}

/// `QueryAssignment` (1.2): where a push consumer receives from.
pub(crate) async fn query_assignment(
    svc: &Messaging,
    request: Request<QueryAssignmentRequest>,
) -> Result<Response<QueryAssignmentResponse>, tonic::Status> {
    let answer = |st: pb::Status, assignments: Vec<Assignment>| {
        Ok(Response::new(QueryAssignmentResponse { status: Some(st), assignments }))
    };
    let session = match svc.session(&request) {
        Ok(s) => s,
        Err(st) => return answer(st, Vec::new()),
    };
    let req = request.get_ref();
    let core = &svc.core;
    let (group, topic) = (name(req.group.as_ref()), name(req.topic.as_ref()));
    if let Err(st) = check_names(group, topic) {
        return answer(st, Vec::new());
    }
    let queues = match route::cluster_queues(svc, topic).await {
        Ok(q) => q,
        Err(st) => return answer(st, Vec::new()),
    };
    let readable: Vec<pb::MessageQueue> = queues
        .into_iter()
        .filter(|q| {
            q.permission == pb::Permission::Read as i32
                || q.permission == pb::Permission::ReadWrite as i32
        })
        .collect();
    if readable.is_empty() {
        return answer(status(Code::Forbidden, "no readable queue"), Vec::new());
    }
    let queues = if fifo(core, &session, group) {
        readable
    } else {
        // One "broker acting queue" per broker: a receive pops all that broker's queues.
        let mut one: Vec<pb::MessageQueue> = Vec::new();
        for mut q in readable {
            let broker = q.broker.as_ref().map(|b| b.name.as_str());
            if one.iter().all(|o| o.broker.as_ref().map(|b| b.name.as_str()) != broker) {
                q.id = -1;
                one.push(q);
            }
        }
        one
    };
    let assignments = queues.into_iter().map(|q| Assignment { message_queue: Some(q) }).collect();
    answer(ok(), assignments)
}

/// Renews the `auto_renew` deliveries of live clients every [`RENEW_TICK`] until shutdown
/// (see [`crate::broker::grpc::receipt`]); a client is live while its gRPC session is.
pub(crate) async fn renew(
    core: Arc<Core>,
    grpc: Arc<GrpcState>,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        tokio::select! {
            _ = tokio::time::sleep(RENEW_TICK) => {}
            _ = shutdown.changed() => return,
        }
        let now = now_ms();
        let alive = |client: &str| grpc.sessions.get(client).is_some();
        let n = grpc.renewals.renew_due(now, alive, |group, topic, current| {
            core.store.change_invisible(group, topic, current, DEFAULT_INVISIBLE_MS, now).ok()
        });
        if n > 0 {
            tracing::debug!(renewed = n, "auto_renew deliveries renewed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(poll_ms: Option<u64>) -> ReceiveMessageRequest {
        ReceiveMessageRequest {
            long_polling_timeout: poll_ms.map(super::super::convert::duration),
            ..Default::default()
        }
    }

    #[test]
    fn given_polling_times_when_receiving_should_clamp_to_5_and_20_seconds_and_the_deadline() {
        let secs = |s| Some(Duration::from_secs(s));
        assert_eq!(polling_ms(&req(Some(1_000)), None, 3_000).ok(), Some(MIN_POLLING_MS));
        assert_eq!(polling_ms(&req(Some(60_000)), None, 3_000).ok(), Some(MAX_POLLING_MS));
        assert_eq!(polling_ms(&req(Some(15_000)), secs(30), 3_000).ok(), Some(15_000));
        assert_eq!(
            polling_ms(&req(None), secs(23), 6_000).ok(),
            Some(20_000),
            "deadline - timeout/2"
        );
        assert_eq!(polling_ms(&req(None), secs(12), 6_000).ok(), Some(9_000));
        assert_eq!(
            polling_ms(&req(Some(20_000)), secs(8), 3_000).ok(),
            Some(8_000),
            "cut to the deadline"
        );
        let err = polling_ms(&req(Some(20_000)), secs(4), 3_000).err().map(|s| s.code);
        assert_eq!(err, Some(Code::IllegalPollingTime as i32), "a deadline under 5 s");
    }

    /// A core with topic `T` (one queue) holding one message, and its first pop by `g`.
    fn popped_core() -> (Arc<Core>, popper::PopBatch, PopCall<'static>) {
        let config = crate::broker::BrokerConfig::default();
        let store: Arc<dyn crate::store::Store> = Arc::new(
            crate::store::MemoryStore::new(config.engine_config().expect("an engine config"))
                .expect("a store"),
        );
        let core =
            Arc::new(Core::new(config.core, store, "127.0.0.1:10911".parse().expect("an address")));
        let mut c = crate::remoting::body::TopicConfig::new("T", 1, 1);
        c.perm = crate::broker::core::topics::perm::RW;
        core.create_topic(c).expect("a topic");
        let rec = record::NewRecord {
            flag: 0,
            sys_flag: 0,
            born_timestamp: 1,
            born_host: "127.0.0.1:1".parse().expect("an address"),
            reconsume_times: 0,
            body: b"b",
            properties: b"",
        };
        let bytes = record::encode(&rec, 0).expect("a record");
        core.store.topic("T").expect("T").append(0, bytes, 0, 1).expect("appended");
        let call = PopCall {
            group: "g",
            topic: "T",
            queue: None,
            max: 1,
            invisible_ms: DEFAULT_INVISIBLE_MS,
            order: false,
            attempt_id: None,
            filter: FilterExpr::Tag("*"),
            init: PopInit::Min,
            max_attempts: 17,
            seed: 0,
            announced: true,
        };
        let batch = popper::pop_once(&core, &call, now_ms()).expect("pops");
        assert_eq!(batch.messages.len(), 1);
        (core, batch, call)
    }

    fn delivering(core: &Arc<Core>, grpc: &Arc<GrpcState>, b: &popper::PopBatch) -> Delivering {
        let m = &b.messages[0].delivery;
        let receipt = PopReceipt { queue: m.queue, offset: m.offset, pop_time: b.pop_time };
        let item = ReceiveMessageResponse { content: Some(Content::Status(ok())) };
        Delivering {
            items: [(item.clone(), None), (item, Some((Arc::from("T"), receipt)))].into(),
            core: Arc::clone(core),
            grpc: Arc::clone(grpc),
            client: "c".into(),
            group: "g".into(),
            renew: Some(DEFAULT_INVISIBLE_MS),
        }
    }

    #[test]
    fn given_an_auto_renew_delivery_never_handed_out_when_the_stream_drops_should_nack_it() {
        // review-e77444b M3: it was renewed for up to 3 h while the client's session lived.
        let (core, batch, call) = popped_core();
        let grpc = Arc::new(GrpcState::default());
        let mut stream = delivering(&core, &grpc, &batch);
        assert!(stream.poll_item().is_some(), "the status goes out");
        drop(stream);
        assert_eq!(grpc.renewals.count("c"), 0, "not tracked for renewal");
        let again = popper::pop_once(&core, &call, now_ms() + 2 * NACK_INVISIBLE_MS).expect("pops");
        let revived = again.retried.as_ref().map(|r| r.messages.len());
        assert_eq!(revived, Some(1), "visible again a second later (revived), not a minute");
    }

    #[test]
    fn given_an_auto_renew_delivery_handed_out_when_the_stream_ends_should_renew_it() {
        let (core, batch, call) = popped_core();
        let grpc = Arc::new(GrpcState::default());
        let mut stream = delivering(&core, &grpc, &batch);
        while stream.poll_item().is_some() {}
        drop(stream);
        assert_eq!(grpc.renewals.count("c"), 1, "tracked once handed to the transport");
        let later = popper::pop_once(&core, &call, now_ms() + 2 * NACK_INVISIBLE_MS).expect("pops");
        assert_eq!(later.len(), 0, "still invisible: the consumer has it");
    }

    #[test]
    fn given_grpc_timeouts_when_parsing_should_read_every_unit() {
        let mut m = tonic::metadata::MetadataMap::new();
        for (v, d) in [
            ("3S", Duration::from_secs(3)),
            ("250m", Duration::from_millis(250)),
            ("1M", Duration::from_secs(60)),
        ] {
            m.insert("grpc-timeout", v.parse().unwrap_or_else(|_| unreachable!()));
            assert_eq!(remaining(&m), Some(d), "{v}");
        }
        m.insert("grpc-timeout", "x".parse().unwrap_or_else(|_| unreachable!()));
        assert_eq!(remaining(&m), None);
    }
}
