//! The admin tools' consumer relays for gRPC clients, as Apache's proxy relays them
//! (`GrpcClientChannel`, `ClientActivity`): `GET_CONSUMER_RUNNING_INFO` becomes a
//! `PrintThreadStackTraceCommand` on the client's Telemetry stream, answered by
//! `ThreadStackTrace`; `CONSUME_MESSAGE_DIRECTLY` becomes a `VerifyMessageCommand` carrying the
//! message, answered by `VerifyMessageResult`. Each command carries a nonce; the answer with
//! that nonce, from that client, completes the call ([`Relays::answered`]).
//!
//! The answers mean what the proxy makes of them: a stack trace with status OK is the running
//! info's `jstack` (`VERIFY_FIFO_MESSAGE_UNSUPPORTED`: forbidden, else failed); a verify result
//! is `CR_SUCCESS` on OK, `CR_LATER` on `FAILED_TO_CONSUME_MESSAGE`, `CR_RETURN_NULL` on
//! `MESSAGE_CORRUPTED`, unset otherwise. The Node.js SDK (1.0.8) answers a verify command with
//! a `VerifyMessageCommand` of the same nonce and `NOT_IMPLEMENTED`: taken as its answer too
//! (the proxy would wait it out).
//!
//! The proxy sends nothing for a running-info request without `jstackEnable`, and its caller
//! waits until it times out; here the client is asked for its stacks all the same, and the
//! answer leaves them out, so the admin learns at once whether the client is there.

use std::collections::HashMap;
use std::time::Duration;

use tokio::sync::oneshot;

use super::convert::{to_message, Delivered};
use super::pb::{self, telemetry_command::Command, Code};
use super::GrpcState;
use crate::broker::core::clients::{
    ConsumeResult, ConsumerAnswer, ConsumerCall, ConsumerRelay, RelayError, RelayFuture,
    CALL_CLIENT_TIMEOUT,
};
use crate::broker::core::record;
use crate::sync::{lock, Arc, AtomicU64, Mutex, Ordering};

/// Most relayed calls waiting at once; more are refused as unreachable (each admin request
/// makes one, and they end within [`CALL_CLIENT_TIMEOUT`]).
const MAX_PENDING: usize = 1024;

/// What a relayed call waits for: the answering command's status and command.
type Answer = (Option<pb::Status>, Command);

/// Relayed calls waiting for their answers, by nonce.
#[derive(Debug, Default)]
pub(crate) struct Relays {
    pending: Mutex<HashMap<String, (String, oneshot::Sender<Answer>)>>,
    next: AtomicU64,
}

impl Relays {
    /// A client's Telemetry command that may answer a relayed call: completes the call with
    /// its nonce if `client_id` was asked it. Returns whether it did.
    pub(crate) fn answered(
        &self,
        client_id: &str,
        status: Option<pb::Status>,
        cmd: Command,
    ) -> bool {
        let nonce = match &cmd {
            Command::ThreadStackTrace(t) => &t.nonce,
            Command::VerifyMessageResult(v) => &v.nonce,
            // The Node.js SDK's answer (see the module docs).
            Command::VerifyMessageCommand(v) => &v.nonce,
            _ => return false,
        };
        let mut pending = lock(&self.pending);
        if !pending.get(nonce).is_some_and(|(to, _)| to == client_id) {
            return false;
        }
        let Some((_, tx)) = pending.remove(nonce) else { return false };
        drop(pending);
        tx.send((status, cmd)).is_ok()
    }

    /// Registers a call to `client_id`: its nonce and where its answer comes.
    fn register(&self, client_id: &str) -> Option<(String, oneshot::Receiver<Answer>)> {
        let mut pending = lock(&self.pending);
        if pending.len() >= MAX_PENDING {
            return None;
        }
        // Relaxed: nonces only need to differ.
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let nonce = format!("baiji-{:x}-{n}", crate::time::now_ms());
        let (tx, rx) = oneshot::channel();
        pending.insert(nonce.clone(), (client_id.to_owned(), tx));
        Some((nonce, rx))
    }

    fn forget(&self, nonce: &str) {
        lock(&self.pending).remove(nonce);
    }
}

/// Forgets a relayed call on every way out (answered, timed out, dropped by the admin's
/// connection closing).
struct Registered {
    grpc: Arc<GrpcState>,
    nonce: String,
}

impl Drop for Registered {
    fn drop(&mut self) {
        self.grpc.relays.forget(&self.nonce);
    }
}

