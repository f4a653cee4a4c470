//! Broker configuration over the wire: `GET_BROKER_CONFIG` (26) answers a properties text of
//! every setting under RocketMQ's camelCase names (baiji's own settings camel-cased the same
//! way); `UPDATE_BROKER_CONFIG` (25) takes a properties text and puts the settings that can
//! change while the broker runs in force at once: `memoryBudget`, `memoryPolicy`,
//! `retentionSecs`, `retentionBytes`. Any other key refuses the whole update (`NO_PERMISSION`,
//! as RocketMQ refuses keys of its black list) with a remark naming it; nothing is written to
//! the configuration file (an update lasts until the broker restarts).

use crate::sync::Arc;
use std::time::Duration;

use crate::broker::core::config::policy_name;
use crate::broker::core::Core;
use crate::broker::remoting::{ok, reply_error, ConnCtx, RemotingState, Reply};
use crate::remoting::code::response_code;
use crate::remoting::RemotingCommand;
use crate::store::{MemoryPolicy, Settings};

/// The settings `UPDATE_BROKER_CONFIG` changes live.
pub(crate) const LIVE_KEYS: &[&str] =
    &["memoryBudget", "memoryPolicy", "retentionSecs", "retentionBytes"];

/// Every setting as `(name, value)`, the live ones as in force now.
pub(crate) fn properties(core: &Core, face: &RemotingState) -> Vec<(&'static str, String)> {
    let c = &core.config;
    let r = &face.config;
    let live = core.store.settings();
    let opt = |v: Option<String>| v.unwrap_or_default();
    vec![
        ("brokerClusterName", c.cluster_name.clone()),
        ("brokerName", c.broker_name.clone()),
        ("brokerId", "0".into()),
        ("brokerRole", "ASYNC_MASTER".into()),
        ("brokerIP1", core.store_host.ip().to_string()),
        ("listenPort", core.store_host.port().to_string()),
        // Where clients with the VIP channel call (RocketMQ derives it, listenPort - 2, and has
        // no key for it; empty when the fast port is off).
        ("fastListenPort", opt(face.fast_port.map(|p| p.to_string()))),
        ("namesrvAddr", opt(c.namesrv_addr.clone())),
        ("namesrvListen", opt(r.namesrv_listen.map(|a| a.to_string()))),
        ("metricsListen", opt(c.metrics_listen.map(|a| a.to_string()))),
        // The proxy's name for its gRPC port; peers read it to route gRPC clients here.
        ("grpcServerPort", opt(core.grpc_endpoint.map(|a| a.port().to_string()))),
        ("defaultTopicQueueNums", c.default_queues.to_string()),
        ("autoCreateTopicEnable", c.auto_create_topic.to_string()),
        ("maxMessageSize", c.max_message_size.to_string()),
        ("memoryBudget", live.memory_budget.to_string()),
        ("memoryPolicy", policy_name(live.policy).into()),
        ("retentionSecs", live.retention.time.as_secs().to_string()),
        ("retentionBytes", live.retention.bytes.to_string()),
        ("dlqRetentionSecs", c.dlq_retention_secs.to_string()),
        ("dlqRetentionBytes", c.dlq_retention_bytes.to_string()),
        ("traceRetentionSecs", c.trace_retention_secs.to_string()),
        ("keepAcknowledgedSecs", c.keep_acknowledged_secs.to_string()),
        ("clientExpirySecs", c.client_expiry_secs.to_string()),
        ("groupIdleSecs", c.group_idle_secs.to_string()),
        ("longPollMaxMs", r.long_poll_max_ms.to_string()),
        ("registerNameServerPeriod", (r.register_interval_secs * 1000).to_string()),
        (
            "maxTransferBytesOnMessageInMemory",
            r.max_transfer_bytes_on_message_in_memory.to_string(),
        ),
        (
            "maxTransferCountOnMessageInMemory",
            r.max_transfer_count_on_message_in_memory.to_string(),
        ),
        ("maxConnections", c.max_connections.to_string()),
        ("serverChannelMaxIdleTimeSeconds", r.server_channel_max_idle_time_seconds.to_string()),
        ("maxSuspendedPullsPerConnection", r.max_suspended_pulls_per_connection.to_string()),
        ("writeBufferHighWaterMark", r.write_buffer_high_water_mark.to_string()),
        ("transactionTimeOut", c.transaction_time_out.to_string()),
        ("transactionCheckInterval", c.transaction_check_interval.to_string()),
        ("transactionCheckMax", c.transaction_check_max.to_string()),
        ("timerMaxDelaySec", c.timer_max_delay_sec.to_string()),
        ("aclEnable", face.security.acl_file.is_some().to_string()),
        ("tlsMode", format!("{:?}", face.security.tls_mode).to_ascii_lowercase()),
    ]
}

