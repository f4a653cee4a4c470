//! The engine in a few lines: a topic, a producer, a consumer group, delivery, acknowledgement
//! and reclamation. Run with `cargo run --release --example quickstart`.

use std::time::Duration;

use baiji::engine::{Engine, EngineConfig, EngineError, Message, StartFrom, SubscribeOptions};

fn main() -> Result<(), EngineError> {
    let engine = Engine::new(EngineConfig::default())?;
    engine.create_topic("orders", 4)?;
    let group = engine.subscribe(
        "billing",
        "orders",
        SubscribeOptions { start: StartFrom::First, ..Default::default() },
    )?;
    let mut consumer = group.join()?;

    let mut producer = engine.producer("orders")?;
    for i in 0..10_000u32 {
        producer.send(Message::new(format!("order {i}")).with_tag("created"))?;
    }

    let mut received = 0;
    while received < 10_000 {
        let batch = consumer.recv_timeout(256, Duration::from_secs(1))?;
        if batch.is_empty() {
            break;
        }
        for d in &batch {
            consumer.ack(d)?;
        }
        received += batch.len();
    }
    engine.reap();
    let stats = engine.stats();
    println!(
        "received {received} messages; live {} messages, {} bytes in use, {} reclaimed",
        stats.live_messages, stats.bytes_used, stats.reclaimed_messages
    );
    Ok(())
}