/// The gRPC face's consumers as the core's relay reaches them.
#[derive(Debug)]
pub(crate) struct GrpcConsumers {
    /// The face's state (sessions, pending relays).
    pub(crate) grpc: Arc<GrpcState>,
    /// The broker's address, the store host a relayed message names.
    pub(crate) store_host: std::net::SocketAddr,
}

impl ConsumerRelay for GrpcConsumers {
    fn call(&self, group: &str, client_id: &str, call: ConsumerCall) -> Option<RelayFuture> {
        let session = self.grpc.sessions.get(client_id)?;
        if session.group().as_deref() != Some(group) {
            return None;
        }
        let Some((nonce, answer)) = self.grpc.relays.register(client_id) else {
            return Some(Box::pin(async { Err(RelayError::Unreachable) }));
        };
        let guard = Registered { grpc: Arc::clone(&self.grpc), nonce: nonce.clone() };
        let (command, jstack) = match &call {
            ConsumerCall::RunningInfo { jstack } => (
                Command::PrintThreadStackTraceCommand(pb::PrintThreadStackTraceCommand { nonce }),
                *jstack,
            ),
            ConsumerCall::ConsumeDirectly(m) => {
                let Some(d) = record::decode(&m.record) else {
                    return Some(Box::pin(async { Err(RelayError::Failed) }));
                };
                let at = Delivered {
                    topic: &m.topic,
                    queue_id: i32::try_from(m.queue).unwrap_or(i32::MAX),
                    queue_offset: i64::try_from(m.offset).unwrap_or(i64::MAX),
                    store_timestamp_ms: i64::try_from(m.store_timestamp).unwrap_or(i64::MAX),
                    store_host: self.store_host,
                    receipt_handle: None,
                    invisible_ms: None,
                    reconsume_times: d.reconsume_times,
                };
                let message = Some(to_message(&d, &at));
                (Command::VerifyMessageCommand(pb::VerifyMessageCommand { nonce, message }), false)
            }
        };
        let sent = session.push(pb::TelemetryCommand { status: None, command: Some(command) });
        Some(Box::pin(async move {
            let _guard = guard;
            if !sent {
                return Err(RelayError::Unreachable);
            }
            let within: Duration = CALL_CLIENT_TIMEOUT;
            let (status, cmd) = match tokio::time::timeout(within, answer).await {
                Ok(Ok(a)) => a,
                Ok(Err(_)) => return Err(RelayError::Unreachable),
                Err(_) => return Err(RelayError::TimedOut(within)),
            };
            let code = status.map_or(Code::Ok as i32, |s| s.code);
            match cmd {
                Command::ThreadStackTrace(t) => {
                    if code == Code::Ok as i32 {
                        let jstack = t.thread_stack_trace.filter(|_| jstack);
                        Ok(ConsumerAnswer::RunningInfo { jstack })
                    } else if code == Code::VerifyFifoMessageUnsupported as i32 {
                        Err(RelayError::Forbidden)
                    } else {
                        Err(RelayError::Failed)
                    }
                }
                _ => {
                    let result = if code == Code::Ok as i32 {
                        Some(ConsumeResult::Success)
                    } else if code == Code::FailedToConsumeMessage as i32 {
                        Some(ConsumeResult::Later)
                    } else if code == Code::MessageCorrupted as i32 {
                        Some(ConsumeResult::ReturnNull)
                    } else {
                        None
                    };
                    Ok(ConsumerAnswer::Consumed(result))
                }
            }
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stack(nonce: &str) -> Command {
        Command::ThreadStackTrace(pb::ThreadStackTrace {
            nonce: nonce.to_owned(),
            thread_stack_trace: Some("main".into()),
        })
    }

    #[test]
    fn given_a_pending_call_should_take_only_its_clients_answer_with_its_nonce() {
        let relays = Relays::default();
        let (nonce, mut rx) = relays.register("client-a").expect("room");
        assert!(!relays.answered("client-b", None, stack(&nonce)), "another client cannot answer");
        assert!(!relays.answered("client-a", None, stack("other")), "nor another nonce");
        let settings = Command::Settings(pb::Settings::default());
        assert!(!relays.answered("client-a", None, settings), "nor another command");
        assert!(relays.answered("client-a", None, stack(&nonce)), "its own answer completes it");
        assert!(matches!(rx.try_recv(), Ok((None, Command::ThreadStackTrace(_)))));
        assert!(!relays.answered("client-a", None, stack(&nonce)), "once");
        let (nonce, _rx) = relays.register("client-a").expect("room");
        relays.forget(&nonce);
        assert!(!relays.answered("client-a", None, stack(&nonce)), "a forgotten call is gone");
    }
}
