//! Consuming: `PULL_MESSAGE` and `LITE_PULL_MESSAGE`, with server-side tag and SQL92
//! filtering, the commit-offset flag, and long polling woken by appends that match.
//!
//! Status mapping (RocketMQ's `DefaultPullMessageResultHandler`):
//!
//! | store situation | code | nextBeginOffset |
//! |---|---|---|
//! | messages found | `SUCCESS` | after the last one looked at |
//! | looked at messages, none matched the filter | `PULL_RETRY_IMMEDIATELY` | after them |
//! | queue never written (max 0) | `PULL_NOT_FOUND` if asked 0, else `PULL_OFFSET_MOVED` | 0 |
//! | asked the next offset to be written | `PULL_NOT_FOUND` (held first, if suspend is allowed) | the same |
//! | asked below the first retained offset | `PULL_OFFSET_MOVED` | first retained |
//! | asked beyond the end | `PULL_OFFSET_MOVED` | 0 if the queue was never trimmed, else the end |

use crate::sync::Arc;
use crate::sync::Ordering;
use std::time::Duration;

use bytes::BytesMut;

use super::{bad_header, queue_id, store_error};
use crate::broker::core::clients::{filter_of, Subscription};
use crate::broker::core::counters;
use crate::broker::core::filter::{self, SqlFilter};
use crate::broker::core::record::{self, Placement};
use crate::broker::core::wait::AppendWait;
use crate::broker::core::Core;
use crate::broker::core::Unreadable;
use crate::broker::remoting::{reply_error, ConnCtx, RemotingState, Reply};
use crate::remoting::body::MessageModel;
use crate::remoting::code::response_code;
use crate::remoting::error::quote;
use crate::remoting::header::{
    FromExtFields, PullMessageRequestHeader, PullMessageResponseHeader, ToExtFields,
};
use crate::remoting::sql92::Sql92;
use crate::remoting::subscription::{SubscriptionExpr, TagMatcher};
use crate::remoting::{MessageError, RemotingCommand};
use crate::store::{Filter, ReadOutcome, StoreError, TopicStore};

/// `PULL_MESSAGE` (11) and `LITE_PULL_MESSAGE` (361).
pub(crate) fn pull_message(
    core: &Arc<Core>,
    face: &Arc<RemotingState>,
    ctx: &ConnCtx,
    req: RemotingCommand,
) -> Reply {
    match pull(core, face, ctx, &req, Pass::First) {
        Pulled::Reply(r) => r,
        Pulled::Suspend { topic, queue, offset, hold } => {
            // Over the connection's cap of suspended pulls (or with its channel full), the pull
            // is answered at once, as if its hold had expired.
            let slot = Arc::clone(&ctx.suspended).try_acquire_owned();
            let permit = ctx.tx.clone().try_reserve_owned();
            let (Ok(slot), Ok(permit)) = (slot, permit) else {
                tracing::debug!(
                    conn = ctx.id,
                    opaque = req.opaque,
                    queue,
                    "pull not held: over the connection's cap"
                );
                return match pull(core, face, ctx, &req, Pass::Last) {
                    Pulled::Reply(r) => r,
                    Pulled::Suspend { .. } => Reply::Nothing,
                };
            };
            let (core, face, ctx) = (Arc::clone(core), Arc::clone(face), ctx.clone());
            tokio::spawn(async move {
                let mut shutdown = ctx.shutdown.clone();
                let deadline = tokio::time::Instant::now() + hold;
                let mut at = offset;
                // Each append wakes the pull; it is answered unless everything new was
                // filtered out (RocketMQ's hold service re-checks the filter the same way).
                let woken = loop {
                    if *shutdown.borrow() {
                        break None;
                    }
                    let wait =
                        AppendWait { topic: Arc::clone(&topic), queue, offset: at, id: None };
                    tokio::select! {
                        arrived = tokio::time::timeout_at(deadline, wait) => {
                            if arrived.is_err() {
                                break None;
                            }
                        }
                        _ = shutdown.changed() => break None,
                        _ = ctx.tx.closed() => return,
                    }
                    match pull(&core, &face, &ctx, &req, Pass::Woken(at)) {
                        Pulled::Reply(r) => break Some(r),
                        Pulled::Suspend { offset: next, .. } => at = next,
                    }
                };
                let reply = woken.or_else(|| match pull(&core, &face, &ctx, &req, Pass::Last) {
                    Pulled::Reply(r) => Some(r),
                    Pulled::Suspend { .. } => None,
                });
                if let Some(Reply::Now(resp)) = reply {
                    tracing::debug!(
                        conn = ctx.id,
                        opaque = resp.opaque,
                        queue,
                        code = resp.code,
                        "held pull answered"
                    );
                    permit.send(*resp);
                }
                drop(slot);
            });
            Reply::Nothing
        }
    }
}

