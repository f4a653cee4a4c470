//! The message properties string: `key 0x01 value 0x02 key 0x01 value 0x02 …`.
//!
//! Properties travel as this string in send headers, batch records and stored records. The
//! parser is lenient like Java's: segments without a separator, with an empty key or with an
//! empty value are skipped, and a value keeps any further 0x01 bytes. Non-UTF-8 segments are
//! skipped too. [`find`] looks up one key by scanning the bytes in place, without allocating; the
//! broker does that for `TAGS`, `UNIQ_KEY`, `KEYS` and `DELAY` on every send.
//!
//! Two forms of the string are on the wire. Apache RocketMQ 4.9.0 and 5.2+ end every pair,
//! the last included, with 0x02; Java 4.9.1 to 5.1.4 leaves the 0x02 after the last pair out.
//! Every client parses both. The broker accepts both and always emits the first, the canonical
//! form: [`write_pair`] inserts the missing separator before it appends, and
//! [`needs_separator`] tells the record encoders to do the same, so a property the broker adds
//! (`CLUSTER`, `UNIQ_KEY`, retry and delay properties) never runs into the client's last value.
//!
//! Key constants are the values of Java's `MessageConst`, named after their wire text.

use crate::remoting::error::{quote, MessageError};

/// Separates a key from its value.
pub const NAME_VALUE_SEPARATOR: u8 = 0x01;
/// Terminates a key/value pair.
pub const PROPERTY_SEPARATOR: u8 = 0x02;
/// The properties of one message may not exceed this many bytes (16-bit length prefix).
pub const MAX_PROPERTIES_LEN: usize = i16::MAX as usize;

