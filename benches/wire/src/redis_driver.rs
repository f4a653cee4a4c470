//! Redis Streams: one stream per queue (`<topic>:<q>`), `XADD` to send (a pipeline of `XADD`s
//! for a batch), one consumer group per bench group created with `XGROUP CREATE ... $
//! MKSTREAM`, members reading their streams with `XREADGROUP ... BLOCK` and acknowledging with
//! `XACK` (sent in the same pipeline as the next read). Redis keeps acknowledged entries until
//! they are trimmed; the driver trims nothing, as XACK alone does not.

use std::time::Duration;

use baiji::bench::{BenchError, BenchResult, Consumer, Driver, Producer, Received, Workload};
use bytes::Bytes;
use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Value};

fn err(what: &str, e: impl std::fmt::Display) -> BenchError {
    BenchError::Protocol(format!("redis {what}: {e}"))
}

pub(crate) struct RedisDriver {
    url: String,
}

impl RedisDriver {
    pub(crate) fn new(addr: &str) -> Self {
        RedisDriver { url: format!("redis://{addr}/") }
    }

    async fn connect(
        &self,
        response_timeout: Option<Duration>,
    ) -> BenchResult<MultiplexedConnection> {
        let client = redis::Client::open(self.url.as_str()).map_err(|e| err("client", e))?;
        let cfg = AsyncConnectionConfig::new().set_response_timeout(response_timeout);
        client
            .get_multiplexed_async_connection_with_config(&cfg)
            .await
            .map_err(|e| err("connect", e))
    }
}

fn key(w: &Workload, q: u32) -> String {
    format!("{}:{q}", w.topic)
}

impl Driver for RedisDriver {
    type Producer = RedisProducer;
    type Consumer = RedisConsumer;

    async fn prepare(&self, w: &Workload) -> BenchResult<()> {
        let mut c = self.connect(Some(Duration::from_secs(10))).await?;
        for q in 0..w.queues {
            let _: Value = redis::cmd("DEL")
                .arg(key(w, q))
                .query_async(&mut c)
                .await
                .map_err(|e| err("DEL", e))?;
        }
        Ok(())
    }

    async fn producer(&self, w: &Workload, _id: usize) -> BenchResult<Vec<RedisProducer>> {
        let c = self.connect(Some(Duration::from_secs(30))).await?;
        let keys: Vec<String> = (0..w.queues).map(|q| key(w, q)).collect();
        Ok((0..w.lanes).map(|_| RedisProducer { conn: c.clone(), keys: keys.clone() }).collect())
    }

    async fn consumer(
        &self,
        w: &Workload,
        group: usize,
        member: usize,
    ) -> BenchResult<RedisConsumer> {
        let mut conn = self.connect(None).await?;
        let group_name = w.group_name(group);
        let keys: Vec<(u32, String)> = (0..w.queues)
            .filter(|q| *q as usize % w.members == member)
            .map(|q| (q, key(w, q)))
            .collect();
        for (_, k) in &keys {
            let r: redis::RedisResult<Value> = redis::cmd("XGROUP")
                .arg("CREATE")
                .arg(k)
                .arg(&group_name)
                .arg("$")
                .arg("MKSTREAM")
                .query_async(&mut conn)
                .await;
            if let Err(e) = r {
                if !e.to_string().contains("BUSYGROUP") {
                    return Err(err("XGROUP CREATE", e));
                }
            }
        }
        Ok(RedisConsumer {
            conn,
            group: group_name,
            name: format!("m{member}"),
            keys,
            unacked: Vec::new(),
        })
    }

    async fn cleanup(&self, w: &Workload) {
        if let Ok(mut c) = self.connect(Some(Duration::from_secs(10))).await {
            for q in 0..w.queues {
                let _: redis::RedisResult<Value> =
                    redis::cmd("DEL").arg(key(w, q)).query_async(&mut c).await;
            }
        }
    }
}

pub(crate) struct RedisProducer {
    conn: MultiplexedConnection,
    keys: Vec<String>,
}