/// Most records one pull with an SQL92 filter looks at (RocketMQ: 16000 / 20).
const SQL_SCAN_WINDOW: usize = 800;

/// Which processing of a pull request this is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pass {
    /// As it arrives: it may commit an offset and be held.
    First,
    /// Held, after an append woke it: it reads on from the offset (everything below was
    /// looked at and filtered out) and stays held if nothing new matched its filter.
    Woken(u64),
    /// Answered whatever it finds (the hold expired, or could not be taken).
    Last,
}

enum Pulled {
    Reply(Reply),
    Suspend { topic: Arc<dyn TopicStore>, queue: u32, offset: u64, hold: Duration },
}

/// The engine's tag filter, the SQL92 filter if any, and the group's message model.
type PullFilter = (Filter, Option<Arc<Sql92>>, Option<MessageModel>);

/// The filter a pull uses: the expression in the request, or the group's subscription from
/// its heartbeats. SQL92 subscriptions read every record (`Filter::All`) and test each one's
/// properties with the compiled expression.
fn filter_for(
    core: &Core,
    req: &RemotingCommand,
    h: &PullMessageRequestHeader<'_>,
) -> Result<PullFilter, Reply> {
    if h.has_subscription() {
        let expr = h.subscription.unwrap_or("*");
        if h.expression_type == filter::SQL92 {
            return match filter::compile(expr) {
                Ok(sql) => Ok((Filter::All, Some(sql), core.clients.model(h.consumer_group))),
                Err(e) => Err(reply_error(
                    req,
                    response_code::SUBSCRIPTION_PARSE_FAILED,
                    format!("parse the consumer's subscription failed, {e}"),
                )),
            };
        }
        let filter =
            if h.expression_type.is_empty() || h.expression_type.eq_ignore_ascii_case("TAG") {
                filter_of(&TagMatcher::from_expr(SubscriptionExpr::parse(expr)))
            } else {
                // Other expression types (none RocketMQ ships) are not evaluated by baiji.
                Filter::All
            };
        return Ok((filter, None, core.clients.model(h.consumer_group)));
    }
    match core.clients.subscription(h.consumer_group, h.topic) {
        Ok((Subscription { filter, sql: None, .. }, model)) => Ok((filter, None, Some(model))),
        Ok((Subscription { sql: Some(SqlFilter::Compiled(sql)), .. }, model)) => {
            Ok((Filter::All, Some(sql), Some(model)))
        }
        Ok((Subscription { sql: Some(SqlFilter::Invalid(e)), .. }, _)) => Err(reply_error(
            req,
            response_code::FILTER_DATA_NOT_EXIST,
            format!(
                "The broker's consumer filter data is not exist!Your expression may be wrong! {e}"
            ),
        )),
        Err(true) => Err(reply_error(
            req,
            response_code::SUBSCRIPTION_NOT_EXIST,
            format!("the consumer's group info not exist, group: {}", quote(h.consumer_group)),
        )),
        Err(false) => Err(reply_error(
            req,
            response_code::SUBSCRIPTION_NOT_EXIST,
            format!(
                "the consumer's subscription not exist, group: {} topic: {}",
                quote(h.consumer_group),
                quote(h.topic)
            ),
        )),
    }
}