/// Message tag; the broker's server-side filter hashes it (see [`tag_hash`]).
pub const TAGS: &str = "TAGS";
/// Space-separated message keys, indexed for `QUERY_MESSAGE`.
pub const KEYS: &str = "KEYS";
/// Space separating the tokens of [`KEYS`].
pub const KEY_SEPARATOR: char = ' ';
/// `"true"` when the producer waits for the store to confirm (`PROPERTY_WAIT_STORE_MSG_OK`).
pub const WAIT: &str = "WAIT";
/// Delay level 1..=18 (`PROPERTY_DELAY_TIME_LEVEL`).
pub const DELAY: &str = "DELAY";
/// Original topic of a message in a retry topic.
pub const RETRY_TOPIC: &str = "RETRY_TOPIC";
/// Real topic of a delayed message while it waits.
pub const REAL_TOPIC: &str = "REAL_TOPIC";
/// Real queue id of a delayed message while it waits.
pub const REAL_QID: &str = "REAL_QID";
/// Marks a transactional half message.
pub const TRAN_MSG: &str = "TRAN_MSG";
/// Producer group of a transactional message.
pub const PGROUP: &str = "PGROUP";
/// Queue min offset, set by clients after a pull.
pub const MIN_OFFSET: &str = "MIN_OFFSET";
/// Queue max offset, set by clients after a pull.
pub const MAX_OFFSET: &str = "MAX_OFFSET";
/// Buyer id (unit mode).
pub const BUYER_ID: &str = "BUYER_ID";
/// Message id of the first delivery, kept across retries.
pub const ORIGIN_MESSAGE_ID: &str = "ORIGIN_MESSAGE_ID";
/// Number of deliveries so far, in retry messages.
pub const RECONSUME_TIME: &str = "RECONSUME_TIME";
/// Message region.
pub const MSG_REGION: &str = "MSG_REGION";
/// Whether tracing is on.
pub const TRACE_ON: &str = "TRACE_ON";
/// Client-generated unique id (what clients report as `msgId`); see
/// [`msgid`](crate::remoting::msgid).
pub const UNIQ_KEY: &str = "UNIQ_KEY";
/// Maximum number of redeliveries before the dead-letter queue.
pub const MAX_RECONSUME_TIMES: &str = "MAX_RECONSUME_TIMES";
/// Time the client started consuming (client-side).
pub const CONSUME_START_TIME: &str = "CONSUME_START_TIME";
/// Cluster name, added by the broker to every stored message (request/reply uses it).
pub const CLUSTER: &str = "CLUSTER";
/// Message type (request/reply: `"reply"`).
pub const MSG_TYPE: &str = "MSG_TYPE";
/// Correlation id (request/reply).
pub const CORRELATION_ID: &str = "CORRELATION_ID";
/// Client id of the requester (request/reply).
pub const REPLY_TO_CLIENT: &str = "REPLY_TO_CLIENT";
/// Time to live of a request (request/reply).
pub const TTL: &str = "TTL";
/// Instance id (namespaced clients).
pub const INSTANCE_ID: &str = "INSTANCE_ID";
/// Transaction id.
pub const TRANSACTION_ID: &str = "__transactionId__";
/// Absolute delivery time of a 5.x timer message, epoch milliseconds.
pub const TIMER_DELIVER_MS: &str = "TIMER_DELIVER_MS";
/// Relative delay of a 5.x timer message, seconds.
pub const TIMER_DELAY_SEC: &str = "TIMER_DELAY_SEC";
/// Relative delay of a 5.x timer message, milliseconds.
pub const TIMER_DELAY_MS: &str = "TIMER_DELAY_MS";
/// When a timer message is due, epoch milliseconds (set by the broker).
pub const TIMER_OUT_MS: &str = "TIMER_OUT_MS";
/// When a timer message started waiting, epoch milliseconds (set by the broker).
pub const TIMER_ENQUEUE_MS: &str = "TIMER_ENQUEUE_MS";
/// When a timer message was delivered to its topic, epoch milliseconds (set by the broker).
pub const TIMER_DEQUEUE_MS: &str = "TIMER_DEQUEUE_MS";
/// The `UNIQ_KEY` of a waiting timer message this one cancels.
pub const TIMER_DEL_UNIQKEY: &str = "TIMER_DEL_UNIQKEY";
/// Number of records in an inner batch.
pub const INNER_NUM: &str = "INNER_NUM";
/// Sharding key of an ordered message.
pub const SHARDING_KEY: &str = "__SHARDINGKEY";
/// Prefix of properties that are never stored.
pub const TRANSIENT_PREFIX: &str = "__RMQ.TRANSIENT.";
/// A transactional message's own first-check delay, seconds
/// (`PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS`).
pub const CHECK_IMMUNITY_TIME_IN_SECONDS: &str = "CHECK_IMMUNITY_TIME_IN_SECONDS";

/// The properties the broker routes a message on, read in one pass over the string: for each
/// key, the value [`find`] gives (the first pair with that key, a non-empty value and valid
/// UTF-8), or `None`. The string itself stays the stored form; this is a view of it.
///
/// A face builds it once per message (from the string a remoting producer sent, or directly
/// from a gRPC message's fields, matching the string it writes), and the broker's decisions
/// (unique key, tag hash, half message, delay level, timer, dead letter) read it instead of
/// scanning the string again for each.
///
/// # Examples
///
/// ```
/// use baiji::remoting::properties::Routing;
///
/// let r = Routing::parse(b"TAGS\x01TagA\x02DELAY\x013\x02UNIQ_KEY\x01ABC\x02");
/// assert_eq!((r.tags, r.delay, r.uniq_key), (Some("TagA"), Some("3"), Some("ABC")));
/// assert_eq!(r.tran_msg, None);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Routing<'a> {
    /// [`UNIQ_KEY`].
    pub uniq_key: Option<&'a str>,
    /// [`TAGS`].
    pub tags: Option<&'a str>,
    /// [`KEYS`].
    pub keys: Option<&'a str>,
    /// [`DELAY`].
    pub delay: Option<&'a str>,
    /// [`TIMER_DELAY_SEC`].
    pub timer_delay_sec: Option<&'a str>,
    /// [`TIMER_DELAY_MS`].
    pub timer_delay_ms: Option<&'a str>,
    /// [`TIMER_DELIVER_MS`].
    pub timer_deliver_ms: Option<&'a str>,
    /// [`TIMER_OUT_MS`].
    pub timer_out_ms: Option<&'a str>,
    /// [`TIMER_DEL_UNIQKEY`].
    pub timer_del_uniqkey: Option<&'a str>,
    /// [`TRAN_MSG`].
    pub tran_msg: Option<&'a str>,
    /// [`PGROUP`].
    pub pgroup: Option<&'a str>,
    /// [`CHECK_IMMUNITY_TIME_IN_SECONDS`].
    pub check_immunity: Option<&'a str>,
    /// [`REAL_TOPIC`].
    pub real_topic: Option<&'a str>,
    /// [`REAL_QID`].
    pub real_qid: Option<&'a str>,
    /// [`RETRY_TOPIC`].
    pub retry_topic: Option<&'a str>,
    /// [`ORIGIN_MESSAGE_ID`].
    pub origin_message_id: Option<&'a str>,
}

