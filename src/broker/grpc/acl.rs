//! The gRPC face's ACL: where a 5.x SDK's call carries its account and signature, and what
//! each RPC needs, checked against the shared accounts ([`crate::broker::security::acl`],
//! the same rules and reloads as the remoting face's) before the RPC runs.
//!
//! **Signature.** The SDKs send `authorization: MQv2-HMAC-SHA1 Credential=<ak>,
//! SignedHeaders=x-mq-date-time, Signature=<hex>` and `x-mq-date-time: yyyyMMdd'T'HHmmss'Z'`,
//! the signature being the hex HMAC-SHA1 of the date-time value keyed with the secret key
//! (rocketmq-clients `python/rocketmq/v5/util/signature.py`, Java `Signature.sign`, Rust
//! `session.rs`; optional `x-mq-session-token`, which ACL 1.0 does not check). Read as
//! RocketMQ's `AuthorizationHeader` reads it: the method, then `,`-separated `key=value`
//! items; `Credential`'s first `/`-separated part is the access key (older Java clients send
//! `ak/region/service`); `Signature` is hex of either case. As in RocketMQ, the date-time's
//! age is not checked.
//!
//! **Needs** (RocketMQ 5's `PlainAccessResource.parse(GeneratedMessageV3, …)`):
//!
//! | RPC | needs |
//! |---|---|
//! | QueryRoute | topic `ANY` (PUB or SUB) |
//! | Heartbeat | a push or simple consumer: its group (required) `SUB`; else nothing |
//! | SendMessage | each message's topic `PUB` |
//! | ReceiveMessage, AckMessage, ChangeInvisibleDuration, ForwardMessageToDeadLetterQueue, QueryAssignment | group `SUB`, topic `SUB` |
//! | EndTransaction | topic `PUB` |
//! | RecallMessage | topic `PUB` |
//! | NotifyClientTermination | its group `SUB`, when it names one |
//! | Telemetry `Settings` | publishing: each topic `PUB`; subscription: group and each topic `SUB`; one of the two required |
//!
//! A retry topic `%RETRY%G` is group `G`'s resource, as on the remoting face. RocketMQ 5.x
//! proxies check gRPC group names against `topicPerms` (they add a group without the retry
//! prefix its checker tells groups by); baiji checks a group against `groupPerms`, as the
//! account file means.
//!
//! **Refusals** travel as the proxy's codes in the response's `Status`: `UNAUTHORIZED` when the
//! account is missing or unknown or the signature does not verify, `FORBIDDEN` when a
//! permission is missing. A Telemetry stream has no response message to carry one: it is
//! refused with gRPC `UNAUTHENTICATED` when it opens unsigned, and ended with
//! `PERMISSION_DENIED` on Settings its account may not use. Every refusal is counted with the
//! remoting face's.

use std::borrow::Cow;
use std::net::{IpAddr, Ipv4Addr};

use tonic::metadata::MetadataMap;
use tonic::Request;

use super::pb::{
    self, telemetry_command, AckMessageRequest, ChangeInvisibleDurationRequest, ClientType, Code,
    EndTransactionRequest, ForwardMessageToDeadLetterQueueRequest, HeartbeatRequest,
    NotifyClientTerminationRequest, QueryAssignmentRequest, QueryRouteRequest,
    RecallMessageRequest, ReceiveMessageRequest, SendMessageRequest, TelemetryCommand,
};
use super::status::status;
use crate::broker::security::acl::{Acl, Refusal, Resource, SignedRequest, ANY, PUB, SUB};
use crate::broker::security::sign::verify_content;

/// The metadata key of the SDKs' signature.
pub(crate) const AUTHORIZATION: &str = "authorization";
/// The metadata key of the signed date-time.
pub(crate) const DATE_TIME: &str = "x-mq-date-time";

