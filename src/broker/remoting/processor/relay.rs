//! The admin → broker → consumer relays mqadmin (`consumerStatus`, `consumerProgress -s`) and
//! the RocketMQ Dashboard (the consumer's "client" dialog, "resend to consumer") use:
//! `GET_CONSUMER_RUNNING_INFO` (307) and `CONSUME_MESSAGE_DIRECTLY` (309), as RocketMQ's
//! `AdminBrokerProcessor.callConsumer` serves them.
//!
//! The broker finds the consumer `clientId` of `consumerGroup` and sends it the same request
//! (the admin's header; for 309 `brokerName` added and the message, looked up by its offset
//! `msgId`, encoded in the body as `VIEW_MESSAGE_BY_ID` answers it), waits up to 10 s
//! ([`CALL_CLIENT_TIMEOUT`]) and answers the admin with the client's response as it came
//! (`ConsumerRunningInfo` / `ConsumeMessageDirectlyResult` JSON). Refusals are RocketMQ's:
//! `SYSTEM_ERROR` "The Consumer <group> <clientId> not online", "... Version <v> too low to
//! finish, please upgrade it to V3_1_8_SNAPSHOT", `CONSUME_MSG_TIMEOUT` when the client does not
//! answer in time. A message id that names no stored message is refused with `SYSTEM_ERROR`
//! before any client is asked (RocketMQ fails there too, with a `NullPointerException`).
//!
//! A consumer that is a 5.x SDK session of the gRPC face is reached through the core's
//! [`ConsumerRelay`] (the face asks it over its Telemetry stream, as Apache's proxy does), and
//! its answer is turned into the bodies the proxy makes: a `ConsumerRunningInfo` holding the
//! `jstack`, a `ConsumeMessageDirectlyResult` with `remark` "from gRPC client".

use std::collections::BTreeMap;

use serde::Serialize;

use super::bad_header;
use crate::broker::core::clients::{
    ConsumerAnswer, ConsumerCall, DirectMessage, RelayError, CALL_CLIENT_TIMEOUT,
};
use crate::broker::core::record::split_physical_offset;
use crate::broker::core::Core;
use crate::broker::remoting::{reply_error, CallError, ConnCtx, RemotingState, Reply};
use crate::remoting::code::response_code;
use crate::remoting::msgid::decode_offset_msg_id;
use crate::remoting::{ExtFields, RemotingCommand};
use crate::sync::Arc;

/// `MQVersion.Version.V3_1_8_SNAPSHOT.ordinal()`: older clients cannot answer these codes.
const V3_1_8_SNAPSHOT: i32 = 62;

/// `GET_CONSUMER_RUNNING_INFO` (307): header `consumerGroup`, `clientId`, `jstackEnable`.
pub(crate) fn get_consumer_running_info(
    core: &Arc<Core>,
    face: &Arc<RemotingState>,
    ctx: &ConnCtx,
    req: RemotingCommand,
) -> Reply {
    let (group, client) = match target(&req) {
        Ok(t) => t,
        Err(r) => return r,
    };
    let jstack = match req.ext_fields.optional_bool("jstackEnable") {
        Ok(v) => v.unwrap_or(false),
        Err(e) => return bad_header(&req, &e),
    };
    call_consumer(core, face, ctx, req, (group, client), ConsumerCall::RunningInfo { jstack })
}

/// `CONSUME_MESSAGE_DIRECTLY` (309): header `consumerGroup`, `clientId`, `msgId` (an offset
/// message id), `brokerName`, `topic`.
pub(crate) fn consume_message_directly(
    core: &Arc<Core>,
    face: &Arc<RemotingState>,
    ctx: &ConnCtx,
    mut req: RemotingCommand,
) -> Reply {
    let (group, client) = match target(&req) {
        Ok(t) => t,
        Err(r) => return r,
    };
    let msg_id = match req.ext_fields.required_str("msgId") {
        Ok(id) => id.to_string(),
        Err(e) => return bad_header(&req, &e),
    };
    let Some((message, encoded)) = look_up(core, &msg_id) else {
        let remark = format!("can not find message by the msgId: {msg_id}");
        return reply_error(&req, response_code::SYSTEM_ERROR, remark);
    };
    req.ext_fields.insert("brokerName", &core.config.broker_name);
    req.body = encoded;
    call_consumer(core, face, ctx, req, (group, client), ConsumerCall::ConsumeDirectly(message))
}