impl<'a> Routing<'a> {
    /// The view of `props`, in one pass; only the values it keeps are checked for UTF-8.
    #[must_use]
    pub fn parse(props: &'a [u8]) -> Self {
        let mut r = Routing::default();
        for segment in props.split(|&b| b == PROPERTY_SEPARATOR) {
            let Some(sep) = segment.iter().position(|&b| b == NAME_VALUE_SEPARATOR) else {
                continue;
            };
            let (key, value) = segment.split_at(sep);
            let value = value.get(1..).unwrap_or_default();
            if value.is_empty() {
                continue;
            }
            let slot = match key {
                b"UNIQ_KEY" => &mut r.uniq_key,
                b"TAGS" => &mut r.tags,
                b"KEYS" => &mut r.keys,
                b"DELAY" => &mut r.delay,
                b"TIMER_DELAY_SEC" => &mut r.timer_delay_sec,
                b"TIMER_DELAY_MS" => &mut r.timer_delay_ms,
                b"TIMER_DELIVER_MS" => &mut r.timer_deliver_ms,
                b"TIMER_OUT_MS" => &mut r.timer_out_ms,
                b"TIMER_DEL_UNIQKEY" => &mut r.timer_del_uniqkey,
                b"TRAN_MSG" => &mut r.tran_msg,
                b"PGROUP" => &mut r.pgroup,
                b"CHECK_IMMUNITY_TIME_IN_SECONDS" => &mut r.check_immunity,
                b"REAL_TOPIC" => &mut r.real_topic,
                b"REAL_QID" => &mut r.real_qid,
                b"RETRY_TOPIC" => &mut r.retry_topic,
                b"ORIGIN_MESSAGE_ID" => &mut r.origin_message_id,
                _ => continue,
            };
            if slot.is_none() {
                *slot = std::str::from_utf8(value).ok();
            }
        }
        r
    }

    /// The tags-code of the message ([`tags_code`] of its string).
    #[must_use]
    pub fn tags_code(&self) -> i32 {
        self.tags.map_or(0, tag_hash)
    }

    /// Whether it carries a timer property (`TIMER_DELAY_SEC`, `TIMER_DELAY_MS` or
    /// `TIMER_DELIVER_MS`).
    #[must_use]
    pub fn has_timer(&self) -> bool {
        self.timer_delay_sec.is_some()
            || self.timer_delay_ms.is_some()
            || self.timer_deliver_ms.is_some()
    }
}

/// Iterates the well-formed `(key, value)` pairs of a properties string in order.
#[must_use]
pub fn iter(props: &[u8]) -> Iter<'_> {
    Iter { rest: props }
}

