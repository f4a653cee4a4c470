//! Retries and dead letters: the one-queue topics `%RETRY%<group>` and `%DLQ%<group>`, and a
//! consumer's send-back ([`send_back`]). The original message is acknowledged by the group's
//! commit as usual, so retries never pin the original queue.

use std::time::Duration;

use super::delay::{self, rewrite_properties, MAX_LEVEL};
use super::record::{self, split_physical_offset, NewRecord, PutError};
use super::topics::{perm, DLQ_PREFIX, RETRY_PREFIX};
use super::Core;
use crate::remoting::body::TopicConfig;
use crate::remoting::msgid::encode_offset_msg_id;
use crate::remoting::properties;
use crate::store::{Retention, StoreError, TopicStore};
use crate::sync::Arc;
use crate::time::now_ms;

/// The one-queue topic `%RETRY%<group>` or `%DLQ%<group>`, created on demand. A dead-letter
/// topic keeps what nobody consumes for `dlq_retention_secs` (72 h), not the 60 s of other
/// unheld topics: dead letters are there to be looked at later.
pub(crate) fn group_topic(core: &Core, name: &str) -> Result<Arc<dyn TopicStore>, StoreError> {
    if core.topics.get_perm(name).is_none() {
        let mut c = TopicConfig::new(name, 1, 1);
        c.perm = perm::RW;
        core.create_topic(c)?;
    }
    let topic = core.store.ensure_topic(name, 1)?;
    if name.starts_with(DLQ_PREFIX) {
        topic.set_retention(Retention {
            time: Duration::from_secs(core.config.dlq_retention_secs),
            bytes: core.config.dlq_retention_bytes,
        });
    }
    Ok(topic)
}

/// A consumer's send-back of a message it failed to consume (remoting's
/// `CONSUMER_SEND_MSG_BACK`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct SendBack<'a> {
    /// The message's commit-log offset (what its offset msgId decodes to).
    pub(crate) offset: i64,
    /// The consumer group.
    pub(crate) group: &'a str,
    /// The delay level asked for (0: `3 + reconsume count`; negative: straight to the DLQ).
    pub(crate) delay_level: i32,
    /// Reconsumes of the group before a message goes to its dead-letter queue.
    pub(crate) max_reconsume_times: i32,
}

/// Why a send-back was refused.
#[derive(Debug)]
pub(crate) enum SendBackError {
    /// No retained message at that offset.
    Lost,
    /// The retry or dead-letter copy could not be stored.
    Put(PutError),
}

/// Sends a consumed message back, as a persistent broker does: the message (found by its
/// commit-log offset) is copied into `%RETRY%<group>` with `RETRY_TOPIC` (its original topic,
/// if not already set), `ORIGIN_MESSAGE_ID` (the first delivery's offset msgId, kept across
/// retries), its other properties (`UNIQ_KEY` included, so clients see the same message id)
/// and a reconsume count one higher, delayed by the level asked for (0: `3 + reconsume
/// count`). After the group's maximum reconsume times (or a negative level) it goes to
/// `%DLQ%<group>` instead, undelayed.
///
/// # Errors
/// [`SendBackError`].
pub(crate) fn send_back(core: &Core, h: &SendBack<'_>) -> Result<(), SendBackError> {
    core.unreplicated("send-backs (retry topics) are")
        .map_err(|why| SendBackError::Put(PutError::Store(StoreError::Other(why))))?;
    let Some((uid, queue, offset)) = split_physical_offset(h.offset) else {
        return Err(SendBackError::Lost);
    };
    let Some(topic) = core.store.topic_by_uid(uid) else { return Err(SendBackError::Lost) };
    let Some((stored, _)) = core.store.get(topic.as_ref(), queue, offset) else {
        return Err(SendBackError::Lost);
    };
    let Some(d) = record::decode(&stored) else { return Err(SendBackError::Lost) };

    let max = h.max_reconsume_times;
    let origin_id = properties::find(d.properties, properties::ORIGIN_MESSAGE_ID)
        .filter(|v| !v.trim().is_empty())
        .map_or_else(|| encode_offset_msg_id(core.store_host, h.offset), str::to_owned);
    let retry_topic =
        properties::find(d.properties, properties::RETRY_TOPIC).unwrap_or(topic.name()).to_owned();
    let props = rewrite_properties(
        d.properties,
        &[properties::DELAY],
        &[(properties::RETRY_TOPIC, &retry_topic), (properties::ORIGIN_MESSAGE_ID, &origin_id)],
    );
    let rec = NewRecord {
        flag: d.flag,
        sys_flag: d.sys_flag,
        born_timestamp: d.born_timestamp,
        born_host: d.born_host,
        reconsume_times: d.reconsume_times.saturating_add(1),
        body: d.body,
        properties: &props,
    };
    let result: Result<(), PutError> = if d.reconsume_times >= max || h.delay_level < 0 {
        record::encode(&rec, core.cluster_property.len()).map_err(PutError::from).and_then(|encoded| {
            let dlq = group_topic(core, &format!("{DLQ_PREFIX}{}", h.group))?;
            tracing::info!(group = %h.group, topic = %retry_topic, "message moved to the dead-letter queue");
            dlq.append(0, encoded, properties::tags_code(&props), now_ms())?;
            Ok(())
        })
    } else {
        // `reconsume_times` is whatever the producer sent: saturate rather than overflow.
        let level =
            if h.delay_level == 0 { d.reconsume_times.saturating_add(3) } else { h.delay_level };
        let level = u32::try_from(level).unwrap_or(MAX_LEVEL).clamp(1, MAX_LEVEL);
        let retry = format!("{RETRY_PREFIX}{}", h.group);
        group_topic(core, &retry)
            .map_err(PutError::from)
            .and_then(|_| delay::schedule(core, level, &retry, 0, &rec).map(|_| ()))
    };
    result.map_err(SendBackError::Put)
}