fn pull(
    core: &Arc<Core>,
    face: &RemotingState,
    ctx: &ConnCtx,
    req: &RemotingCommand,
    pass: Pass,
) -> Pulled {
    match pull_steps(core, face, ctx, req, pass) {
        Ok(p) | Err(p) => p,
    }
}

/// A pull, step by step: read the request, note what its first pass acknowledges, read the
/// queue, and answer (or hold) by what the read found. `Err` is an answer given early.
fn pull_steps(
    core: &Arc<Core>,
    face: &RemotingState,
    ctx: &ConnCtx,
    req: &RemotingCommand,
    pass: Pass,
) -> Result<Pulled, Pulled> {
    let early = Pulled::Reply;
    let h = PullMessageRequestHeader::from_ext_fields(&req.ext_fields)
        .map_err(|e| early(bad_header(req, &e)))?;
    let (topic, counters) =
        core.readable_topic(h.topic).map_err(|e| early(unreadable(req, h.topic, e)))?;
    let queue = queue_id(req, h.queue_id, h.topic, topic.queue_count()).map_err(early)?;
    let (filter, sql, model) = filter_for(core, req, &h).map_err(early)?;
    let Ok(offset) = u64::try_from(h.queue_offset) else {
        // Below every offset: RocketMQ's OFFSET_TOO_SMALL, sent to the first retained one.
        return Err(early(match topic.offsets(queue) {
            Ok((min, max)) => offset_too_small(req, h.queue_offset, min, max),
            Err(e) => store_error(req, &e),
        }));
    };
    if pass == Pass::First {
        acknowledge(core, ctx, req, &h, model, queue, offset);
    }
    // A woken pull already looked at everything below `at`: none of it matched.
    let offset = match pass {
        Pass::Woken(at) => at.max(offset),
        Pass::First | Pass::Last => offset,
    };
    // Bounded as RocketMQ bounds a pull from memory: at most `maxTransferCountOnMessageInMemory`
    // messages and `maxTransferBytesOnMessageInMemory` bytes, whatever the client's
    // `maxMsgBytes` (Java's lite pull sends i32::MAX), but always at least one message.
    let bounds = Bounds {
        messages: usize::try_from(h.max_msg_nums)
            .unwrap_or(0)
            .clamp(1, face.config.pull_max_count()),
        bytes: face.config.pull_max_bytes(),
    };
    let read = read_queue(core, topic.as_ref(), queue, offset, (&filter, sql.as_deref()), bounds)
        .map_err(|e| early(store_error(req, &e)))?;
    if read.delivered > 0 {
        let pulled = counters::Pulled {
            queue,
            next: read.out.next_offset,
            messages: read.delivered,
            bytes: read.body.len(),
        };
        counters.messages_out(h.consumer_group, topic.queue_count(), pulled);
    }
    let (code, next) = status(&read, offset);
    let max = read.out.max_offset;
    // Woken by records the filter rejected (all of them up to the end): keep holding from there.
    let only_filtered = code == response_code::PULL_NOT_FOUND
        || (code == response_code::PULL_RETRY_IMMEDIATELY && next >= max);
    if matches!(pass, Pass::Woken(_)) && only_filtered {
        return Ok(Pulled::Suspend { topic, queue, offset: next, hold: Duration::ZERO });
    }
    if code == response_code::PULL_NOT_FOUND && pass == Pass::First && h.has_suspend() {
        let asked = u64::try_from(h.suspend_timeout_millis).unwrap_or(0);
        let hold = Duration::from_millis(if asked == 0 {
            1000
        } else {
            asked.min(face.config.long_poll_max_ms)
        });
        tracing::debug!(
            conn = ctx.id,
            opaque = req.opaque,
            group = h.consumer_group,
            topic = h.topic,
            queue,
            offset,
            hold_ms = hold.as_millis() as u64,
            "pull to hold"
        );
        return Ok(Pulled::Suspend { topic, queue, offset, hold });
    }
    tracing::debug!(
        conn = ctx.id,
        opaque = req.opaque,
        group = h.consumer_group,
        topic = h.topic,
        queue,
        offset,
        ?pass,
        code,
        next,
        max,
        messages = read.delivered,
        "pull answered"
    );
    Ok(Pulled::Reply(answer(req, code, next, offset, read)))
}

