//! The remoting face's ACL: what each request code needs (RocketMQ's permission matrix,
//! `PlainAccessResource.parse` and `Permission.ADMIN_CODE`) and where a remoting request
//! carries its account, signature and resources, checked at dispatch against the shared
//! accounts ([`crate::broker::security::acl`]) before the processor runs (a refused request
//! never reaches one). A refusal answers `NO_PERMISSION` with RocketMQ's `AclException` text (a
//! one-way request gets no answer; every refusal is counted).

use std::borrow::Cow;

use super::table::Role;
use super::{reply_error, ConnCtx, Reply};
use crate::broker::core::topics::RETRY_PREFIX;
use crate::broker::security::acl::{Acl, Resource, SignedRequest, PUB, SUB};
use crate::broker::security::sign::{verify, ACCESS_KEY};
use crate::remoting::body::{HeartbeatData, JsonBody};
use crate::remoting::code::{request_code as rc, response_code};
use crate::remoting::RemotingCommand;

/// What one request code needs: the permission matrix's rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Need {
    /// Anyone, without credentials (RocketMQ's name server answers route queries to all).
    Open,
    /// A valid signature of a known account, no resource (RocketMQ checks no resource for
    /// these codes either).
    Signed,
    /// A valid signature of an account with `admin: true`.
    Admin,
    /// `PUB` on the topic in ext field `.0` (a retry topic: `SUB` on its group).
    Publish(&'static str),
    /// `SUB` on the topic in ext field `.0` and on the group in ext field `.1`.
    Consume(&'static str, &'static str),
    /// `SUB` on the topic in ext field `.0`.
    Subscribe(&'static str),
    /// `SUB` on the group in ext field `.0` (nothing when the field is absent).
    Group(&'static str),
    /// `SUB` on each consumer group of the heartbeat body and on each topic it subscribes.
    Heartbeat,
    /// A send-back: `PUB` on the origin topic (ext field `originTopic`, when given) and `SUB`
    /// on the group (`group`), as Java's `PlainAccessResource.parse` checks it.
    SendBack,
}

/// The broker port's rules (RocketMQ `PlainAccessResource.parse` and `Permission.ADMIN_CODE`).
const BROKER_RULES: &[(i32, Need)] = &[
    (rc::SEND_MESSAGE, Need::Publish("topic")),
    (rc::PULL_MESSAGE, Need::Consume("topic", "consumerGroup")),
    (rc::QUERY_MESSAGE, Need::Subscribe("topic")),
    (rc::QUERY_CONSUMER_OFFSET, Need::Consume("topic", "consumerGroup")),
    (rc::UPDATE_CONSUMER_OFFSET, Need::Consume("topic", "consumerGroup")),
    (rc::UPDATE_AND_CREATE_TOPIC, Need::Admin),
    (rc::UPDATE_AND_CREATE_TOPIC_LIST, Need::Admin),
    (rc::GET_ALL_TOPIC_CONFIG, Need::Signed),
    (rc::UPDATE_BROKER_CONFIG, Need::Admin),
    (rc::GET_BROKER_CONFIG, Need::Admin),
    (rc::GET_BROKER_RUNTIME_INFO, Need::Admin),
    (rc::SEARCH_OFFSET_BY_TIMESTAMP, Need::Signed),
    (rc::GET_MAX_OFFSET, Need::Signed),
    (rc::GET_MIN_OFFSET, Need::Signed),
    (rc::GET_EARLIEST_MSG_STORETIME, Need::Signed),
    // Checked again once the message's topic is known (`check_found`, review-e77444b L3).
    (rc::VIEW_MESSAGE_BY_ID, Need::Signed),
    (rc::HEART_BEAT, Need::Heartbeat),
    (rc::UNREGISTER_CLIENT, Need::Group("consumerGroup")),
    (rc::CONSUMER_SEND_MSG_BACK, Need::SendBack),
    (rc::END_TRANSACTION, Need::Signed),
    (rc::GET_CONSUMER_LIST_BY_GROUP, Need::Group("consumerGroup")),
    (rc::LOCK_BATCH_MQ, Need::Signed),
    (rc::UNLOCK_BATCH_MQ, Need::Signed),
    (rc::GET_ALL_CONSUMER_OFFSET, Need::Signed),
    (rc::CHECK_CLIENT_CONFIG, Need::Signed),
    (rc::UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, Need::Admin),
    (rc::GET_ALL_SUBSCRIPTIONGROUP_CONFIG, Need::Admin),
    (rc::GET_TOPIC_STATS_INFO, Need::Admin),
    (rc::GET_CONSUMER_CONNECTION_LIST, Need::Admin),
    (rc::GET_PRODUCER_CONNECTION_LIST, Need::Admin),
    (rc::DELETE_SUBSCRIPTIONGROUP, Need::Admin),
    (rc::GET_CONSUME_STATS, Need::Admin),
    (rc::DELETE_TOPIC_IN_BROKER, Need::Admin),
    (rc::INVOKE_BROKER_TO_RESET_OFFSET, Need::Admin),
    (rc::UPDATE_AND_CREATE_SUBSCRIPTIONGROUP_LIST, Need::Admin),
    (rc::QUERY_TOPIC_CONSUME_BY_WHO, Need::Admin),
    // Reads a group's progress on a topic: SUB on both (ACL 2.0 asks GET on each).
    (rc::QUERY_CONSUME_TIME_SPAN, Need::Consume("topic", "group")),
    (rc::GET_SYSTEM_TOPIC_LIST_FROM_BROKER, Need::Signed),
    // Admin tools' consumer relays, as the connection and progress views beside them (a thread
    // dump of the client; a message consumed again).
    (rc::GET_CONSUMER_RUNNING_INFO, Need::Admin),
    (rc::CONSUME_MESSAGE_DIRECTLY, Need::Admin),
    (rc::SEND_MESSAGE_V2, Need::Publish("b")),
    // Cluster reads (RocketMQ's `@RocketMQAction(resource = CLUSTER, action = GET)`).
    (rc::VIEW_BROKER_STATS_DATA, Need::Admin),
    (rc::GET_BROKER_CONSUME_STATS, Need::Admin),
    (rc::SEND_BATCH_MESSAGE, Need::Publish("b")),
    (rc::SEND_REPLY_MESSAGE, Need::Publish("topic")),
    (rc::SEND_REPLY_MESSAGE_V2, Need::Publish("b")),
    (rc::GET_ALL_PRODUCER_INFO, Need::Admin),
    (rc::GET_TOPIC_CONFIG, Need::Signed),
    (rc::GET_SUBSCRIPTIONGROUP_CONFIG, Need::Admin),
    (rc::DELETE_TOPIC_IN_BROKER_LIST, Need::Admin),
    (rc::DELETE_SUBSCRIPTIONGROUP_LIST, Need::Admin),
    (rc::LITE_PULL_MESSAGE, Need::Consume("topic", "consumerGroup")),
    (rc::RECALL_MESSAGE, Need::Publish("topic")),
    (rc::QUERY_ASSIGNMENT, Need::Signed),
    (rc::SET_MESSAGE_REQUEST_MODE, Need::Signed),
    (rc::GET_ALL_MESSAGE_REQUEST_MODE, Need::Signed),
    // POP: topic SUB and group SUB, as for pulls. A batch ack carries its groups and topics in
    // its JSON body only: its signature here, its resources once the body is read
    // (`check_found`, review-e77444b L3).
    (rc::POP_MESSAGE, Need::Consume("topic", "consumerGroup")),
    (rc::ACK_MESSAGE, Need::Consume("topic", "consumerGroup")),
    (rc::PEEK_MESSAGE, Need::Consume("topic", "consumerGroup")),
    (rc::CHANGE_MESSAGE_INVISIBLETIME, Need::Consume("topic", "consumerGroup")),
    (rc::NOTIFICATION, Need::Consume("topic", "consumerGroup")),
    (rc::POLLING_INFO, Need::Consume("topic", "consumerGroup")),
    (rc::BATCH_ACK_MESSAGE, Need::Signed),
];

/// The name server's rules: reads are open (RocketMQ clients ask for routes before they have
/// anything to sign for), writes are admin-only.
const NAMESRV_RULES: &[(i32, Need)] = &[
    (rc::PUT_KV_CONFIG, Need::Admin),
    (rc::GET_KV_CONFIG, Need::Open),
    (rc::DELETE_KV_CONFIG, Need::Admin),
    (rc::REGISTER_BROKER, Need::Admin),
    (rc::UNREGISTER_BROKER, Need::Admin),
    (rc::GET_ROUTEINFO_BY_TOPIC, Need::Open),
    (rc::GET_BROKER_CLUSTER_INFO, Need::Open),
    (rc::WIPE_WRITE_PERM_OF_BROKER, Need::Admin),
    (rc::GET_ALL_TOPIC_LIST_FROM_NAMESERVER, Need::Open),
    (rc::DELETE_TOPIC_IN_NAMESRV, Need::Admin),
    (rc::REGISTER_TOPIC_IN_NAMESRV, Need::Admin),
    (rc::GET_TOPICS_BY_CLUSTER, Need::Open),
    (rc::GET_SYSTEM_TOPIC_LIST_FROM_NS, Need::Open),
    (rc::QUERY_DATA_VERSION, Need::Admin),
    (rc::ADD_WRITE_PERM_OF_BROKER, Need::Admin),
    (rc::BROKER_HEARTBEAT, Need::Admin),
];

/// What `code` needs on a listener of `role`; `None` for a code without a rule.
pub(crate) fn need(role: Role, code: i32) -> Option<Need> {
    let rules = match role {
        Role::Broker => BROKER_RULES,
        Role::NameServer => NAMESRV_RULES,
    };
    rules.iter().find(|(c, _)| *c == code).map(|(_, n)| *n)
}

/// A remoting request as the shared ACL checks it: with the rule of its code, or with the
/// resources its processor found.
struct Remoting<'a> {
    req: &'a RemotingCommand,
    resources: Resources<'a>,
}

/// Where a [`Remoting`] request's resources come from.
enum Resources<'a> {
    /// The rule of its code, read from its header.
    Rule(Need),
    /// What its processor found (a looked-up message's topic, a batch ack's checkpoints).
    Found(Vec<(Resource<'a>, u8)>),
}

impl SignedRequest for Remoting<'_> {
    fn access_key(&self) -> Option<&str> {
        self.req.ext_fields.get(ACCESS_KEY)
    }

    fn verify(&self, secret_key: &str) -> bool {
        verify(&self.req.ext_fields, &self.req.body, secret_key)
    }

    fn what(&self) -> String {
        format!("request code={}", self.req.code)
    }

    fn resources(&self) -> Result<Vec<(Resource<'_>, u8)>, String> {
        match &self.resources {
            Resources::Rule(need) => resources(*need, self.req),
            Resources::Found(found) => Ok(found.clone()),
        }
    }
}

/// The resources `need` names in `req`, each with the permission it needs.
fn resources(need: Need, req: &RemotingCommand) -> Result<Vec<(Resource<'_>, u8)>, String> {
    let field = |k: &str| req.ext_fields.get(k).map(Cow::Borrowed);
    let mut out = Vec::new();
    match need {
        Need::Open | Need::Signed | Need::Admin => {}
        Need::Publish(t) => {
            if let Some(t) = field(t) {
                let r = Resource::topic(t);
                let perm = if matches!(r, Resource::Group(_)) { SUB } else { PUB };
                out.push((r, perm));
            }
        }
        Need::Consume(t, g) => {
            let group = field(g);
            if let Some(t) = field(t) {
                // An ack or change of a revived POP message names the group's pop retry topic
                // `%RETRY%<group>_<topic>` (`ExtraInfoUtil.getRealTopic`): it is checked as the
                // topic it revives, not as a group `<group>_<topic>` nobody has rights on.
                let original = group
                    .as_deref()
                    .and_then(|g| t.strip_prefix(RETRY_PREFIX)?.strip_prefix(g)?.strip_prefix('_'));
                match original {
                    Some(o) if !o.is_empty() => {
                        out.push((Resource::Topic(Cow::Owned(o.to_owned())), SUB));
                    }
                    _ => out.push((Resource::topic(t), SUB)),
                }
            }
            if let Some(g) = group {
                out.push((Resource::Group(g), SUB));
            }
        }
        Need::Subscribe(t) => {
            if let Some(t) = field(t) {
                out.push((Resource::topic(t), SUB));
            }
        }
        Need::Group(g) => {
            if let Some(g) = field(g) {
                out.push((Resource::Group(g), SUB));
            }
        }
        Need::SendBack => {
            if let Some(t) = field("originTopic") {
                let r = Resource::topic(t);
                let perm = if matches!(r, Resource::Group(_)) { SUB } else { PUB };
                out.push((r, perm));
            }
            if let Some(g) = field("group") {
                out.push((Resource::Group(g), SUB));
            }
        }
        Need::Heartbeat => {
            let hb = HeartbeatData::from_json_slice(&req.body)
                .map_err(|e| format!("bad heartbeat body: {e}"))?;
            for c in hb.consumer_data_set {
                for s in c.subscription_data_set {
                    out.push((Resource::topic(Cow::Owned(s.topic)), SUB));
                }
                out.push((Resource::Group(Cow::Owned(c.group_name)), SUB));
            }
        }
    }
    Ok(out)
}

/// `None` when `req` may proceed under `acl`; else the refusal to answer.
pub(crate) fn check(acl: &Acl, role: Role, ctx: &ConnCtx, req: &RemotingCommand) -> Option<Reply> {
    let need = need(role, req.code).unwrap_or(Need::Signed);
    let request = Remoting { req, resources: Resources::Rule(need) };
    validate(acl, need == Need::Open, need == Need::Admin, ctx, &request)
}

/// `None` when `req` may touch `resources` under `acl` (none configured: always); else the
/// refusal to answer (`NO_PERMISSION`, naming the resource). `admin`: only an admin account
/// may (an internal topic's messages). For what a processor learns only by reading the
/// request: dispatch checked the signature and the header's resources already.
pub(crate) fn check_found(
    acl: Option<&Acl>,
    ctx: &ConnCtx,
    req: &RemotingCommand,
    resources: Vec<(Resource<'_>, u8)>,
    admin: bool,
) -> Option<Reply> {
    let request = Remoting { req, resources: Resources::Found(resources) };
    validate(acl?, false, admin, ctx, &request)
}

/// The shared ACL's verdict on `request`, as a refusal to answer (counted and logged).
fn validate(
    acl: &Acl,
    open: bool,
    admin: bool,
    ctx: &ConnCtx,
    request: &Remoting<'_>,
) -> Option<Reply> {
    match acl.rules().validate(open, admin, ctx.peer.ip(), request) {
        Ok(()) => None,
        Err(refusal) => {
            let remark = refusal.remark;
            acl.refuse();
            let req = request.req;
            tracing::debug!(peer = %ctx.peer, code = req.code, %remark, "request refused by ACL");
            Some(reply_error(req, response_code::NO_PERMISSION, remark))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::broker::remoting::table;

    #[test]
    fn given_every_dispatched_code_should_have_a_permission_rule() {
        for (role, t) in [(Role::Broker, table::BROKER), (Role::NameServer, table::NAMESRV)] {
            for (code, name, _) in t {
                assert!(
                    need(role, *code).is_some(),
                    "{role:?} dispatches {name} ({code}) but the ACL permission matrix has no rule for it"
                );
            }
        }
    }

    #[test]
    fn given_an_ack_in_the_pop_retry_topic_should_need_the_topic_it_revives_and_the_group() {
        let mut req = RemotingCommand::request(rc::ACK_MESSAGE, 1);
        req.ext_fields.insert("topic", "%RETRY%g1_Orders");
        req.ext_fields.insert("consumerGroup", "g1");
        let need = Need::Consume("topic", "consumerGroup");
        let got = resources(need, &req).expect("resources");
        let want = vec![
            (Resource::Topic(Cow::Borrowed("Orders")), SUB),
            (Resource::Group(Cow::Borrowed("g1")), SUB),
        ];
        assert_eq!(got, want, "not a group `g1_Orders`");
        req.ext_fields.insert("topic", "%RETRY%g1");
        let got = resources(need, &req).expect("resources");
        assert_eq!(got[0], (Resource::Group(Cow::Borrowed("g1")), SUB), "a group's retry topic");
    }
}