/// The `consumerGroup` and `clientId` a relay goes to.
fn target(req: &RemotingCommand) -> Result<(String, String), Reply> {
    let field = |k| req.ext_fields.required_str(k).map(str::to_string);
    match (field("consumerGroup"), field("clientId")) {
        (Ok(g), Ok(c)) => Ok((g, c)),
        (Err(e), _) | (_, Err(e)) => Err(bad_header(req, &e)),
    }
}

/// The message an offset message id names, and its encoding as `VIEW_MESSAGE_BY_ID` answers it
/// (RocketMQ puts `selectOneMessageByOffset`'s bytes in the body).
fn look_up(core: &Core, msg_id: &str) -> Option<(DirectMessage, bytes::Bytes)> {
    let phys = decode_offset_msg_id(msg_id).ok()?.commit_log_offset;
    let (uid, queue, offset) = split_physical_offset(phys)?;
    let topic = core.store.topic_by_uid(uid)?;
    let (record, store_timestamp, body) =
        super::query::encoded_at(core, topic.as_ref(), uid, queue, offset)?;
    let message =
        DirectMessage { record, topic: topic.name().to_string(), queue, offset, store_timestamp };
    Some((message, body))
}

/// RocketMQ's `callConsumer`: the request goes to the consumer's connection (or, for a
/// consumer of another face, through the core's relay); its answer goes to the admin later,
/// from a task of its own.
fn call_consumer(
    core: &Arc<Core>,
    face: &Arc<RemotingState>,
    ctx: &ConnCtx,
    req: RemotingCommand,
    (group, client): (String, String),
    call: ConsumerCall,
) -> Reply {
    let channel = core.clients.consumer_channel(&group, &client);
    let relayed = match channel {
        Some(_) => None,
        None => core.clients.relay().and_then(|r| r.call(&group, &client, call)),
    };
    if channel.is_none() && relayed.is_none() {
        let remark = format!("The Consumer <{group}> <{client}> not online");
        return reply_error(&req, response_code::SYSTEM_ERROR, remark);
    }
    if let Some((_, version)) = channel {
        if version < V3_1_8_SNAPSHOT {
            let remark = format!(
                "The Consumer <{client}> Version <{}> too low to finish, please upgrade it to \
                 V3_1_8_SNAPSHOT",
                version_desc(version)
            );
            return reply_error(&req, response_code::SYSTEM_ERROR, remark);
        }
    }
    // The client answers later: the admin's answer waits in a task of its own, with its room on
    // the admin's connection reserved before the client is asked, so it always finds room.
    let permit = if req.is_oneway() {
        None
    } else {
        match ctx.tx.clone().try_reserve_owned() {
            Ok(p) => Some(p),
            Err(_) => {
                let remark = "the broker cannot take more requests from this connection now";
                return reply_error(&req, response_code::SYSTEM_BUSY, remark.into());
            }
        }
    };
    let head = RemotingCommand::response_to(&req, response_code::SUCCESS, None);
    let who = format!("<{group}> <{client}>");
    let answer: Pending = match (channel, relayed) {
        (Some((conn, _)), _) => {
            let forward = RemotingCommand::request(req.code, 0)
                .with_ext_fields(req.ext_fields.clone())
                .with_body(req.body.clone());
            let mut pending = match face.call(conn, forward) {
                Ok(p) => p,
                Err(e) => {
                    if let Some(permit) = permit {
                        permit.send(failure(head, &who, Failure::Exception(e.to_string())));
                    }
                    return Reply::Nothing;
                }
            };
            let opaque = req.opaque;
            Box::pin(async move {
                match pending.answer(CALL_CLIENT_TIMEOUT).await {
                    Ok(mut resp) => {
                        // The client's answer as it came, to the admin's request.
                        resp.opaque = opaque;
                        Ok(resp)
                    }
                    Err(e @ CallError::TimedOut(_)) => Err(Failure::Timeout(e.to_string())),
                    Err(e) => Err(Failure::Exception(e.to_string())),
                }
            })
        }
        (None, Some(fut)) => {
            let head = head.clone();
            Box::pin(async move {
                match fut.await {
                    Ok(a) => Ok(from_relay(head, &a)),
                    Err(e @ RelayError::TimedOut(_)) => Err(Failure::Timeout(e.to_string())),
                    Err(e @ RelayError::Forbidden) => {
                        Err(Failure::Code(response_code::NO_PERMISSION, e.to_string()))
                    }
                    Err(e @ RelayError::Failed) => {
                        Err(Failure::Code(response_code::SYSTEM_ERROR, e.to_string()))
                    }
                    Err(e @ RelayError::Unreachable) => Err(Failure::Exception(e.to_string())),
                }
            })
        }
        (None, None) => return Reply::Nothing,
    };
    let mut shutdown = ctx.shutdown.clone();
    let peer = ctx.peer;
    tokio::spawn(async move {
        let result = tokio::select! {
            r = answer => r,
            _ = shutdown.changed() => Err(Failure::Exception("the broker is shutting down".into())),
        };
        let resp = match result {
            Ok(resp) => resp,
            Err(f) => {
                let resp = failure(head, &who, f);
                tracing::debug!(%peer, code = resp.code, remark = ?resp.remark, "a consumer relay failed");
                resp
            }
        };
        if let Some(permit) = permit {
            permit.send(resp);
        }
    });
    Reply::Nothing
}

