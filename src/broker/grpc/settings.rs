//! The Settings a client sends first on Telemetry, merged with the server's values
//! (`docs/rocketmq5-grpc-pop-transactions.md` 1.3 and section 6). Every client blocks or misbehaves without some of them:
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
use crate::broker::core::Core;

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
pub(crate) fn retry_max_times(core: &Core, group: &str) -> u32 {
    core.groups.retry_max_times(group).unwrap_or(core.config.pop_retry_max_times)
}

/// The server's side of the Settings: what the broker's configuration and the consumer
/// group's config say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ServerValues {
    max_body_size: usize,
    fifo: bool,
    retry_max_times: u32,
}

/// `client`'s Settings with the server's values, or the status to answer with when it names
/// neither publishing nor subscription.
pub(crate) fn merge(core: &Core, client: Settings) -> Result<Settings, Status> {
    let group = match client.pub_sub.as_ref() {
        Some(PubSub::Subscription(sub)) => {
            sub.group.as_ref().map(|g| g.name.clone()).unwrap_or_default()
        }
        _ => String::new(),
    };
    let values = ServerValues {
        max_body_size: core.config.max_message_size,
        fifo: core.groups.orderly(&group),
        retry_max_times: retry_max_times(core, &group),
    };
    merge_with(values, client)
}

fn merge_with(v: ServerValues, client: Settings) -> Result<Settings, Status> {
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
            p.max_body_size = i32::try_from(v.max_body_size).unwrap_or(i32::MAX);
            p.validate_message_type = true;
        }
        Some(PubSub::Subscription(sub)) => {
            sub.fifo = Some(v.fifo);
            sub.receive_batch_size = Some(RECEIVE_BATCH_SIZE);
            sub.long_polling_timeout = Some(duration(LONG_POLLING_MS));
            let attempts = v.retry_max_times.saturating_add(1);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::broker::grpc::pb::{Publishing, Resource, Subscription};

    const VALUES: ServerValues =
        ServerValues { max_body_size: 4 << 20, fifo: true, retry_max_times: 16 };

    #[test]
    fn given_producer_settings_when_merged_should_carry_exponential_backoff_and_body_limit() {
        let client = Settings {
            pub_sub: Some(PubSub::Publishing(Publishing {
                topics: vec![Resource { resource_namespace: String::new(), name: "T".into() }],
                max_body_size: 0,
                validate_message_type: false,
            })),
            ..Settings::default()
        };
        let m = merge_with(VALUES, client).expect("a producer's settings merge");
        let policy = m.backoff_policy.expect("a backoff policy");
        assert_eq!(policy.max_attempts, 3);
        let Some(Strategy::ExponentialBackoff(e)) = policy.strategy else {
            panic!("Java refuses any producer strategy but exponential");
        };
        assert_eq!(
            (e.initial, e.max, e.multiplier),
            (Some(duration(10)), Some(duration(1000)), 2.0)
        );
        let Some(PubSub::Publishing(p)) = m.pub_sub else { panic!("still publishing") };
        assert_eq!(p.max_body_size, 4 << 20, "clients copy it verbatim: never 0");
        assert!(p.validate_message_type);
        assert_eq!(p.topics.len(), 1, "the client's topics are kept");
        assert_eq!(m.metric.map(|x| x.on), Some(false));
    }

    #[test]
    fn given_consumer_settings_when_merged_should_carry_polling_batch_fifo_and_attempts() {
        let client = Settings {
            pub_sub: Some(PubSub::Subscription(Subscription {
                group: Some(Resource { resource_namespace: String::new(), name: "G".into() }),
                ..Subscription::default()
            })),
            ..Settings::default()
        };
        let m = merge_with(VALUES, client).expect("a consumer's settings merge");
        let Some(PubSub::Subscription(sub)) = &m.pub_sub else { panic!("still subscribing") };
        assert_eq!(sub.fifo, Some(true), "from the group's consumeMessageOrderly");
        assert_eq!(sub.receive_batch_size, Some(32));
        assert_eq!(sub.long_polling_timeout, Some(duration(20_000)), "0 would make Python spin");
        let policy = m.backoff_policy.expect("a backoff policy");
        assert_eq!(policy.max_attempts, 17, "retryMaxTimes + 1");
        let Some(Strategy::CustomizedBackoff(c)) = policy.strategy else {
            panic!("Python's push consumer takes its nack delays from a customized policy only");
        };
        assert_eq!(c.next.first(), Some(&duration(1_000)));
        assert_eq!(c.next.last(), Some(&duration(7_200_000)));
    }

    #[test]
    fn given_settings_without_publishing_or_subscription_should_refuse_them() {
        let s = merge_with(VALUES, Settings::default()).expect_err("PUBSUB_NOT_SET");
        assert_eq!(s.code, Code::BadRequest as i32);
    }
}