impl Producer for RedisProducer {
    async fn send(&mut self, queue: u32, msgs: &[Bytes]) -> BenchResult<()> {
        let k = &self.keys[queue as usize % self.keys.len()];
        if let [one] = msgs {
            let _: Value = redis::cmd("XADD")
                .arg(k)
                .arg("*")
                .arg("d")
                .arg(one.as_ref())
                .query_async(&mut self.conn)
                .await
                .map_err(|e| err("XADD", e))?;
        } else {
            let mut p = redis::pipe();
            for m in msgs {
                p.cmd("XADD").arg(k).arg("*").arg("d").arg(m.as_ref());
            }
            let _: Vec<Value> =
                p.query_async(&mut self.conn).await.map_err(|e| err("XADD pipeline", e))?;
        }
        Ok(())
    }

    async fn close(self) {}
}

pub(crate) struct RedisConsumer {
    conn: MultiplexedConnection,
    group: String,
    name: String,
    keys: Vec<(u32, String)>,
    /// (stream index, entry id) delivered by the last poll, acknowledged by the next.
    unacked: Vec<(usize, Vec<u8>)>,
}

fn bytes_of(v: &Value) -> Option<&[u8]> {
    match v {
        Value::BulkString(b) => Some(b),
        Value::SimpleString(s) => Some(s.as_bytes()),
        _ => None,
    }
}

fn array(v: &Value) -> &[Value] {
    match v {
        Value::Array(a) | Value::Set(a) => a,
        _ => &[],
    }
}

impl Consumer for RedisConsumer {
    async fn poll(&mut self, out: &mut Vec<Received>, wait: Duration) -> BenchResult<()> {
        let mut p = redis::pipe();
        let acks = !self.unacked.is_empty();
        if acks {
            for (i, (_, k)) in self.keys.iter().enumerate() {
                let ids: Vec<&[u8]> = self
                    .unacked
                    .iter()
                    .filter(|(s, _)| *s == i)
                    .map(|(_, id)| id.as_slice())
                    .collect();
                if !ids.is_empty() {
                    p.cmd("XACK").arg(k).arg(&self.group).arg(ids).ignore();
                }
            }
            self.unacked.clear();
        }
        let read = p
            .cmd("XREADGROUP")
            .arg("GROUP")
            .arg(&self.group)
            .arg(&self.name)
            .arg("COUNT")
            .arg(256)
            .arg("BLOCK")
            .arg(wait.as_millis().max(1) as u64)
            .arg("STREAMS");
        for (_, k) in &self.keys {
            read.arg(k);
        }
        for _ in &self.keys {
            read.arg(">");
        }
        let reply: Vec<Value> =
            p.query_async(&mut self.conn).await.map_err(|e| err("XREADGROUP", e))?;
        let received_ns = baiji::bench::now_ns();
        let Some(streams) = reply.into_iter().last() else { return Ok(()) };
        // RESP2: [[key, [[id, [field, value, ...]], ...]], ...]; RESP3 may use a map.
        let per_stream: Vec<(Value, Value)> = match streams {
            Value::Map(m) => m,
            Value::Array(a) => a
                .into_iter()
                .filter_map(|s| match s {
                    Value::Array(mut kv) if kv.len() == 2 => {
                        let entries = kv.pop()?;
                        let k = kv.pop()?;
                        Some((k, entries))
                    }
                    _ => None,
                })
                .collect(),
            _ => Vec::new(),
        };
        for (k, entries) in per_stream {
            let Some(kb) = bytes_of(&k) else { continue };
            let Some(idx) = self.keys.iter().position(|(_, name)| name.as_bytes() == kb) else {
                continue;
            };
            let queue = self.keys[idx].0;
            for e in array(&entries) {
                let [id, fields] = array(e) else { continue };
                let Some(id) = bytes_of(id) else { continue };
                if let Some(payload) = array(fields).get(1).and_then(bytes_of) {
                    out.push(Received {
                        queue,
                        payload: Bytes::copy_from_slice(payload),
                        received_ns,
                    });
                }
                self.unacked.push((idx, id.to_vec()));
            }
        }
        Ok(())
    }

    async fn close(mut self) {
        if !self.unacked.is_empty() {
            let mut out = Vec::new();
            let _ = self.poll(&mut out, Duration::from_millis(1)).await;
        }
    }
}