/// Iterator returned by [`iter`].
#[derive(Debug, Clone)]
pub struct Iter<'a> {
    rest: &'a [u8],
}

impl<'a> Iterator for Iter<'a> {
    type Item = (&'a str, &'a str);

    fn next(&mut self) -> Option<Self::Item> {
        while !self.rest.is_empty() {
            let (segment, rest) = match self.rest.iter().position(|&b| b == PROPERTY_SEPARATOR) {
                Some(i) => (
                    self.rest.get(..i).unwrap_or_default(),
                    self.rest.get(i + 1..).unwrap_or_default(),
                ),
                None => (self.rest, &[][..]),
            };
            self.rest = rest;
            if let Some(pair) = split_pair(segment) {
                return Some(pair);
            }
        }
        None
    }
}

fn split_pair(segment: &[u8]) -> Option<(&str, &str)> {
    let sep = segment.iter().position(|&b| b == NAME_VALUE_SEPARATOR)?;
    let key = segment.get(..sep)?;
    let value = segment.get(sep + 1..)?;
    if key.is_empty() || value.is_empty() {
        return None;
    }
    Some((std::str::from_utf8(key).ok()?, std::str::from_utf8(value).ok()?))
}

/// All well-formed pairs, in order (duplicates kept; [`find`] returns the first).
#[must_use]
pub fn parse(props: &[u8]) -> Vec<(&str, &str)> {
    iter(props).collect()
}

/// The value of `key`, scanning in place without allocating.
///
/// # Examples
///
/// ```
/// use baiji::remoting::properties::{find, TAGS};
///
/// assert_eq!(find(b"TAGS\x01TagA\x02KEYS\x01k1\x02", TAGS), Some("TagA"));
/// ```
#[must_use]
pub fn find<'a>(props: &'a [u8], key: &str) -> Option<&'a str> {
    // The first pair [`iter`] would yield with this key, found by comparing bytes: only the
    // matching pair's value is checked for UTF-8 (a send looks up five or so keys in
    // properties of a dozen pairs, and validating every pair was most of that cost).
    let key = key.as_bytes();
    if key.is_empty() || key.iter().any(|&b| b == NAME_VALUE_SEPARATOR || b == PROPERTY_SEPARATOR) {
        return None;
    }
    props.split(|&b| b == PROPERTY_SEPARATOR).find_map(|segment| {
        let value = segment.strip_prefix(key)?.strip_prefix(&[NAME_VALUE_SEPARATOR])?;
        if value.is_empty() {
            return None;
        }
        std::str::from_utf8(value).ok()
    })
}

/// Whether another pair cannot follow `props` as they are: they are not empty and do not end in
/// [`PROPERTY_SEPARATOR`] (how Java 4.9.1–5.1.4 writes them). Encoders then write one 0x02
/// first, which also puts the string in canonical form.
///
/// # Examples
///
/// ```
/// use baiji::remoting::properties::needs_separator;
///
/// assert!(needs_separator(b"TAGS\x01TagA"));
/// assert!(!needs_separator(b"TAGS\x01TagA\x02"));
/// assert!(!needs_separator(b""));
/// ```
#[must_use]
pub fn needs_separator(props: &[u8]) -> bool {
    props.last().is_some_and(|&b| b != PROPERTY_SEPARATOR)
}

/// Appends one `key 0x01 value 0x02` pair, first ending a last pair written without its 0x02
/// (see [`needs_separator`]).
///
/// # Errors
///
/// [`MessageError::PropertySeparator`] if the key or value contains 0x01 or 0x02, which would
/// corrupt the string.
pub fn write_pair(dst: &mut Vec<u8>, key: &str, value: &str) -> Result<(), MessageError> {
    let bad = |s: &str| s.bytes().any(|b| b == NAME_VALUE_SEPARATOR || b == PROPERTY_SEPARATOR);
    if bad(key) || bad(value) {
        return Err(MessageError::PropertySeparator { key: quote(key) });
    }
    dst.reserve(key.len() + value.len() + 3);
    if needs_separator(dst) {
        dst.push(PROPERTY_SEPARATOR);
    }
    dst.extend_from_slice(key.as_bytes());
    dst.push(NAME_VALUE_SEPARATOR);
    dst.extend_from_slice(value.as_bytes());
    dst.push(PROPERTY_SEPARATOR);
    Ok(())
}