/// A relayed call in flight, as the admin's answer or why there is none.
type Pending =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<RemotingCommand, Failure>> + Send>>;

/// Why a relayed call has no answer to pass on.
enum Failure {
    /// No answer in time (`CONSUME_MSG_TIMEOUT`).
    Timeout(String),
    /// The call could not be made or completed (`SYSTEM_ERROR`).
    Exception(String),
    /// The client refused: this code and remark.
    Code(i32, String),
}

/// The admin's answer for `f` (`head`: a response to its request; `who`: `<group> <client>`),
/// with RocketMQ's remarks.
fn failure(head: RemotingCommand, who: &str, f: Failure) -> RemotingCommand {
    let (code, remark) = match f {
        Failure::Timeout(e) => {
            (response_code::CONSUME_MSG_TIMEOUT, format!("consumer {who} Timeout: {e}"))
        }
        Failure::Exception(e) => {
            (response_code::SYSTEM_ERROR, format!("invoke consumer {who} Exception: {e}"))
        }
        Failure::Code(code, remark) => (code, remark),
    };
    failed_with(head, code, remark)
}

/// `resp` with `code` and `remark`.
fn failed_with(mut resp: RemotingCommand, code: i32, remark: String) -> RemotingCommand {
    resp.code = code;
    resp.remark = Some(remark);
    resp
}

/// RocketMQ's `ConsumerRunningInfo` as its proxy makes it for a gRPC client: empty but for
/// `jstack`.
#[derive(Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
struct ConsumerRunningInfo {
    properties: BTreeMap<String, String>,
    subscription_set: Vec<()>,
    mq_table: BTreeMap<String, ()>,
    mq_pop_table: BTreeMap<String, ()>,
    status_table: BTreeMap<String, ()>,
    user_consumer_info: BTreeMap<String, String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    jstack: Option<String>,
}

/// RocketMQ's `ConsumeMessageDirectlyResult` (Java's defaults but for what the client said).
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct ConsumeMessageDirectlyResult {
    order: bool,
    auto_commit: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    consume_result: Option<&'static str>,
    remark: &'static str,
    spent_time_mills: i64,
}