/// What one RPC's request touches, each with the permission it needs.
pub(crate) trait Needs {
    /// The RPC's name, for logs and refusals.
    const RPC: &'static str;
    /// Its resources, or why it cannot be admitted (a consumer heartbeat naming no group).
    ///
    /// # Errors
    /// The refusal's remark.
    fn needs(&self) -> Result<Vec<(Resource<'_>, u8)>, String>;
}

/// The account, signature and address of the client that made a call, read from its metadata
/// (kept for a Telemetry stream's later Settings).
#[derive(Debug, Clone)]
pub(crate) struct Caller {
    access_key: Option<String>,
    signature: Option<Vec<u8>>,
    date_time: Option<String>,
    peer: IpAddr,
}

impl Caller {
    /// The caller of `request`.
    pub(crate) fn of<T>(request: &Request<T>) -> Caller {
        let peer = request.remote_addr().map_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED), |a| a.ip());
        Caller::from_metadata(request.metadata(), peer)
    }

    fn from_metadata(metadata: &MetadataMap, peer: IpAddr) -> Caller {
        let text = |k: &str| metadata.get(k).and_then(|v| v.to_str().ok());
        let (access_key, signature) = text(AUTHORIZATION).map_or((None, None), parse_authorization);
        Caller { access_key, signature, date_time: text(DATE_TIME).map(str::to_owned), peer }
    }

    /// `Ok` when `acl` lets this caller make `rpc` touching `needs`; else the refusal (counted
    /// and logged).
    pub(crate) fn check(
        &self,
        acl: &Acl,
        rpc: &'static str,
        needs: Result<Vec<(Resource<'_>, u8)>, String>,
    ) -> Result<(), Refusal> {
        let call = Call { caller: self, rpc, needs };
        acl.rules().validate(false, false, self.peer, &call).inspect_err(|r| {
            acl.refuse();
            tracing::debug!(peer = %self.peer, rpc, remark = %r.remark, "gRPC call refused by ACL");
        })
    }
}

/// `Credential`'s access key and `Signature`'s MAC of an `authorization` value; `None` for an
/// item that is absent, empty or unreadable.
fn parse_authorization(header: &str) -> (Option<String>, Option<Vec<u8>>) {
    let Some((_method, items)) = header.split_once(' ') else { return (None, None) };
    let (mut access_key, mut signature) = (None, None);
    for item in items.split(',') {
        let Some((key, value)) = item.trim().split_once('=') else { continue };
        match key {
            "Credential" => {
                access_key = value.split('/').next().filter(|ak| !ak.is_empty()).map(str::to_owned);
            }
            "Signature" => signature = decode_hex(value),
            _ => {}
        }
    }
    (access_key, signature)
}

/// The bytes of hex text of either case; `None` if it is not hex.
fn decode_hex(s: &str) -> Option<Vec<u8>> {
    let digit = |c: u8| char::from(c).to_digit(16).and_then(|d| u8::try_from(d).ok());
    let s = s.as_bytes();
    if s.len() % 2 != 0 || s.len() > 128 {
        return None;
    }
    s.chunks_exact(2).map(|p| Some(digit(p[0])? << 4 | digit(p[1])?)).collect()
}

/// One call as the shared ACL checks it.
struct Call<'a, 'r> {
    caller: &'a Caller,
    rpc: &'static str,
    needs: Result<Vec<(Resource<'r>, u8)>, String>,
}

impl SignedRequest for Call<'_, '_> {
    fn access_key(&self) -> Option<&str> {
        self.caller.access_key.as_deref()
    }

    fn verify(&self, secret_key: &str) -> bool {
        match (&self.caller.signature, &self.caller.date_time) {
            (Some(tag), Some(date)) => verify_content(date.as_bytes(), secret_key, tag),
            _ => false,
        }
    }

    fn what(&self) -> String {
        format!("gRPC {}", self.rpc)
    }

    fn resources(&self) -> Result<Vec<(Resource<'_>, u8)>, String> {
        self.needs.clone()
    }
}

/// `Ok` when `acl` (none configured: always) admits `request`; else the `Status` to answer
/// in its response.
pub(crate) fn admit<T: Needs>(acl: Option<&Acl>, request: &Request<T>) -> Result<(), pb::Status> {
    let Some(acl) = acl else { return Ok(()) };
    Caller::of(request).check(acl, T::RPC, request.get_ref().needs()).map_err(|r| refused(&r))
}

/// The response `Status` of a refusal: `UNAUTHORIZED`, or `FORBIDDEN` for a missing right.
pub(crate) fn refused(r: &Refusal) -> pb::Status {
    let code = if r.authenticated { Code::Forbidden } else { Code::Unauthorized };
    status(code, r.remark.clone())
}

/// The gRPC status of a refusal where no response message can carry one (Telemetry).
pub(crate) fn refused_grpc(r: &Refusal) -> tonic::Status {
    if r.authenticated {
        tonic::Status::permission_denied(r.remark.clone())
    } else {
        tonic::Status::unauthenticated(r.remark.clone())
    }
}

fn named(r: Option<&pb::Resource>) -> Option<&str> {
    r.map(|r| r.name.as_str()).filter(|n| !n.is_empty())
}

fn topic(r: Option<&pb::Resource>, perm: u8) -> Option<(Resource<'_>, u8)> {
    let res = Resource::topic(Cow::Borrowed(named(r)?));
    // A retry topic is its group's: publishing to it is consuming as the group (the remoting
    // face's rule for `%RETRY%` sends).
    let perm = if matches!(res, Resource::Group(_)) && perm == PUB { SUB } else { perm };
    Some((res, perm))
}

fn group(r: Option<&pb::Resource>) -> Option<(Resource<'_>, u8)> {
    Some((Resource::Group(Cow::Borrowed(named(r)?)), SUB))
}

/// Group `SUB` and topic `SUB`, the consumer calls' needs.
fn consume<'a>(
    g: Option<&'a pb::Resource>,
    t: Option<&'a pb::Resource>,
) -> Result<Vec<(Resource<'a>, u8)>, String> {
    Ok(group(g).into_iter().chain(topic(t, SUB)).collect())
}

