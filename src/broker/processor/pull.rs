//! Consuming: `PULL_MESSAGE` and `LITE_PULL_MESSAGE`, with server-side tag filtering, the
//! commit-offset flag, and long polling woken by appends.
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

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::BytesMut;

use super::{bad_header, queue_id, store_error};
use crate::broker::clients::{filter_of, Subscription};
use crate::broker::metrics;
use crate::broker::record::{self, Placement};
use crate::broker::topics::perm;
use crate::broker::{reply_error, ConnCtx, Reply, Shared};
use crate::remoting::body::MessageModel;
use crate::remoting::code::response_code;
use crate::remoting::error::quote;
use crate::remoting::header::{
    FromExtFields, PullMessageRequestHeader, PullMessageResponseHeader, ToExtFields,
};
use crate::remoting::subscription::{SubscriptionExpr, TagMatcher};
use crate::remoting::{MessageError, RemotingCommand};
use crate::store::{Filter, TopicStore, WaitId};

/// `PULL_MESSAGE` (11) and `LITE_PULL_MESSAGE` (361).
pub(crate) fn pull_message(s: &Arc<Shared>, ctx: &ConnCtx, req: RemotingCommand) -> Reply {
    match pull(s, ctx, &req, true) {
        Pulled::Reply(r) => r,
        Pulled::Suspend { topic, queue, offset, hold } => {
            // Over the connection's cap of suspended pulls (or with its channel full), the pull
            // is answered at once, as if its hold had expired.
            let slot = Arc::clone(&ctx.suspended).try_acquire_owned();
            let permit = ctx.tx.clone().try_reserve_owned();
            let (Ok(slot), Ok(permit)) = (slot, permit) else {
                return match pull(s, ctx, &req, false) {
                    Pulled::Reply(r) => r,
                    Pulled::Suspend { .. } => Reply::Nothing,
                };
            };
            let (s, ctx) = (Arc::clone(s), ctx.clone());
            tokio::spawn(async move {
                let mut shutdown = ctx.shutdown.clone();
                if !*shutdown.borrow() {
                    let wait = AppendWait { topic, queue, offset, id: None };
                    tokio::select! {
                        _ = tokio::time::timeout(hold, wait) => {}
                        _ = shutdown.changed() => {}
                        _ = ctx.tx.closed() => return,
                    }
                }
                if let Pulled::Reply(Reply::Now(resp)) = pull(&s, &ctx, &req, false) {
                    permit.send(*resp);
                }
                drop(slot);
            });
            Reply::Nothing
        }
    }
}

enum Pulled {
    Reply(Reply),
    Suspend { topic: Arc<dyn TopicStore>, queue: u32, offset: u64, hold: Duration },
}

/// Resolves when a message is appended at or after `offset` (the engine's wake-up, not a
/// timer scan). Withdraws its registration when dropped.
struct AppendWait {
    topic: Arc<dyn TopicStore>,
    queue: u32,
    offset: u64,
    id: Option<WaitId>,
}

impl Future for AppendWait {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = &mut *self;
        match this.topic.watch(this.queue, this.offset, cx.waker(), this.id) {
            Ok(Some(id)) => {
                this.id = Some(id);
                Poll::Pending
            }
            Ok(None) | Err(_) => {
                this.id = None;
                Poll::Ready(())
            }
        }
    }
}

impl Drop for AppendWait {
    fn drop(&mut self) {
        if let Some(id) = self.id.take() {
            self.topic.cancel_watch(self.queue, id);
        }
    }
}