/// The answer to a pull of a topic that cannot be read.
fn unreadable(req: &RemotingCommand, topic: &str, e: Unreadable) -> Reply {
    match e {
        Unreadable::Unknown => reply_error(
            req,
            response_code::TOPIC_NOT_EXIST,
            format!("topic[{}] not exist, apply first please! https://rocketmq.apache.org/docs/bestPractice/06FAQ", quote(topic)),
        ),
        Unreadable::Forbidden => reply_error(
            req,
            response_code::NO_PERMISSION,
            format!("the topic[{}] pulling message is forbidden", quote(topic)),
        ),
    }
}

/// What the first processing of a pull acknowledges: a broadcasting member's read position,
/// or the commit offset a clustering consumer sends along (RocketMQ stores it on the first
/// processing of the request, whatever its suspend flag says).
fn acknowledge(
    core: &Core,
    ctx: &ConnCtx,
    req: &RemotingCommand,
    h: &PullMessageRequestHeader<'_>,
    model: Option<MessageModel>,
    queue: u32,
    offset: u64,
) {
    match model {
        Some(MessageModel::Broadcasting) => {
            // The client keeps its offset; its read position is its acknowledgement.
            if let Some(m) = core.clients.broadcast_member(h.consumer_group, h.topic, ctx.id) {
                core.store.broadcast_position(h.consumer_group, h.topic, m, queue, offset);
            }
        }
        _ => {
            if h.has_commit_offset()
                && super::check_offset_group(core, req, h.consumer_group).is_ok()
            {
                if let Ok(c) = u64::try_from(h.commit_offset) {
                    let _ = core.commit_offset(h.consumer_group, h.topic, queue, c);
                }
            }
        }
    }
}

/// The most one pull answers with.
#[derive(Debug, Clone, Copy)]
struct Bounds {
    messages: usize,
    bytes: usize,
}

/// What one read of a queue wrote out.
struct Read {
    body: BytesMut,
    delivered: usize,
    out: ReadOutcome,
}

/// Reads `queue` from `offset` into a pull body: the records the tag `filter` (and the SQL92
/// expression, if any) accept, within `bounds`; a record that cannot be written out is
/// stepped over and counted.
fn read_queue(
    core: &Core,
    topic: &dyn TopicStore,
    queue: u32,
    offset: u64,
    (filter, sql): (&Filter, Option<&Sql92>),
    bounds: Bounds,
) -> Result<Read, StoreError> {
    let mut body = BytesMut::new();
    let (topic_name, uid) = (topic.name().to_string(), topic.uid());
    let mut delivered = 0usize;
    // An SQL92 filter is applied here, so the read may look at more records than it delivers:
    // up to RocketMQ's scan window (`maxFilterMessageCount`: 16000 bytes of 20-byte
    // consume-queue entries), stepping over the ones that do not match.
    let scan = if sql.is_some() { bounds.messages.max(SQL_SCAN_WINDOW) } else { bounds.messages };
    let mut visit = |m: crate::store::StoredRef<'_>| {
        if let Some(sql) = sql {
            if delivered >= bounds.messages {
                return false;
            }
            if !filter::matches(sql, m.record, &core.cluster_property) {
                return true;
            }
        }
        if !body.is_empty() && body.len().saturating_add(m.record.len()) > bounds.bytes {
            return false;
        }
        let at = Placement {
            topic: &topic_name,
            topic_uid: uid,
            queue,
            offset: m.offset,
            store_timestamp: m.store_timestamp,
            store_host: core.store_host,
        };
        match record::write_out(m.record, &at, &core.cluster_property, &mut body) {
            Ok(n) if n > 0 => delivered += 1,
            // A record that cannot be written out is stepped over (counted, logged), never
            // stopped at: stopping would answer this offset again forever, for every group.
            // Returning `true` makes the read advance past it.
            result => skipped(core, &topic_name, queue, m.offset, result.err()),
        }
        true
    };
    let out = topic.read(queue, offset, scan, filter, &mut visit)?;
    Ok(Read { body, delivered, out })
}

