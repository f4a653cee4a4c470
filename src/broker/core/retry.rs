//! Retries and dead letters: the one-queue topics `%RETRY%<group>` and `%DLQ%<group>`.

use std::time::Duration;

use super::topics::{perm, DLQ_PREFIX};
use super::Core;
use crate::remoting::body::TopicConfig;
use crate::store::{Retention, StoreError, TopicStore};
use crate::sync::Arc;

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
