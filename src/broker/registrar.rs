//! Registering with external RocketMQ name servers (`--namesrv-addr`): one long-lived
//! connection per name server, `REGISTER_BROKER` with every topic's config at start, every
//! `register-interval-secs` and whenever topics change; `UNREGISTER_BROKER` at clean
//! shutdown; reconnect with backoff when a name server restarts or a connection drops. Each
//! name server has its own task, so one being down never blocks the others or the message path.

use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio_util::codec::{Decoder, Encoder};

use super::Shared;
use crate::remoting::body::{JsonBody, RegisterBrokerBody, TopicConfigAndMappingSerializeWrapper};
use crate::remoting::code::{request_code, response_code};
use crate::remoting::codec::RemotingCodec;
use crate::remoting::{ExtFields, RemotingCommand};

const RPC_TIMEOUT: Duration = Duration::from_secs(3);
const MAX_BACKOFF: Duration = Duration::from_secs(10);

/// The `REGISTER_BROKER` request for the broker's current topics.
pub(crate) fn register_request(s: &Shared) -> RemotingCommand {
    let wrapper = TopicConfigAndMappingSerializeWrapper {
        topic_config_table: s.topics.all().into_iter().map(|t| (t.topic_name.clone(), t)).collect(),
        data_version: s.topics.data_version(),
        ..Default::default()
    };
    let body = RegisterBrokerBody {
        topic_config_serialize_wrapper: wrapper,
        filter_server_list: Vec::new(),
    };
    let body = body.to_json_bytes().unwrap_or_default();
    let crc = (crc32fast::hash(&body) & 0x7FFF_FFFF) as i64;
    let mut ext = broker_ext(s);
    ext.insert("haServerAddr", &s.store_host.to_string());
    ext.insert_bool("compressed", false);
    ext.insert_i64("bodyCrc32", crc);
    ext.insert_bool("enableActingMaster", false);
    ext.insert_i64("heartbeatTimeoutMillis", 120_000);
    RemotingCommand::request(request_code::REGISTER_BROKER, s.next_opaque())
        .with_ext_fields(ext)
        .with_body(body)
}

fn broker_ext(s: &Shared) -> ExtFields {
    let mut ext = ExtFields::new();
    ext.insert("brokerName", &s.config.broker_name);
    ext.insert("brokerAddr", &s.store_host.to_string());
    ext.insert("clusterName", &s.config.cluster_name);
    ext.insert_i64("brokerId", 0);
    ext
}

struct Link {
    stream: TcpStream,
    codec: RemotingCodec,
    rbuf: BytesMut,
}

impl Link {
    async fn call(&mut self, req: RemotingCommand) -> Result<RemotingCommand, String> {
        let opaque = req.opaque;
        let mut out = BytesMut::new();
        self.codec.encode(req, &mut out).map_err(|e| e.to_string())?;
        self.stream.write_all(&out).await.map_err(|e| e.to_string())?;
        let wait = async {
            loop {
                if let Some(cmd) = self.codec.decode(&mut self.rbuf).map_err(|e| e.to_string())? {
                    if cmd.is_response() && cmd.opaque == opaque {
                        return Ok(cmd);
                    }
                    continue;
                }
                if self.stream.read_buf(&mut self.rbuf).await.map_err(|e| e.to_string())? == 0 {
                    return Err("connection closed by the name server".to_string());
                }
            }
        };
        tokio::time::timeout(RPC_TIMEOUT, wait)
            .await
            .map_err(|_| "no answer within 3 s".to_string())?
    }
}

/// Why an idle registered connection stopped waiting.
enum Idle {
    /// The interval passed or topics changed: register again.
    Register,
    /// The connection closed or failed.
    Lost(String),
    /// The broker is shutting down.
    Shutdown,
}