/// The filter a pull uses: the expression in the request, or the group's subscription from
/// its heartbeats.
fn filter_for(
    s: &Shared,
    req: &RemotingCommand,
    h: &PullMessageRequestHeader<'_>,
) -> Result<(Filter, Option<MessageModel>), Reply> {
    if h.has_subscription() {
        let expr = h.subscription.unwrap_or("*");
        let filter =
            if h.expression_type.is_empty() || h.expression_type.eq_ignore_ascii_case("TAG") {
                filter_of(&TagMatcher::from_expr(SubscriptionExpr::parse(expr)))
            } else {
                // SQL92 and other expression types are not evaluated by baiji.
                Filter::All
            };
        return Ok((filter, s.clients.model(h.consumer_group)));
    }
    match s.clients.subscription(h.consumer_group, h.topic) {
        Ok((Subscription { filter, .. }, model)) => Ok((filter, Some(model))),
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

fn pull(s: &Arc<Shared>, ctx: &ConnCtx, req: &RemotingCommand, allow_suspend: bool) -> Pulled {
    let h = match PullMessageRequestHeader::from_ext_fields(&req.ext_fields) {
        Ok(h) => h,
        Err(e) => return Pulled::Reply(bad_header(req, &e)),
    };
    // Only routed topics are readable: the internal schedule topic is not.
    let routed = s.topics.get_perm_counted(h.topic);
    let Some(((perm_bits, counters), topic)) =
        routed.and_then(|r| Some((r, s.store.topic(h.topic)?)))
    else {
        return Pulled::Reply(reply_error(
            req,
            response_code::TOPIC_NOT_EXIST,
            format!("topic[{}] not exist, apply first please! https://rocketmq.apache.org/docs/bestPractice/06FAQ", quote(h.topic)),
        ));
    };
    if perm_bits & perm::READ == 0 {
        return Pulled::Reply(reply_error(
            req,
            response_code::NO_PERMISSION,
            format!("the topic[{}] pulling message is forbidden", quote(h.topic)),
        ));
    }
    let queue = match queue_id(req, h.queue_id, h.topic, topic.queue_count()) {
        Ok(q) => q,
        Err(r) => return Pulled::Reply(r),
    };
    let (filter, model) = match filter_for(s, req, &h) {
        Ok(f) => f,
        Err(r) => return Pulled::Reply(r),
    };
    let Ok(offset) = u64::try_from(h.queue_offset) else {
        // Below every offset: RocketMQ's OFFSET_TOO_SMALL, sent to the first retained one.
        return Pulled::Reply(match topic.offsets(queue) {
            Ok((min, max)) => offset_too_small(req, h.queue_offset, min, max),
            Err(e) => store_error(req, &e),
        });
    };
    if allow_suspend {
        match model {
            Some(MessageModel::Broadcasting) => {
                // The client keeps its offset; its read position is its acknowledgement.
                if let Some(m) = s.clients.broadcast_member(h.consumer_group, h.topic, ctx.id) {
                    s.store.broadcast_position(h.consumer_group, h.topic, m, queue, offset);
                }
            }
            _ => {
                // RocketMQ stores it on the first processing of the request, whatever its
                // suspend flag says.
                if h.has_commit_offset()
                    && super::check_offset_group(s, req, h.consumer_group).is_ok()
                {
                    if let Ok(c) = u64::try_from(h.commit_offset) {
                        let _ = s.store.commit(h.consumer_group, h.topic, queue, c);
                    }
                }
            }
        }
    }
    // Bounded as RocketMQ bounds a pull from memory: at most `maxTransferCountOnMessageInMemory`
    // messages and `maxTransferBytesOnMessageInMemory` bytes, whatever the client's
    // `maxMsgBytes` (Java's lite pull sends i32::MAX), but always at least one message.
    let max_msgs = usize::try_from(h.max_msg_nums).unwrap_or(0).clamp(1, s.config.pull_max_count());
    let max_bytes = s.config.pull_max_bytes();
    let mut body = BytesMut::new();
    let store_host = s.store_host;
    let (topic_name, uid) = (topic.name().to_string(), topic.uid());
    let mut delivered = 0usize;
    let mut visit = |m: crate::store::StoredRef<'_>| {
        if !body.is_empty() && body.len().saturating_add(m.record.len()) > max_bytes {
            return false;
        }
        let at = Placement {
            topic: &topic_name,
            topic_uid: uid,
            queue,
            offset: m.offset,
            store_timestamp: m.store_timestamp,
            store_host,
        };
        match record::write_out(m.record, &at, &s.cluster_property, &mut body) {
            Ok(n) if n > 0 => delivered += 1,
            // A record that cannot be written out is stepped over (counted, logged), never
            // stopped at: stopping would answer this offset again forever, for every group.
            // Returning `true` makes the read advance past it.
            result => skipped(s, &topic_name, queue, m.offset, result.err()),
        }
        true
    };
    let out = match topic.read(queue, offset, max_msgs, &filter, &mut visit) {
        Ok(o) => o,
        Err(e) => return Pulled::Reply(store_error(req, &e)),
    };
    if delivered > 0 {
        let pulled = metrics::Pulled {
            queue,
            next: out.next_offset,
            messages: delivered,
            bytes: body.len(),
        };
        counters.messages_out(h.consumer_group, topic.queue_count(), pulled);
    }
    let (min, max) = (out.min_offset, out.max_offset);
    let (code, next) = if delivered > 0 {
        (response_code::SUCCESS, out.next_offset)
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
        (response_code::PULL_RETRY_IMMEDIATELY, out.next_offset)
    };
    if code == response_code::PULL_NOT_FOUND && allow_suspend && h.has_suspend() {
        let asked = u64::try_from(h.suspend_timeout_millis).unwrap_or(0);
        let hold = Duration::from_millis(if asked == 0 {
            1000
        } else {
            asked.min(s.config.long_poll_max_ms)
        });
        return Pulled::Suspend { topic, queue, offset, hold };
    }
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
        resp = resp.with_body(body.freeze());
    } else if code == response_code::PULL_OFFSET_MOVED {
        resp.remark =
            Some(format!("the offset {offset} is illegal: queue range is [{min}, {max}]"));
    }
    Pulled::Reply(Reply::now(resp))
}

/// Counts and logs a stored record a pull could not write out.
fn skipped(s: &Shared, topic: &str, queue: u32, offset: u64, error: Option<MessageError>) {
    // Relaxed: a statistic; nothing is published through it.
    s.counters.records_skipped.fetch_add(1, Ordering::Relaxed);
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