/// The code and next offset of a pull from `offset` that found `read` (the module docs'
/// table).
fn status(read: &Read, offset: u64) -> (i32, u64) {
    let (min, max) = (read.out.min_offset, read.out.max_offset);
    if read.delivered > 0 {
        (response_code::SUCCESS, read.out.next_offset)
    } else if max == 0 {
        if offset == 0 {
            (response_code::PULL_NOT_FOUND, 0)
        } else {
            (response_code::PULL_OFFSET_MOVED, 0)
        }
    } else if offset < min {
        (response_code::PULL_OFFSET_MOVED, min)
    } else if offset == max {
        (response_code::PULL_NOT_FOUND, offset)
    } else if offset > max {
        // RocketMQ's rule: back to the start when the queue was never trimmed (a restarted
        // in-memory broker lands here with the clients' old offsets), else to the end.
        (response_code::PULL_OFFSET_MOVED, if min == 0 { 0 } else { max })
    } else {
        (response_code::PULL_RETRY_IMMEDIATELY, read.out.next_offset)
    }
}

/// The response to a pull answered with `code`.
fn answer(req: &RemotingCommand, code: i32, next: u64, offset: u64, read: Read) -> Reply {
    let (min, max) = (read.out.min_offset, read.out.max_offset);
    let resp_header = PullMessageResponseHeader {
        suggest_which_broker_id: 0,
        next_begin_offset: next,
        min_offset: min,
        max_offset: max,
        offset_delta: None,
        topic_sys_flag: None,
        group_sys_flag: None,
        forbidden_type: None,
    };
    let mut resp =
        RemotingCommand::response_to(req, code, None).with_ext_fields(resp_header.to_ext_fields());
    if code == response_code::SUCCESS {
        resp = resp.with_body(read.body.freeze());
    } else if code == response_code::PULL_OFFSET_MOVED {
        resp.remark =
            Some(format!("the offset {offset} is illegal: queue range is [{min}, {max}]"));
    }
    Reply::now(resp)
}

/// Counts and logs a stored record a pull could not write out.
fn skipped(core: &Core, topic: &str, queue: u32, offset: u64, error: Option<MessageError>) {
    // Relaxed: a statistic; nothing is published through it.
    core.counters.records_skipped.fetch_add(1, Ordering::Relaxed);
    let reason = error.map_or_else(|| "malformed stored record".to_owned(), |e| e.to_string());
    tracing::warn!(%topic, queue, offset, %reason, "a stored message cannot be delivered; skipped");
}

/// `PULL_OFFSET_MOVED` to `min` for an offset below the queue's first (a negative one).
fn offset_too_small(req: &RemotingCommand, asked: i64, min: u64, max: u64) -> Reply {
    let header = PullMessageResponseHeader {
        next_begin_offset: min,
        min_offset: min,
        max_offset: max,
        ..PullMessageResponseHeader::default()
    };
    Reply::now(
        RemotingCommand::response_to(
            req,
            response_code::PULL_OFFSET_MOVED,
            Some(format!("the offset {asked} is illegal: queue range is [{min}, {max}]")),
        )
        .with_ext_fields(header.to_ext_fields()),
    )
}
