//! The Settings a client sends first on Telemetry, merged with the server's values (facts doc
//! 1.3 and section 6). Every client blocks or misbehaves without some of them:
//!
//! - producers: an exponential backoff (10 ms, 1 s, ×2; Java refuses any other strategy),
//!   `max_attempts` 3, `max_body_size` = the broker's `max-message-size` (Node and Python copy it
//!   verbatim: 0 would refuse every send), `validate_message_type` true;
//! - consumers: `receive_batch_size` 32, `long_polling_timeout` 20 s (Python polls with it; 0
//!   would spin), `fifo` from the group's `consumeMessageOrderly`, and a backoff whose
//!   `max_attempts` is the group's `retryMaxTimes + 1`. Its strategy is `customized_backoff`
//!   with RocketMQ's delay levels (1 s … 2 h): Python's push consumer takes its nack delays only
//!   from a customized policy (else 1 s), Java accepts both, and Node's push consumer ignores a
//!   customized policy and keeps its own;
//! - everyone: `metric.on = false` (no collector).

use super::convert::duration;
use super::pb::{
    retry_policy::Strategy, settings::PubSub, ClientType, Code, CustomizedBackoff,
    ExponentialBackoff, Metric, RetryPolicy, Settings, Status,
};
use super::status::status;
use crate::broker::Shared;

/// Producer send attempts (the proxy's value).
pub(crate) const PRODUCER_MAX_ATTEMPTS: i32 = 3;
/// Messages a push consumer asks for per receive.
pub(crate) const RECEIVE_BATCH_SIZE: i32 = 32;
/// A push consumer's long-polling time, ms (the proxy's maximum).
pub(crate) const LONG_POLLING_MS: u64 = 20_000;
/// RocketMQ's delay levels after the first (`1s 5s 10s 30s 1m 2m … 1h 2h`), ms: the consumer
/// backoff.
const DELAY_LEVELS_MS: [u64; 18] = [
    1_000, 5_000, 10_000, 30_000, 60_000, 120_000, 180_000, 240_000, 300_000, 360_000, 420_000,
    480_000, 540_000, 600_000, 1_200_000, 1_800_000, 3_600_000, 7_200_000,
];

/// The retries of `group` before a message goes to its dead-letter queue: the admin's
/// `retryMaxTimes`, else the broker's `pop-retry-max-times`.
pub(crate) fn retry_max_times(s: &Shared, group: &str) -> u32 {
    s.groups.retry_max_times(group).unwrap_or(s.config.pop_retry_max_times)
}

/// `client`'s Settings with the server's values, or the status to answer with when it names
/// neither publishing nor subscription.
pub(crate) fn merge(s: &Shared, client: Settings) -> Result<Settings, Status> {
    let mut merged = client;
    match merged.pub_sub.as_mut() {
        Some(PubSub::Publishing(p)) => {
            merged.client_type = Some(ClientType::Producer as i32);
            merged.backoff_policy = Some(RetryPolicy {
                max_attempts: PRODUCER_MAX_ATTEMPTS,
                strategy: Some(Strategy::ExponentialBackoff(ExponentialBackoff {
                    initial: Some(duration(10)),
                    max: Some(duration(1_000)),
                    multiplier: 2.0,
                })),
            });
            p.max_body_size = i32::try_from(s.config.max_message_size).unwrap_or(i32::MAX);
            p.validate_message_type = true;
        }
        Some(PubSub::Subscription(sub)) => {
            let group = sub.group.as_ref().map(|g| g.name.clone()).unwrap_or_default();
            let fifo = s.groups.orderly(&group);
            sub.fifo = Some(fifo);
            sub.receive_batch_size = Some(RECEIVE_BATCH_SIZE);
            sub.long_polling_timeout = Some(duration(LONG_POLLING_MS));
            let attempts = retry_max_times(s, &group).saturating_add(1);
            merged.backoff_policy = Some(RetryPolicy {
                max_attempts: i32::try_from(attempts).unwrap_or(i32::MAX),
                strategy: Some(Strategy::CustomizedBackoff(CustomizedBackoff {
                    next: DELAY_LEVELS_MS.iter().map(|ms| duration(*ms)).collect(),
                })),
            });
        }
        None => {
            return Err(status(
                Code::BadRequest,
                "settings carry neither publishing nor subscription (PUBSUB_NOT_SET)",
            ))
        }
    }
    merged.metric = Some(Metric { on: false, endpoints: None });
    Ok(merged)
}
