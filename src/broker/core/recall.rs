//! Recall (RocketMQ 5.3.2, apache/rocketmq#8974/#8975): a producer takes back a timer message
//! before it is due, with the handle its send answer carried.
//!
//! **The handle** is RocketMQ's `RecallMessageHandle.HandleV1`: `v1 <topic> <brokerName>
//! <timestamp> <messageId>` joined by single spaces and base64url-encoded (with padding, as
//! Java's `Base64.getUrlEncoder()` writes; decoding takes it with or without). The timestamp is
//! the due time plus one millisecond and the message id the message's `UNIQ_KEY`, as
//! `SendMessageProcessor` fills them. Only a timer message gets one (not a delay level, a half
//! message or a retry), as from RocketMQ.
//!
//! **A recall** is checked in `RecallMessageProcessor`'s order, each refusal a
//! [`RecallError`] whose `Display` is RocketMQ's remark: the topic must exist, the handle must
//! decode, name the topic asked for and this broker, and its time must be ahead (and within
//! the timer maximum). Then the waiting message with that topic, id and due time is taken out
//! of the timer index ([`timer::recall`]): it is never delivered, and its stored copy is
//! released as a delivered one is. As in RocketMQ, which only stores a deletion marker and
//! cannot tell, a valid handle of no waiting message (recalled already, or never sent) is
//! answered with success too; [`Recalled::found`] says which it was.

use base64::engine::general_purpose::{URL_SAFE, URL_SAFE_PAD_INDIFFERENT};
use base64::Engine as _;

use super::timer;
use super::Core;
use crate::remoting::error::quote;
use crate::time::now_ms;

/// The handle version baiji writes and reads.
const VERSION_1: &str = "v1";

/// A decoded `HandleV1`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Handle {
    /// The topic the message was sent to.
    pub(crate) topic: String,
    /// The broker it waits on.
    pub(crate) broker_name: String,
    /// Its due time plus one, epoch milliseconds, as text (what RocketMQ compares).
    pub(crate) timestamp: String,
    /// Its `UNIQ_KEY`.
    pub(crate) message_id: String,
}

impl Handle {
    /// The handle's text, as `HandleV1.buildHandle` writes it.
    pub(crate) fn encode(&self) -> String {
        let raw = [
            VERSION_1,
            self.topic.as_str(),
            self.broker_name.as_str(),
            self.timestamp.as_str(),
            self.message_id.as_str(),
        ]
        .join(" ");
        URL_SAFE.encode(raw.as_bytes())
    }

    /// Reads a handle as `RecallMessageHandle.decodeHandle` does: base64url (padding
    /// optional), then at least five space-separated items of which the first is `v1`
    /// (Java's `split(" ")`: trailing empty items dropped, extra items ignored).
    ///
    /// # Errors
    /// [`RecallError::InvalidHandle`].
    pub(crate) fn decode(text: &str) -> Result<Handle, RecallError> {
        if text.is_empty() {
            return Err(RecallError::InvalidHandle);
        }
        let bytes = URL_SAFE_PAD_INDIFFERENT
            .decode(text.as_bytes())
            .map_err(|_| RecallError::InvalidHandle)?;
        let raw = String::from_utf8_lossy(&bytes);
        let mut items: Vec<&str> = raw.split(' ').collect();
        while items.last() == Some(&"") {
            items.pop();
        }
        match items.as_slice() {
            [VERSION_1, topic, broker, timestamp, id, ..] => Ok(Handle {
                topic: (*topic).to_owned(),
                broker_name: (*broker).to_owned(),
                timestamp: (*timestamp).to_owned(),
                message_id: (*id).to_owned(),
            }),
            _ => Err(RecallError::InvalidHandle),
        }
    }
}

/// The handle a send answer carries for a timer message stored to wait until `due` on `topic`
/// with `uniq_key`.
pub(crate) fn handle_for(core: &Core, topic: &str, due: u64, uniq_key: &str) -> String {
    Handle {
        topic: topic.to_owned(),
        broker_name: core.config.broker_name.clone(),
        timestamp: due.saturating_add(1).to_string(),
        message_id: uniq_key.to_owned(),
    }
    .encode()
}

/// Why a recall was refused. `Display` is `RecallMessageProcessor`'s remark.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum RecallError {
    /// The topic asked for does not exist.
    UnknownTopic(String),
    /// The handle does not decode.
    InvalidHandle,
    /// The handle names another topic than the one asked for.
    TopicMismatch,
    /// The handle names another broker.
    OtherBroker,
    /// The handle's time is not ahead, or beyond the timer maximum: the message was delivered
    /// already (or never could wait that long).
    TimestampInvalid,
}

