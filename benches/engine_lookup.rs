//! What a lookup by offset or by time costs at the head of a queue and in the middle of a
//! 1,000,000-message backlog (criterion). Review 1.6: the broker's stateless pull, view by id
//! and send-back find their start by offset on every request, and search-by-timestamp by
//! time; with the queue's sparse index (`src/queue/index.rs`) that must cost the same wherever
//! the offset is.
//!
//! Threads: ONE. The engine has no reaper thread and nothing is reclaimed while measuring; the
//! backlog is 1M retained 128-byte messages in one queue, held by one group that never commits.
//!
//! Cases (group `engine_lookup`), each at `head` (the oldest retained message), `middle`
//! (offset 500,032, which is indexed) and `middle_worst` (offset 500,097: a pull there looks
//! up 500,096 and a get 500,097, each about half an index stride from both neighbouring
//! entries, the longest walks):
//! * `pull32/<at>` — `TopicHandle::read` of 32 messages from that offset (the broker's pull,
//!   RocketMQ's default batch), visiting each payload;
//! * `get/<at>` — `TopicHandle::get` of one message (`VIEW_MESSAGE_BY_ID`, send-back);
//! * `time/<at>` — `TopicHandle::offset_for_timestamp` of that message's store time
//!   (`SEARCH_OFFSET_BY_TIMESTAMP`).

use std::hint::black_box;
use std::time::Duration;

use baiji::engine::{
    Engine, EngineConfig, Filter, Message, Retention, StartFrom, SubscribeOptions, TopicHandle,
};
use bytes::Bytes;
use criterion::{Criterion, SamplingMode, Throughput};

const BACKLOG: u64 = 1_000_000;
const PAYLOAD: usize = 128;

fn rig() -> (Engine, TopicHandle) {
    let engine = Engine::new(EngineConfig {
        reaper_thread: false,
        retention: Retention { time: Duration::from_secs(3600), bytes: u64::MAX },
        ..EngineConfig::default()
    })
    .expect("engine");
    engine.create_topic("lookup", 1).expect("topic");
    engine
        .subscribe(
            "holder",
            "lookup",
            SubscribeOptions { start: StartFrom::First, ..Default::default() },
        )
        .expect("subscribe");
    let topic = engine.topic("lookup").expect("topic handle");
    let payload = Bytes::from(vec![7u8; PAYLOAD]);
    for i in 0..BACKLOG {
        // One store time per message (ms), as a fast producer gets: several share one.
        let m = Message::new(payload.clone()).with_timestamp(1_000_000 + i / 8);
        topic.append(0, m).expect("append");
    }
    (engine, topic)
}

fn main() {
    let mut c = Criterion::default()
        .sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .configure_from_args();
    let (_engine, topic) = rig();
    let at = [("head", 0u64), ("middle", 500_032), ("middle_worst", 500_097)];
    {
        let mut g = c.benchmark_group("engine_lookup");
        g.sampling_mode(SamplingMode::Flat);
        g.throughput(Throughput::Elements(1));
        for (name, from) in at {
            g.bench_function(format!("pull32/{name}"), |b| {
                b.iter(|| {
                    let out = topic
                        .read(0, black_box(from), 32, &Filter::All, |m| {
                            black_box(m.payload.len());
                            true
                        })
                        .expect("read");
                    assert_eq!(out.found, 32);
                })
            });
        }
        for (name, offset) in at {
            g.bench_function(format!("get/{name}"), |b| {
                b.iter(|| topic.get(0, black_box(offset), |m| m.timestamp).expect("get"))
            });
        }
        for (name, offset) in at {
            let ts = 1_000_000 + offset / 8;
            g.bench_function(format!("time/{name}"), |b| {
                b.iter(|| topic.offset_for_timestamp(0, black_box(ts)).expect("search"))
            });
        }
        g.finish();
    }
    c.final_summary();
}