/// The admin's answer to a relayed consumer's `answer` (`head`: a success response to it).
fn from_relay(head: RemotingCommand, answer: &ConsumerAnswer) -> RemotingCommand {
    let body = match answer {
        ConsumerAnswer::RunningInfo { jstack } => serde_json::to_vec(&ConsumerRunningInfo {
            jstack: jstack.clone(),
            ..ConsumerRunningInfo::default()
        }),
        ConsumerAnswer::Consumed(result) => serde_json::to_vec(&ConsumeMessageDirectlyResult {
            order: false,
            auto_commit: true,
            consume_result: result.map(|r| r.name()),
            remark: "from gRPC client",
            spent_time_mills: 0,
        }),
    };
    match body {
        Ok(b) => head.with_ext_fields(ExtFields::new()).with_body(b),
        Err(e) => failed_with(head, response_code::SYSTEM_ERROR, e.to_string()),
    }
}

/// `MQVersion.getVersionDesc` for the versions below [`V3_1_8_SNAPSHOT`] (the enum's names in
/// order), else the ordinal.
fn version_desc(version: i32) -> String {
    const FIRST: [&str; 16] = [
        "V3_0_0_SNAPSHOT",
        "V3_0_0_ALPHA1",
        "V3_0_0_BETA1",
        "V3_0_0_BETA2",
        "V3_0_0_BETA3",
        "V3_0_0_BETA4",
        "V3_0_0_BETA5",
        "V3_0_0_BETA6_SNAPSHOT",
        "V3_0_0_BETA6",
        "V3_0_0_BETA7_SNAPSHOT",
        "V3_0_0_BETA7",
        "V3_0_0_BETA8_SNAPSHOT",
        "V3_0_0_BETA8",
        "V3_0_0_BETA9_SNAPSHOT",
        "V3_0_0_BETA9",
        "V3_0_0_FINAL",
    ];
    let Ok(v) = usize::try_from(version) else { return version.to_string() };
    if let Some(name) = FIRST.get(v) {
        return (*name).to_string();
    }
    // Then a SNAPSHOT and a release of each of V3_0_1..V3_0_15 and V3_1_0..V3_1_7.
    let i = v - FIRST.len();
    let (minor, patch) = match i / 2 {
        n @ 0..=14 => (0, n + 1),
        n @ 15..=22 => (1, n - 15),
        _ => return version.to_string(),
    };
    let snapshot = if i % 2 == 0 { "_SNAPSHOT" } else { "" };
    format!("V3_{minor}_{patch}{snapshot}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn given_old_version_ordinals_should_name_them_as_mqversion_does() {
        assert_eq!(version_desc(0), "V3_0_0_SNAPSHOT");
        assert_eq!(version_desc(15), "V3_0_0_FINAL");
        assert_eq!(version_desc(16), "V3_0_1_SNAPSHOT");
        assert_eq!(version_desc(45), "V3_0_15");
        assert_eq!(version_desc(46), "V3_1_0_SNAPSHOT");
        assert_eq!(version_desc(V3_1_8_SNAPSHOT - 1), "V3_1_7");
        assert_eq!(version_desc(-1), "-1");
    }

    #[test]
    fn given_a_grpc_answer_should_make_the_proxys_bodies() {
        let head = RemotingCommand::request(307, 9);
        let head = RemotingCommand::response_to(&head, response_code::SUCCESS, None);
        let r = from_relay(head.clone(), &ConsumerAnswer::RunningInfo { jstack: Some("t".into()) });
        let v: serde_json::Value = serde_json::from_slice(&r.body).expect("JSON");
        assert_eq!(v["jstack"], "t");
        assert!(v["subscriptionSet"].is_array() && v["mqTable"].is_object());
        let r = from_relay(head, &ConsumerAnswer::Consumed(None));
        let v: serde_json::Value = serde_json::from_slice(&r.body).expect("JSON");
        assert!(v.get("consumeResult").is_none(), "unset, as the proxy leaves it: {v}");
        assert_eq!(
            (v["remark"].as_str(), v["autoCommit"].as_bool()),
            (Some("from gRPC client"), Some(true))
        );
    }
}