impl std::fmt::Display for RecallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RecallError::UnknownTopic(t) => {
                write!(f, "recall failed, the topic[{}] not exist", quote(t))
            }
            RecallError::InvalidHandle => f.write_str("recall handle is invalid"),
            RecallError::TopicMismatch => f.write_str("recall failed, topic not match"),
            RecallError::OtherBroker => f.write_str("recall failed, broker service not available"),
            RecallError::TimestampInvalid => f.write_str("recall failed, timestamp invalid"),
        }
    }
}

impl std::error::Error for RecallError {}

/// An accepted recall.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Recalled {
    /// The handle's message id (what RocketMQ answers in `msgId`).
    pub(crate) msg_id: String,
    /// Whether a waiting message was taken out (false: none waited with that id).
    pub(crate) found: bool,
}

/// Recalls the timer message `handle` names, asked for on `topic` (see the module docs).
///
/// # Errors
/// [`RecallError`], in `RecallMessageProcessor`'s order of checks.
pub(crate) fn recall(core: &Core, topic: &str, handle: &str) -> Result<Recalled, RecallError> {
    if core.topics.get(topic).is_none() {
        return Err(RecallError::UnknownTopic(topic.to_owned()));
    }
    let h = Handle::decode(handle)?;
    if h.topic != topic {
        return Err(RecallError::TopicMismatch);
    }
    if h.broker_name != core.config.broker_name {
        return Err(RecallError::OtherBroker);
    }
    // Java's `NumberUtils.toLong(s, -1)`: anything but a long is -1, in the past.
    let timestamp: i64 = h.timestamp.parse().unwrap_or(-1);
    let left = i128::from(timestamp) - i128::from(now_ms());
    let max = i128::from(core.config.timer_max_delay_sec) * 1000;
    if left <= 0 || left >= max {
        return Err(RecallError::TimestampInvalid);
    }
    // Our own handles carry due + 1; a hand-made one may carry the due time itself.
    let at = u64::try_from(timestamp).unwrap_or(0);
    let found = timer::recall(core, topic, &h.message_id, at.saturating_sub(1)..=at);
    Ok(Recalled { msg_id: h.message_id, found })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn handle(topic: &str) -> Handle {
        Handle {
            topic: topic.into(),
            broker_name: "broker-a".into(),
            timestamp: "1888825600001".into(),
            message_id: "7F00000100002A9F0000000000000001".into(),
        }
    }

    #[test]
    fn given_a_handle_when_encoded_should_be_rocketmqs_base64url_of_the_space_joined_items() {
        let h = handle("T");
        let text = h.encode();
        let raw = "v1 T broker-a 1888825600001 7F00000100002A9F0000000000000001";
        assert_eq!(text, URL_SAFE.encode(raw));
        assert_eq!(Handle::decode(&text), Ok(h.clone()));
        // Padding optional, as Java's URL decoder reads it.
        assert_eq!(Handle::decode(text.trim_end_matches('=')), Ok(h));
        // '-' and '_' rather than '+' and '/': a topic whose bytes encode to them.
        let odd = handle("a>?b~");
        assert!(!odd.encode().contains(['+', '/']), "{}", odd.encode());
        assert_eq!(Handle::decode(&odd.encode()), Ok(odd));
    }

    #[test]
    fn given_malformed_handles_when_decoded_should_be_invalid_as_in_rocketmq() {
        let bad = |raw: &str| Handle::decode(&URL_SAFE.encode(raw));
        assert_eq!(Handle::decode(""), Err(RecallError::InvalidHandle));
        assert_eq!(Handle::decode("not base64 !"), Err(RecallError::InvalidHandle));
        assert_eq!(Handle::decode("v1 a b c d"), Err(RecallError::InvalidHandle), "not encoded");
        assert_eq!(bad("v2 a b c d"), Err(RecallError::InvalidHandle));
        assert_eq!(bad("v1 a b c"), Err(RecallError::InvalidHandle));
        assert_eq!(bad("v1 a b c d   "), bad("v1 a b c d"), "trailing empty items dropped");
        let extra = bad("v1 a b c d e").expect("extra items are ignored");
        assert_eq!((extra.topic.as_str(), extra.message_id.as_str()), ("a", "d"));
        assert_eq!(RecallError::InvalidHandle.to_string(), "recall handle is invalid");
    }
}