impl Needs for QueryRouteRequest {
    const RPC: &'static str = "QueryRoute";
    fn needs(&self) -> Result<Vec<(Resource<'_>, u8)>, String> {
        Ok(topic(self.topic.as_ref(), ANY).into_iter().collect())
    }
}

impl Needs for HeartbeatRequest {
    const RPC: &'static str = "Heartbeat";
    fn needs(&self) -> Result<Vec<(Resource<'_>, u8)>, String> {
        let consumer = [ClientType::PushConsumer as i32, ClientType::SimpleConsumer as i32];
        if !consumer.contains(&self.client_type) {
            return Ok(Vec::new());
        }
        match group(self.group.as_ref()) {
            Some(g) => Ok(vec![g]),
            None => Err("Consumer heartbeat doesn't have group".into()),
        }
    }
}

impl Needs for SendMessageRequest {
    const RPC: &'static str = "SendMessage";
    fn needs(&self) -> Result<Vec<(Resource<'_>, u8)>, String> {
        // RocketMQ refuses a batch of several topics; baiji stores each message on its own, so
        // each topic needs its right.
        let mut out: Vec<(Resource<'_>, u8)> = Vec::new();
        for need in self.messages.iter().filter_map(|m| topic(m.topic.as_ref(), PUB)) {
            if !out.contains(&need) {
                out.push(need);
            }
        }
        Ok(out)
    }
}

impl Needs for ReceiveMessageRequest {
    const RPC: &'static str = "ReceiveMessage";
    fn needs(&self) -> Result<Vec<(Resource<'_>, u8)>, String> {
        let t = self.message_queue.as_ref().and_then(|q| q.topic.as_ref());
        consume(self.group.as_ref(), t)
    }
}

impl Needs for AckMessageRequest {
    const RPC: &'static str = "AckMessage";
    fn needs(&self) -> Result<Vec<(Resource<'_>, u8)>, String> {
        consume(self.group.as_ref(), self.topic.as_ref())
    }
}

impl Needs for ChangeInvisibleDurationRequest {
    const RPC: &'static str = "ChangeInvisibleDuration";
    fn needs(&self) -> Result<Vec<(Resource<'_>, u8)>, String> {
        consume(self.group.as_ref(), self.topic.as_ref())
    }
}

impl Needs for ForwardMessageToDeadLetterQueueRequest {
    const RPC: &'static str = "ForwardMessageToDeadLetterQueue";
    fn needs(&self) -> Result<Vec<(Resource<'_>, u8)>, String> {
        consume(self.group.as_ref(), self.topic.as_ref())
    }
}

impl Needs for QueryAssignmentRequest {
    const RPC: &'static str = "QueryAssignment";
    fn needs(&self) -> Result<Vec<(Resource<'_>, u8)>, String> {
        consume(self.group.as_ref(), self.topic.as_ref())
    }
}

impl Needs for EndTransactionRequest {
    const RPC: &'static str = "EndTransaction";
    fn needs(&self) -> Result<Vec<(Resource<'_>, u8)>, String> {
        Ok(topic(self.topic.as_ref(), PUB).into_iter().collect())
    }
}

impl Needs for RecallMessageRequest {
    const RPC: &'static str = "RecallMessage";
    fn needs(&self) -> Result<Vec<(Resource<'_>, u8)>, String> {
        Ok(topic(self.topic.as_ref(), PUB).into_iter().collect())
    }
}

impl Needs for NotifyClientTerminationRequest {
    const RPC: &'static str = "NotifyClientTermination";
    fn needs(&self) -> Result<Vec<(Resource<'_>, u8)>, String> {
        Ok(group(self.group.as_ref()).into_iter().collect())
    }
}

impl Needs for TelemetryCommand {
    const RPC: &'static str = "Telemetry";
    fn needs(&self) -> Result<Vec<(Resource<'_>, u8)>, String> {
        let Some(telemetry_command::Command::Settings(s)) = &self.command else {
            return Ok(Vec::new());
        };
        match &s.pub_sub {
            Some(pb::settings::PubSub::Publishing(p)) => {
                Ok(p.topics.iter().filter_map(|t| topic(Some(t), PUB)).collect())
            }
            Some(pb::settings::PubSub::Subscription(sub)) => Ok(group(sub.group.as_ref())
                .into_iter()
                .chain(sub.subscriptions.iter().filter_map(|e| topic(e.topic.as_ref(), SUB)))
                .collect()),
            None => Err("settings command doesn't have publishing or subscription".into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn given_the_sdks_authorization_forms_should_read_the_access_key_and_the_mac() {
        let (ak, sig) = parse_authorization(
            "MQv2-HMAC-SHA1 Credential=ak, SignedHeaders=x-mq-date-time, Signature=0aFF",
        );
        assert_eq!((ak.as_deref(), sig), (Some("ak"), Some(vec![0x0a, 0xff])));
        // Older Java clients: `ak/region/service`; RocketMQ's test: upper-case hex.
        let (ak, sig) = parse_authorization(
            "MQv2-HMAC-SHA1 Credential=ak/cn/mq, SignedHeaders=x-mq-date-time, Signature=D18A",
        );
        assert_eq!((ak.as_deref(), sig), (Some("ak"), Some(vec![0xd1, 0x8a])));
        // The Python SDK without credentials: `Credential=` and the MAC of an empty key.
        let (ak, _) = parse_authorization("MQv2-HMAC-SHA1 Credential=, Signature=00");
        assert_eq!(ak, None);
        assert_eq!(parse_authorization("garbage"), (None, None));
        assert_eq!(parse_authorization("M Credential=a, Signature=xyz").1, None, "not hex");
        assert_eq!(decode_hex("abc"), None, "odd length");
    }

    #[test]
    fn given_each_rpc_should_need_what_rocketmqs_parse_adds() {
        let r = |n: &str| Some(pb::Resource { name: n.into(), ..Default::default() });
        let t = |n: &'static str, p| (Resource::Topic(Cow::Borrowed(n)), p);
        let g = |n: &'static str| (Resource::Group(Cow::Borrowed(n)), SUB);
        let route = QueryRouteRequest { topic: r("T"), ..Default::default() };
        assert_eq!(route.needs(), Ok(vec![t("T", ANY)]));
        let ack = AckMessageRequest { group: r("G"), topic: r("T"), ..Default::default() };
        assert_eq!(ack.needs(), Ok(vec![g("G"), t("T", SUB)]));
        let end = EndTransactionRequest { topic: r("T"), ..Default::default() };
        assert_eq!(end.needs(), Ok(vec![t("T", PUB)]));
        let recall = RecallMessageRequest { topic: r("T"), ..Default::default() };
        assert_eq!(recall.needs(), Ok(vec![t("T", PUB)]));
        let producer = HeartbeatRequest { group: None, client_type: ClientType::Producer as i32 };
        assert_eq!(producer.needs(), Ok(vec![]), "a producer's heartbeat needs nothing");
        let consumer =
            HeartbeatRequest { group: None, client_type: ClientType::PushConsumer as i32 };
        assert!(consumer.needs().is_err(), "a consumer's names its group");
        let msg = |n| pb::Message { topic: r(n), ..Default::default() };
        let send = SendMessageRequest { messages: vec![msg("A"), msg("B"), msg("A")] };
        assert_eq!(send.needs(), Ok(vec![t("A", PUB), t("B", PUB)]), "each topic once");
        let retry = SendMessageRequest { messages: vec![msg("%RETRY%G")] };
        assert_eq!(retry.needs(), Ok(vec![g("G")]), "a retry topic is its group's");
        let sub = TelemetryCommand {
            status: None,
            command: Some(telemetry_command::Command::Settings(pb::Settings {
                pub_sub: Some(pb::settings::PubSub::Subscription(pb::Subscription {
                    group: r("G"),
                    subscriptions: vec![pb::SubscriptionEntry { topic: r("T"), expression: None }],
                    ..Default::default()
                })),
                ..Default::default()
            })),
        };
        assert_eq!(sub.needs(), Ok(vec![g("G"), t("T", SUB)]));
        let neither = TelemetryCommand {
            status: None,
            command: Some(telemetry_command::Command::Settings(pb::Settings::default())),
        };
        assert!(neither.needs().is_err());
    }
}