/// `GET_BROKER_CONFIG` (26): `key=value` lines, and the topic table's data version in
/// the `version` header field.
pub(crate) fn get_broker_config(
    core: &Arc<Core>,
    face: &Arc<RemotingState>,
    _ctx: &ConnCtx,
    req: RemotingCommand,
) -> Reply {
    let mut text = String::new();
    for (k, v) in properties(core, face) {
        text.push_str(k);
        text.push('=');
        text.push_str(&v);
        text.push('\n');
    }
    let mut ext = crate::remoting::ExtFields::new();
    if let Ok(v) = serde_json::to_string(&core.topics.data_version()) {
        ext.insert("version", &v);
    }
    Reply::now(ok(&req, ext).with_body(text.into_bytes()))
}

/// `key=value` lines of a properties text (blank lines and `#` / `!` comments skipped).
fn parse_properties(text: &str) -> Vec<(&str, &str)> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#') && !l.starts_with('!'))
        .map(|l| match l.split_once(['=', ':']) {
            Some((k, v)) => (k.trim(), v.trim()),
            None => (l, ""),
        })
        .collect()
}

/// The settings after applying `props` to `now`, or why not.
pub(crate) fn updated(now: Settings, props: &[(&str, &str)]) -> Result<Settings, String> {
    let fixed: Vec<&str> =
        props.iter().map(|(k, _)| *k).filter(|k| !LIVE_KEYS.contains(k)).collect();
    if !fixed.is_empty() {
        return Err(format!(
            "baiji cannot change {} while running (only {} can change live); set it in the configuration and restart",
            fixed.join(", "),
            LIVE_KEYS.join(", ")
        ));
    }
    let mut next = now;
    for (k, v) in props {
        let number =
            || v.parse::<u64>().map_err(|_| format!("{k} must be a whole number, not `{v}`"));
        match *k {
            "memoryBudget" => {
                next.memory_budget = number()?;
                if next.memory_budget == 0 {
                    return Err("memoryBudget must be positive".into());
                }
            }
            "memoryPolicy" => {
                next.policy = match *v {
                    "reject" => MemoryPolicy::Reject,
                    "drop-oldest" | "drop_oldest" => MemoryPolicy::DropOldest,
                    other => {
                        return Err(format!(
                            "memoryPolicy must be reject or drop-oldest, not `{other}`"
                        ))
                    }
                };
            }
            "retentionSecs" => next.retention.time = Duration::from_secs(number()?),
            _ => next.retention.bytes = number()?,
        }
    }
    Ok(next)
}

/// `UPDATE_BROKER_CONFIG` (25).
pub(crate) fn update_broker_config(
    core: &Arc<Core>,
    _face: &Arc<RemotingState>,
    _ctx: &ConnCtx,
    req: RemotingCommand,
) -> Reply {
    let Ok(text) = std::str::from_utf8(&req.body) else {
        return reply_error(&req, response_code::SYSTEM_ERROR, "the body is not UTF-8".into());
    };
    let props = parse_properties(text);
    let next = match updated(core.store.settings(), &props) {
        Ok(n) => n,
        Err(remark) => return reply_error(&req, response_code::NO_PERMISSION, remark),
    };
    if let Err(e) = core.store.apply_settings(next) {
        return reply_error(&req, response_code::SYSTEM_ERROR, e.to_string());
    }
    tracing::info!(
        memory_budget = next.memory_budget,
        policy = policy_name(next.policy),
        retention_secs = next.retention.time.as_secs(),
        retention_bytes = next.retention.bytes,
        "broker settings updated"
    );
    Reply::now(ok(&req, Default::default()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> Settings {
        Settings {
            memory_budget: 100,
            policy: MemoryPolicy::Reject,
            retention: crate::store::Retention { time: Duration::from_secs(60), bytes: 10 },
        }
    }

    #[test]
    fn given_live_keys_when_updating_should_change_only_them() {
        let props = parse_properties("memoryBudget=2048\n# comment\nmemoryPolicy=drop-oldest\n");
        let next = updated(now(), &props).expect("live keys are accepted");
        assert_eq!(next.memory_budget, 2048, "the budget changes");
        assert_eq!(next.policy, MemoryPolicy::DropOldest, "the policy changes");
        assert_eq!(next.retention, now().retention, "what was not named stays");
    }

    #[test]
    fn given_a_fixed_key_when_updating_should_refuse_naming_it() {
        let props = parse_properties("memoryBudget=2048\nlistenPort=1\n");
        let e = updated(now(), &props).expect_err("listenPort cannot change live");
        assert!(e.contains("listenPort") && e.contains("restart"), "the remark names the key: {e}");
    }

    #[test]
    fn given_bad_values_when_updating_should_refuse() {
        for text in
            ["memoryBudget=0", "memoryBudget=lots", "memoryPolicy=block", "retentionSecs=-1"]
        {
            assert!(updated(now(), &parse_properties(text)).is_err(), "{text} is refused");
        }
    }
}
