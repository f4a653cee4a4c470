//! Message ids (commit-log offsets) never resolve to another topic's message, however many
//! topics were created and deleted (review 1.7).

use bytes::Bytes;

use super::{physical_offset, split_physical_offset};
use crate::store::EngineConfig;
use crate::store::{MemoryStore, MessageLookup, MessageStore, MAX_ID_OFFSET, MAX_TOPIC_UID};

fn store() -> MemoryStore {
    match MemoryStore::new(EngineConfig { reaper_thread: false, ..EngineConfig::default() }) {
        Ok(s) => s,
        Err(e) => panic!("store: {e}"),
    }
}

/// What `VIEW_MESSAGE_BY_ID` and `CONSUMER_SEND_MSG_BACK` do with an id: the topic name and
/// the record it names.
fn resolve(s: &MemoryStore, phys: i64) -> Option<(String, Bytes)> {
    let (uid, queue, offset) = split_physical_offset(phys)?;
    let topic = s.topic_by_uid(uid)?;
    let (record, _) = s.get(topic.as_ref(), queue, offset)?;
    Some((topic.name().to_string(), record))
}

fn named(topic: &str, record: &'static [u8]) -> Option<(String, Bytes)> {
    Some((topic.to_string(), Bytes::from_static(record)))
}

#[test]
fn given_more_topic_creations_than_uid_bits_when_resolving_ids_should_never_reach_another_topic() {
    let s = store();
    let live = s.ensure_topic("LIVE", 1).unwrap();
    live.append(0, Bytes::from_static(b"live"), 0, 1).unwrap();
    let live_id = physical_offset(live.uid(), 0, 0);
    let old = s.ensure_topic("OLD", 1).unwrap();
    let old_uid = old.uid();
    let old_ids: Vec<i64> = (0..3)
        .map(|_| {
            physical_offset(old.uid(), 0, old.append(0, Bytes::from_static(b"old"), 0, 1).unwrap())
        })
        .collect();
    assert_eq!(resolve(&s, old_ids[0]), named("OLD", b"old"));
    s.delete_topic("OLD").unwrap();
    assert_eq!(resolve(&s, old_ids[0]), None, "a deleted topic's message is gone");
    // Every other uid is used once (LIVE and OLD took two); the next topics get uids beyond
    // the 17 bits a commit-log offset has for them, unless deleted topics' uids are reused.
    for i in 0..MAX_TOPIC_UID - 2 {
        let name = format!("churn{i}");
        s.ensure_topic(&name, 1).unwrap();
        s.delete_topic(&name).unwrap();
    }
    let mut ids = Vec::new();
    for name in ["NEW", "NEXT"] {
        let t = s.ensure_topic(name, 1).unwrap();
        let at = t.append(0, Bytes::from_static(b"new"), 0, 1).unwrap();
        ids.push((name, t.uid(), physical_offset(t.uid(), 0, at)));
    }
    for &(name, uid, id) in ids.iter().rev() {
        let r = resolve(&s, id);
        assert_eq!(r, named(name, b"new"), "the id of {name}'s message (uid {uid}) names it");
    }
    // The premise of what follows: NEW was given OLD's uid.
    assert_eq!(s.topic_by_uid(old_uid).map(|t| t.name().to_string()), Some("NEW".into()));
    for id in &old_ids {
        let r = resolve(&s, *id);
        assert_eq!(r, None, "OLD's id {id} resolved to another topic's message");
    }
    assert_eq!(resolve(&s, live_id), named("LIVE", b"live"));
}

#[test]
fn given_uid_or_offset_beyond_its_bits_when_packing_should_name_no_message() {
    assert_eq!(split_physical_offset(physical_offset(MAX_TOPIC_UID + 1, 0, 0)), None);
    assert_eq!(split_physical_offset(physical_offset(1, 1024, 0)), None);
    assert_eq!(split_physical_offset(physical_offset(1, 0, MAX_ID_OFFSET + 1)), None);
}