impl Link {
    /// Waits for the next registration while watching the connection: a name server that
    /// restarts (or drops us) closes it, and with it our registration, so that is noticed at
    /// once rather than at the next interval.
    async fn idle(
        &mut self,
        until: tokio::time::Instant,
        changed: &mut watch::Receiver<u64>,
        shutdown: &mut watch::Receiver<bool>,
    ) -> Idle {
        loop {
            tokio::select! {
                _ = tokio::time::sleep_until(until) => return Idle::Register,
                _ = changed.changed() => return Idle::Register,
                _ = shutdown.changed() => return Idle::Shutdown,
                // Cancel-safe: bytes read are kept in rbuf.
                r = self.stream.read_buf(&mut self.rbuf) => match r {
                    Ok(0) => return Idle::Lost("connection closed by the name server".into()),
                    Err(e) => return Idle::Lost(e.to_string()),
                    // Nothing is expected between our requests (a late answer to one that timed
                    // out, at most): drop whole frames, keep a partial one.
                    Ok(_) => loop {
                        match self.codec.decode(&mut self.rbuf) {
                            Ok(Some(_)) => {}
                            Ok(None) => break,
                            Err(e) => return Idle::Lost(e.to_string()),
                        }
                    },
                },
            }
        }
    }
}

/// Keeps this broker registered with the name server at `addr` until shutdown.
pub(crate) async fn run(s: Arc<Shared>, addr: String, mut shutdown: watch::Receiver<bool>) {
    let mut changed = s.topics_changed.subscribe();
    let interval = Duration::from_secs(s.config.register_interval_secs.clamp(1, 60));
    // Retries stay within one interval, so a name server that comes back has the broker again
    // within an interval.
    let max_backoff = MAX_BACKOFF.min(interval);
    let mut backoff = Duration::from_millis(200);
    let mut was_up = true;
    loop {
        let connect = tokio::time::timeout(RPC_TIMEOUT, TcpStream::connect(&addr));
        let stream = tokio::select! {
            r = connect => r.map_err(|_| "connect timed out".to_string()).and_then(|r| r.map_err(|e| e.to_string())),
            _ = shutdown.changed() => return,
        };
        let mut link = match stream {
            Ok(stream) => {
                let _ = stream.set_nodelay(true);
                Link { stream, codec: RemotingCodec::default(), rbuf: BytesMut::new() }
            }
            Err(e) => {
                if was_up {
                    tracing::warn!(namesrv = %addr, error = %e, "name server unreachable; retrying with backoff");
                    was_up = false;
                }
                tokio::select! {
                    _ = tokio::time::sleep(backoff) => {}
                    _ = shutdown.changed() => return,
                }
                backoff = (backoff * 2).min(max_backoff);
                continue;
            }
        };
        // Registered (again): everything below runs on this connection until it fails.
        let reason = loop {
            match link.call(register_request(&s)).await {
                Ok(resp) if resp.code == response_code::SUCCESS => {
                    if !was_up {
                        tracing::info!(namesrv = %addr, "registered with the name server");
                    }
                    was_up = true;
                    backoff = Duration::from_millis(200);
                }
                Ok(resp) => {
                    tracing::warn!(namesrv = %addr, code = resp.code, remark = ?resp.remark, "registration refused");
                }
                Err(e) => break e,
            }
            match link
                .idle(tokio::time::Instant::now() + interval, &mut changed, &mut shutdown)
                .await
            {
                Idle::Register => {}
                Idle::Lost(e) => break e,
                Idle::Shutdown => {
                    let req =
                        RemotingCommand::request(request_code::UNREGISTER_BROKER, s.next_opaque())
                            .with_ext_fields(broker_ext(&s));
                    match link.call(req).await {
                        Ok(_) => {
                            tracing::info!(namesrv = %addr, "unregistered from the name server")
                        }
                        Err(e) => {
                            tracing::warn!(namesrv = %addr, error = %e, "could not unregister")
                        }
                    }
                    return;
                }
            }
        };
        tracing::warn!(namesrv = %addr, error = %reason, "lost the name server; reconnecting");
        was_up = false;
        tokio::select! {
            _ = tokio::time::sleep(backoff) => {}
            _ = shutdown.changed() => return,
        }
    }
}