/// Encodes pairs into a properties string.
///
/// # Errors
///
/// As for [`write_pair`].
pub fn encode<'a, I>(pairs: I) -> Result<Vec<u8>, MessageError>
where
    I: IntoIterator<Item = (&'a str, &'a str)>,
{
    let mut dst = Vec::new();
    for (key, value) in pairs {
        write_pair(&mut dst, key, value)?;
    }
    Ok(dst)
}

/// Java's `String.hashCode` of a tag: `h = 31 * h + c` over UTF-16 code units, wrapping.
///
/// This is the tags-code a subscription's `codeSet` contains and the server-side filter compares.
///
/// # Examples
///
/// ```
/// use baiji::remoting::properties::tag_hash;
///
/// assert_eq!(tag_hash("TagA"), 2_598_919); // "TagA".hashCode() in Java
/// ```
#[must_use]
pub fn tag_hash(tag: &str) -> i32 {
    tag.encode_utf16().fold(0i32, |h, unit| h.wrapping_mul(31).wrapping_add(i32::from(unit)))
}

/// Tags-code of a message: the hash of its `TAGS` property, 0 when it has none.
#[must_use]
pub fn tags_code(props: &[u8]) -> i32 {
    find(props, TAGS).map_or(0, tag_hash)
}

/// The index tokens of a message's `KEYS` property (space separated, empty tokens dropped).
pub fn keys(props: &[u8]) -> impl Iterator<Item = &str> {
    find(props, KEYS).unwrap_or_default().split(KEY_SEPARATOR).filter(|k| !k.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig { cases: 1024, failure_persistence: None, ..Default::default() })]

        /// `find` answers as the first matching pair of `iter` does, on well- and ill-formed
        /// properties alike (empty keys or values, missing separators, invalid UTF-8).
        #[test]
        fn find_agrees_with_iter(
            props in proptest::collection::vec(proptest::sample::select(vec![b'A', b'B', b'\x01', b'\x02', 0xff, b'e']), 0..40),
            key in proptest::sample::select(vec!["A", "B", "AB", "", "A\u{1}B", "e"]),
        ) {
            let expected = iter(&props).find(|(k, _)| *k == key).map(|(_, v)| v);
            proptest::prop_assert_eq!(find(&props, key), expected);
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig { cases: 1024, failure_persistence: None, ..Default::default() })]

        /// The one-pass view holds, for every key it keeps, what [`find`] answers for it.
        #[test]
        fn routing_agrees_with_find(
            pairs in proptest::collection::vec((
                proptest::sample::select(vec!["UNIQ_KEY", "TAGS", "DELAY", "TIMER_DELAY_MS", "TRAN_MSG", "PGROUP", "CHECK_IMMUNITY_TIME_IN_SECONDS", "REAL_QID", "X", ""]),
                proptest::sample::select(vec!["", "v", "1", "true", "\u{1}", "a\u{1}b"]),
                proptest::sample::select(vec![&b""[..], &b"\xff"[..]]),
            ), 0..12),
            end in proptest::bool::ANY,
        ) {
            let mut props = Vec::new();
            for (i, (k, v, junk)) in pairs.iter().enumerate() {
                if i > 0 || !props.is_empty() {
                    props.push(PROPERTY_SEPARATOR);
                }
                props.extend_from_slice(k.as_bytes());
                props.push(NAME_VALUE_SEPARATOR);
                props.extend_from_slice(v.as_bytes());
                props.extend_from_slice(junk);
            }
            if end && !props.is_empty() {
                props.push(PROPERTY_SEPARATOR);
            }
            let r = Routing::parse(&props);
            for (key, got) in [
                (UNIQ_KEY, r.uniq_key),
                (TAGS, r.tags),
                (DELAY, r.delay),
                (TIMER_DELAY_MS, r.timer_delay_ms),
                (TRAN_MSG, r.tran_msg),
                (PGROUP, r.pgroup),
                (CHECK_IMMUNITY_TIME_IN_SECONDS, r.check_immunity),
                (REAL_QID, r.real_qid),
            ] {
                proptest::prop_assert_eq!(got, find(&props, key), "key {}", key);
            }
            proptest::prop_assert_eq!(r.tags_code(), tags_code(&props));
        }
    }

    #[test]
    fn given_pairs_when_encoding_and_parsing_should_round_trip() {
        let pairs = [(TAGS, "TagA"), (KEYS, "k1 k2"), (UNIQ_KEY, "ABC"), (WAIT, "true")];
        let props = encode(pairs).expect("no separators");
        assert_eq!(parse(&props), pairs.to_vec());
        assert_eq!(find(&props, KEYS), Some("k1 k2"));
        assert_eq!(find(&props, DELAY), None);
        assert_eq!(keys(&props).collect::<Vec<_>>(), ["k1", "k2"]);
    }

    #[test]
    fn given_malformed_segments_when_parsing_should_skip_them() {
        let props =
            b"noseparator\x02\x01emptykey\x02emptyvalue\x01\x02a\x01b\x01c\x02\xff\x01x\x02k\x01v";
        assert_eq!(
            parse(props),
            vec![("a", "b\u{1}c"), ("k", "v")],
            "lenient parsing keeps only well-formed UTF-8 pairs; a trailing pair needs no 0x02"
        );
    }

    #[test]
    fn given_java_string_without_trailing_separator_when_appending_should_end_the_last_pair() {
        let mut props = b"KEYS\x01k1\x02TAGS\x01TagA".to_vec();
        write_pair(&mut props, UNIQ_KEY, "ABC").expect("no separators");
        assert_eq!(props, b"KEYS\x01k1\x02TAGS\x01TagA\x02UNIQ_KEY\x01ABC\x02");
        assert_eq!(find(&props, TAGS), Some("TagA"), "the tag stays intact");
        let mut canonical = b"TAGS\x01TagA\x02".to_vec();
        write_pair(&mut canonical, UNIQ_KEY, "ABC").expect("no separators");
        assert_eq!(canonical, props[b"KEYS\x01k1\x02".len()..], "no doubled separator");
    }

    #[test]
    fn given_separator_in_value_when_encoding_should_refuse() {
        assert!(write_pair(&mut Vec::new(), "k", "a\u{2}b").is_err());
        assert!(write_pair(&mut Vec::new(), "k\u{1}", "v").is_err());
    }

    #[test]
    fn given_tags_when_hashing_should_match_java_string_hashcode() {
        assert_eq!(tag_hash(""), 0);
        assert_eq!(tag_hash("TagA"), 2_598_919, "\"TagA\".hashCode()");
        assert_eq!(tag_hash("hello world"), 1_794_106_052, "\"hello world\".hashCode()");
        assert_eq!(tag_hash("😀"), 1_772_899, "surrogate pair hashes as two UTF-16 units");
        assert_eq!(
            tag_hash("a rather long tag that overflows"),
            "a rather long tag that overflows"
                .encode_utf16()
                .fold(0i32, |h, c| h.wrapping_mul(31).wrapping_add(i32::from(c))),
        );
        let props = encode([(TAGS, "TagA")]).expect("encodable");
        assert_eq!(tags_code(&props), 2_598_919);
        assert_eq!(tags_code(b""), 0, "no tag hashes to 0");
    }
}
