//! RocketMQ plain ACL (`--acl-file`, RocketMQ 4.x / 5.x ACL 1.0 `plain_acl.yml`).
//!
//! Off unless a file is given: then every request a listener serves is checked here, at
//! dispatch, before its processor runs (a refused request never reaches one):
//!
//! 1. codes RocketMQ lets through without credentials ([`Need::Open`]: the name server's route
//!    and cluster queries) pass;
//! 2. a peer matching `globalWhiteRemoteAddresses` passes;
//! 3. the request must carry `AccessKey` of a configured account; a peer matching that
//!    account's `whiteRemoteAddress` passes;
//! 4. `Signature` must be the HMAC-SHA1 (base64) of the account's secret key over the values
//!    of every other ext field sorted by key, then the body ([`verify`], exactly what the Java
//!    `AclClientRPCHook` and the Rust client's hook sign; `_UNIQUE_KEY_QUERY` is left out as
//!    RocketMQ's server leaves it out). The decoded fields are hashed as they are: nothing is
//!    re-encoded;
//! 5. admin-only codes need `admin: true`;
//! 6. each resource the code names ([`need`], the permission matrix) needs its permission:
//!    the account's `topicPerms` / `groupPerms` entry, else `defaultTopicPerm` /
//!    `defaultGroupPerm`. A retry topic `%RETRY%G` is group `G`'s resource.
//!
//! A refusal answers `NO_PERMISSION` with RocketMQ's `AclException` text (a one-way request
//! gets no answer; every refusal is counted). The file is re-read when its modification time
//! or length changes (polled); a file that no longer parses leaves the previous rules in
//! force, with a warning.

use std::borrow::Cow;
use std::collections::HashMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use hmac::{KeyInit, Mac};
use tokio::sync::watch;

use super::remoting::table::Role;
use super::remoting::{reply_error, ConnCtx, RemotingState, Reply};
use crate::remoting::body::{HeartbeatData, JsonBody};
use crate::remoting::code::{request_code as rc, response_code};
use crate::remoting::{ExtFields, RemotingCommand};
use crate::sync::{AtomicU64, Ordering, RwLock};

type HmacSha1 = hmac::Hmac<sha1::Sha1>;

/// Ext field naming the account (RocketMQ `SessionCredentials.ACCESS_KEY`).
pub const ACCESS_KEY: &str = "AccessKey";
/// Ext field carrying the signature (RocketMQ `SessionCredentials.SIGNATURE`).
pub const SIGNATURE: &str = "Signature";
/// Ext field RocketMQ's server leaves out of the signed content (`MixAll.UNIQUE_MSG_QUERY_FLAG`).
const UNIQUE_MSG_QUERY_FLAG: &str = "_UNIQUE_KEY_QUERY";
/// RocketMQ's retry-topic prefix (`MixAll.RETRY_GROUP_TOPIC_PREFIX`).
const RETRY_PREFIX: &str = "%RETRY%";

/// Permission bits, as RocketMQ's `Permission`.
const DENY: u8 = 1;
const ANY: u8 = 2;
const PUB: u8 = 4;
const SUB: u8 = 8;

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
    (rc::VIEW_MESSAGE_BY_ID, Need::Signed),
    (rc::HEART_BEAT, Need::Heartbeat),
    (rc::UNREGISTER_CLIENT, Need::Group("consumerGroup")),
    (rc::CONSUMER_SEND_MSG_BACK, Need::Group("group")),
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
    (rc::QUERY_TOPIC_CONSUME_BY_WHO, Need::Admin),
    (rc::SEND_MESSAGE_V2, Need::Publish("b")),
    (rc::SEND_BATCH_MESSAGE, Need::Publish("b")),
    (rc::SEND_REPLY_MESSAGE, Need::Publish("topic")),
    (rc::SEND_REPLY_MESSAGE_V2, Need::Publish("b")),
    (rc::GET_TOPIC_CONFIG, Need::Signed),
    (rc::GET_SUBSCRIPTIONGROUP_CONFIG, Need::Admin),
    (rc::DELETE_SUBSCRIPTIONGROUP_LIST, Need::Admin),
    (rc::LITE_PULL_MESSAGE, Need::Consume("topic", "consumerGroup")),
    (rc::QUERY_ASSIGNMENT, Need::Signed),
    (rc::SET_MESSAGE_REQUEST_MODE, Need::Signed),
    // POP: topic SUB and group SUB, as for pulls. A batch ack carries its groups and topics in
    // its JSON body only, like the heartbeat; plain ACL checks no resource for it.
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
    (rc::QUERY_DATA_VERSION, Need::Admin),
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

/// The signature RocketMQ's ACL hook puts in `Signature`: base64 of HMAC-SHA1 keyed with
/// `secret_key` over the values of `fields` sorted by key (leaving out `Signature` and
/// `_UNIQUE_KEY_QUERY`), then `body`.
#[must_use]
pub fn sign(fields: &ExtFields, body: &[u8], secret_key: &str) -> String {
    match mac(fields, body, secret_key) {
        Some(m) => STANDARD.encode(m.finalize().into_bytes()),
        None => String::new(),
    }
}

/// Whether `fields` carry the `Signature` [`sign`] computes. Compares in constant time.
#[must_use]
pub fn verify(fields: &ExtFields, body: &[u8], secret_key: &str) -> bool {
    let Some(given) = fields.get(SIGNATURE) else { return false };
    // Base64 of a 20-byte MAC is 28 characters; anything longer is wrong anyway.
    let mut tag = [0u8; 24];
    if given.len() > 32 {
        return false;
    }
    match STANDARD.decode_slice(given, &mut tag) {
        Ok(n) => mac(fields, body, secret_key).is_some_and(|m| m.verify_slice(&tag[..n]).is_ok()),
        Err(_) => false,
    }
}

/// An access key and secret key this process signs its own requests with: the broker's
/// registrations with external name servers (RocketMQ 5's broker setting
/// `innerClientAuthenticationCredentials`, written as it writes it:
/// `{"accessKey":"...","secretKey":"..."}`). `Debug` never shows the secret.
#[derive(Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(try_from = "String")]
pub struct Credentials {
    /// The account's `accessKey`.
    pub access_key: String,
    /// The account's `secretKey`.
    pub secret_key: String,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("access_key", &self.access_key)
            .field("secret_key", &"<hidden>")
            .finish()
    }
}

impl std::str::FromStr for Credentials {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        #[derive(serde::Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Json {
            access_key: String,
            secret_key: String,
        }
        let bad = |why: &str| {
            format!(
                "inner-client-authentication-credentials {why}: expected \
                 {{\"accessKey\":\"...\",\"secretKey\":\"...\"}}"
            )
        };
        // The error text of serde_json could quote the secret: it is left out.
        let j: Json = serde_json::from_str(s).map_err(|_| bad("is not valid"))?;
        if j.access_key.is_empty() || j.secret_key.is_empty() {
            return Err(bad("has an empty key"));
        }
        Ok(Credentials { access_key: j.access_key, secret_key: j.secret_key })
    }
}

impl TryFrom<String> for Credentials {
    type Error = String;

    fn try_from(s: String) -> Result<Self, String> {
        s.parse()
    }
}

impl Credentials {
    /// Signs `req` as RocketMQ's `AclClientRPCHook` does: sets `AccessKey`, then `Signature`
    /// over every ext field (sorted by key) and the body. Call it last, once the request is
    /// complete.
    pub fn sign(&self, req: &mut RemotingCommand) {
        req.ext_fields.insert(ACCESS_KEY, &self.access_key);
        let signature = sign(&req.ext_fields, &req.body, &self.secret_key);
        req.ext_fields.insert(SIGNATURE, &signature);
    }
}

/// The MAC over the signed content; `None` never happens (HMAC takes keys of any length) but
/// the crate's API is fallible.
fn mac(fields: &ExtFields, body: &[u8], secret_key: &str) -> Option<HmacSha1> {
    let mut sorted: Vec<(&str, &str)> =
        fields.iter().filter(|(k, _)| *k != SIGNATURE && *k != UNIQUE_MSG_QUERY_FLAG).collect();
    sorted.sort_unstable_by(|a, b| a.0.cmp(b.0));
    let mut mac = HmacSha1::new_from_slice(secret_key.as_bytes()).ok()?;
    for (_, v) in sorted {
        mac.update(v.as_bytes());
    }
    mac.update(body);
    Some(mac)
}

/// A resource a request touches.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Resource<'a> {
    Topic(Cow<'a, str>),
    Group(Cow<'a, str>),
}

impl Resource<'_> {
    /// A topic; a retry topic is its group's resource.
    fn topic(name: Cow<'_, str>) -> Resource<'_> {
        match name.strip_prefix(RETRY_PREFIX) {
            Some(g) => Resource::Group(Cow::Owned(g.to_owned())),
            None => Resource::Topic(name),
        }
    }
}

/// One account of the file.
#[derive(Debug, Clone, Default)]
pub(crate) struct Account {
    access_key: String,
    secret_key: String,
    white: Vec<AddrPattern>,
    admin: bool,
    default_topic_perm: u8,
    default_group_perm: u8,
    topic_perms: HashMap<String, u8>,
    group_perms: HashMap<String, u8>,
}

/// A parsed ACL file.
#[derive(Debug, Clone, Default)]
pub(crate) struct AclConfig {
    global_white: Vec<AddrPattern>,
    accounts: HashMap<String, Account>,
}

/// RocketMQ's `Permission.parsePermFromString`: anything else (or nothing) is `DENY`.
fn parse_perm(s: Option<&str>) -> u8 {
    match s.map(str::trim) {
        Some("PUB") => PUB,
        Some("SUB") => SUB,
        Some("PUB|SUB") | Some("SUB|PUB") => PUB | SUB,
        Some("ANY") => ANY,
        _ => DENY,
    }
}

/// RocketMQ's `Permission.checkPermission`.
fn permits(needed: u8, owned: u8) -> bool {
    if owned & DENY != 0 {
        return false;
    }
    if needed & ANY != 0 {
        return owned & (PUB | SUB) != 0;
    }
    needed & owned != 0
}

/// One `whiteRemoteAddress` form: `*` (everyone), an address, `a.b.c.{1,2}`, or four IPv4
/// segments each `n`, `n-m` or `*` (`192.168.0.*`, `192.168.1.1-10`, `192.168.*.1`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum AddrPattern {
    /// Matches every address.
    All,
    /// One address.
    One(IpAddr),
    /// Inclusive ranges of the four IPv4 segments.
    Ranges([(u8, u8); 4]),
}

impl AddrPattern {
    /// Parses one comma-separated list (RocketMQ `RemoteAddressStrategyFactory`); a blank
    /// string matches nothing.
    pub(crate) fn parse_list(s: &str) -> Result<Vec<AddrPattern>, String> {
        let s = s.trim();
        if s.is_empty() {
            return Ok(Vec::new());
        }
        if s == "*" || s == "*.*.*.*" || s == "*:*:*:*:*:*:*:*" {
            return Ok(vec![AddrPattern::All]);
        }
        if let Some(open) = s.find('{') {
            // `192.168.1.{1,2,3}`: one address per listed last segment.
            let prefix = &s[..open];
            let inner = s[open + 1..]
                .strip_suffix('}')
                .ok_or_else(|| format!("bad address list {s}: no closing brace"))?;
            let mut out = Vec::new();
            for last in inner.split(',') {
                out.push(Self::parse_one(&format!("{prefix}{}", last.trim()))?);
            }
            return Ok(out);
        }
        s.split(',').map(|p| Self::parse_one(p.trim())).collect()
    }

    fn parse_one(s: &str) -> Result<AddrPattern, String> {
        if s == "*" {
            return Ok(AddrPattern::All);
        }
        if let Ok(ip) = s.parse::<IpAddr>() {
            return Ok(AddrPattern::One(ip));
        }
        let bad = || format!("bad remote address pattern {s}");
        let segs: Vec<&str> = s.split('.').collect();
        if segs.len() != 4 {
            return Err(bad());
        }
        let mut ranges = [(0u8, 255u8); 4];
        for (i, seg) in segs.iter().enumerate() {
            ranges[i] = match *seg {
                "*" => (0, 255),
                seg => match seg.split_once('-') {
                    Some((a, b)) => {
                        let a: u8 = a.parse().map_err(|_| bad())?;
                        let b: u8 = b.parse().map_err(|_| bad())?;
                        if a > b {
                            return Err(bad());
                        }
                        (a, b)
                    }
                    None => {
                        let n: u8 = seg.parse().map_err(|_| bad())?;
                        (n, n)
                    }
                },
            };
        }
        Ok(AddrPattern::Ranges(ranges))
    }

    /// Whether `ip` matches.
    pub(crate) fn matches(&self, ip: IpAddr) -> bool {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
            v4 => v4,
        };
        match self {
            AddrPattern::All => true,
            AddrPattern::One(a) => *a == ip,
            AddrPattern::Ranges(r) => match ip {
                IpAddr::V4(v4) => {
                    v4.octets().iter().zip(r).all(|(o, (lo, hi))| (*lo..=*hi).contains(o))
                }
                IpAddr::V6(_) => false,
            },
        }
    }
}

fn any_matches(patterns: &[AddrPattern], ip: IpAddr) -> bool {
    patterns.iter().any(|p| p.matches(ip))
}

impl AclConfig {
    /// Parses a `plain_acl.yml`.
    pub(crate) fn parse(text: &str) -> Result<AclConfig, String> {
        use yaml_rust2::{Yaml, YamlLoader};
        let docs = YamlLoader::load_from_str(text).map_err(|e| e.to_string())?;
        let mut config = AclConfig::default();
        let Some(doc) = docs.first() else { return Ok(config) };
        let str_list = |y: &Yaml| -> Vec<String> {
            match y {
                Yaml::Array(a) => a.iter().filter_map(scalar).collect(),
                other => scalar(other).into_iter().collect(),
            }
        };
        for w in str_list(&doc["globalWhiteRemoteAddresses"]) {
            config.global_white.extend(AddrPattern::parse_list(&w)?);
        }
        if let Yaml::Array(accounts) = &doc["accounts"] {
            for a in accounts {
                let access_key = scalar(&a["accessKey"]).unwrap_or_default();
                let secret_key = scalar(&a["secretKey"]).unwrap_or_default();
                if access_key.is_empty() || secret_key.is_empty() {
                    return Err("an account needs accessKey and secretKey".into());
                }
                let mut acc = Account {
                    white: {
                        // A string, or (as some deployments write it) a list of them.
                        let mut white = Vec::new();
                        for w in str_list(&a["whiteRemoteAddress"]) {
                            white.extend(AddrPattern::parse_list(&w)?);
                        }
                        white
                    },
                    admin: matches!(&a["admin"], Yaml::Boolean(true))
                        || scalar(&a["admin"]).is_some_and(|s| s.eq_ignore_ascii_case("true")),
                    default_topic_perm: parse_perm(scalar(&a["defaultTopicPerm"]).as_deref()),
                    default_group_perm: parse_perm(scalar(&a["defaultGroupPerm"]).as_deref()),
                    secret_key,
                    access_key: access_key.clone(),
                    ..Account::default()
                };
                for (key, map) in
                    [("topicPerms", &mut acc.topic_perms), ("groupPerms", &mut acc.group_perms)]
                {
                    for entry in str_list(&a[key]) {
                        let (name, perm) = entry
                            .split_once('=')
                            .ok_or_else(|| format!("{key} entry {entry} is not name=PERM"))?;
                        map.insert(name.trim().to_owned(), parse_perm(Some(perm)));
                    }
                }
                if config.accounts.insert(access_key.clone(), acc).is_some() {
                    return Err(format!("accessKey {access_key} appears twice"));
                }
            }
        }
        Ok(config)
    }

    /// RocketMQ's `PlainPermissionManager.validate`: `Ok` or the refusal's remark.
    fn validate(&self, need: Need, peer: IpAddr, req: &RemotingCommand) -> Result<(), String> {
        if need == Need::Open || any_matches(&self.global_white, peer) {
            return Ok(());
        }
        let Some(ak) = req.ext_fields.get(ACCESS_KEY) else {
            return Err("No accessKey is configured".into());
        };
        let Some(acc) = self.accounts.get(ak) else {
            return Err(format!("No acl config for {ak}"));
        };
        if any_matches(&acc.white, peer) {
            return Ok(());
        }
        if !verify(&req.ext_fields, &req.body, &acc.secret_key) {
            return Err(format!("Check signature failed for accessKey={ak}"));
        }
        if need == Need::Admin && !acc.admin {
            return Err(format!(
                "Need admin permission for request code={}, but accessKey={} is not",
                req.code, acc.access_key
            ));
        }
        if acc.admin && acc.topic_perms.is_empty() && acc.group_perms.is_empty() {
            return Ok(());
        }
        for (res, needed) in resources(need, req)? {
            let (owned, label) = match &res {
                Resource::Topic(t) => (
                    acc.topic_perms.get(t.as_ref()).copied().unwrap_or(acc.default_topic_perm),
                    format!("topic:{t}"),
                ),
                Resource::Group(g) => (
                    acc.group_perms.get(g.as_ref()).copied().unwrap_or(acc.default_group_perm),
                    format!("group:{g}"),
                ),
            };
            if !permits(needed, owned) {
                return Err(format!("No default permission for {label}"));
            }
        }
        Ok(())
    }
}

fn scalar(y: &yaml_rust2::Yaml) -> Option<String> {
    use yaml_rust2::Yaml;
    match y {
        Yaml::String(s) | Yaml::Real(s) => Some(s.clone()),
        Yaml::Integer(i) => Some(i.to_string()),
        Yaml::Boolean(b) => Some(b.to_string()),
        _ => None,
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
            if let Some(t) = field(t) {
                out.push((Resource::topic(t), SUB));
            }
            if let Some(g) = field(g) {
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

/// The ACL of a running broker: the rules of its file, reloaded when the file changes.
#[derive(Debug)]
pub(crate) struct Acl {
    path: PathBuf,
    rules: RwLock<Arc<AclConfig>>,
    stamp: std::sync::Mutex<Option<(SystemTime, u64)>>,
    /// Requests refused (one-way ones included, which get no answer).
    pub(crate) refused: AtomicU64,
}

/// A file's modification time and length, which the ACL file's and the TLS certificate's
/// reloads compare (`None` if it cannot be read).
pub(crate) fn stamp_of(path: &Path) -> Option<(SystemTime, u64)> {
    let m = std::fs::metadata(path).ok()?;
    Some((m.modified().ok()?, m.len()))
}

impl Acl {
    /// Reads `path`; an unreadable or invalid file is an error (the broker does not start).
    pub(crate) fn load(path: &Path) -> Result<Acl, String> {
        let stamp = stamp_of(path);
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read the ACL file {}: {e}", path.display()))?;
        let rules =
            AclConfig::parse(&text).map_err(|e| format!("ACL file {}: {e}", path.display()))?;
        Ok(Acl {
            path: path.to_owned(),
            rules: RwLock::new(Arc::new(rules)),
            stamp: std::sync::Mutex::new(stamp),
            refused: AtomicU64::new(0),
        })
    }

    /// Re-reads the file if its modification time or length changed; keeps the old rules if
    /// the new text does not parse.
    pub(crate) fn reload_if_changed(&self) {
        let now = stamp_of(&self.path);
        {
            let mut last = self.stamp.lock().unwrap_or_else(|p| p.into_inner());
            if *last == now {
                return;
            }
            *last = now;
        }
        match std::fs::read_to_string(&self.path)
            .map_err(|e| e.to_string())
            .and_then(|t| AclConfig::parse(&t))
        {
            Ok(rules) => {
                *self.rules.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(rules);
                tracing::info!(path = %self.path.display(), "ACL file reloaded");
            }
            Err(e) => {
                tracing::warn!(path = %self.path.display(), error = %e, "ACL file not reloaded; the previous rules stay in force")
            }
        }
    }

    /// `None` when `req` may proceed; else the refusal to answer.
    pub(crate) fn check(&self, role: Role, ctx: &ConnCtx, req: &RemotingCommand) -> Option<Reply> {
        let need = need(role, req.code).unwrap_or(Need::Signed);
        let rules = Arc::clone(&self.rules.read().unwrap_or_else(|p| p.into_inner()));
        match rules.validate(need, ctx.peer.ip(), req) {
            Ok(()) => None,
            Err(remark) => {
                // Relaxed: a statistic.
                self.refused.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(peer = %ctx.peer, code = req.code, %remark, "request refused by ACL");
                Some(reply_error(req, response_code::NO_PERMISSION, remark))
            }
        }
    }
}

/// How often the ACL file's modification time is polled.
const RELOAD_POLL: Duration = Duration::from_millis(500);

/// Reloads the broker's ACL file when it changes, until shutdown.
pub(crate) async fn watch_file(face: Arc<RemotingState>, mut shutdown: watch::Receiver<bool>) {
    let Some(acl) = &face.acl else { return };
    loop {
        tokio::select! {
            _ = tokio::time::sleep(RELOAD_POLL) => acl.reload_if_changed(),
            _ = shutdown.changed() => return,
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
    fn given_the_java_hook_test_vector_should_sign_and_verify_alike() {
        // rocketmq-client-rust's AclClientRPCHook test: fields a/z plus AccessKey and
        // SecurityToken, body "body", secret "secret".
        let mut ext = ExtFields::new();
        ext.insert("z", "last");
        ext.insert("a", "first");
        ext.insert(ACCESS_KEY, "ak");
        ext.insert("SecurityToken", "token");
        assert_eq!(sign(&ext, b"body", "secret"), "wuJkFDNRMKY6aFXTDwT/vg0UC8M=");
        ext.insert(SIGNATURE, "wuJkFDNRMKY6aFXTDwT/vg0UC8M=");
        assert!(verify(&ext, b"body", "secret"));
        assert!(!verify(&ext, b"body", "other"));
        assert!(!verify(&ext, b"bodz", "secret"));
        ext.insert(SIGNATURE, "not base64!");
        assert!(!verify(&ext, b"body", "secret"));
    }

    #[test]
    fn given_rocketmq_inner_credentials_json_should_parse_sign_and_hide_the_secret() {
        let c: Credentials = r#"{"accessKey":"ak","secretKey":"secret"}"#.parse().unwrap();
        assert_eq!((c.access_key.as_str(), c.secret_key.as_str()), ("ak", "secret"));
        assert!(!format!("{c:?}").contains("secret\""), "Debug hides the secret: {c:?}");
        let mut req = RemotingCommand::request(rc::REGISTER_BROKER, 1).with_body(&b"body"[..]);
        req.ext_fields.insert("brokerName", "b");
        c.sign(&mut req);
        assert_eq!(req.ext_fields.get(ACCESS_KEY), Some("ak"));
        assert!(verify(&req.ext_fields, &req.body, "secret"), "what it signs verifies");
        assert!(!verify(&req.ext_fields, &req.body, "other"));
        let e = r#"{"accessKey":"ak","secretKey":"#.parse::<Credentials>().unwrap_err();
        assert!(e.contains("accessKey"), "the error shows the expected form: {e}");
        assert!(r#"{"accessKey":"","secretKey":"s"}"#.parse::<Credentials>().is_err());
    }

    #[test]
    fn given_address_patterns_should_match_as_rocketmq() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let m = |p: &str, a: &str| any_matches(&AddrPattern::parse_list(p).unwrap(), ip(a));
        assert!(m("192.168.0.*", "192.168.0.77"));
        assert!(!m("192.168.0.*", "192.168.1.77"));
        assert!(m("192.168.1.1-10", "192.168.1.10"));
        assert!(!m("192.168.1.1-10", "192.168.1.11"));
        assert!(m("192.168.*.1", "192.168.9.1"));
        assert!(!m("192.168.*.1", "192.168.9.2"));
        assert!(m("10.0.0.1,10.0.0.2", "10.0.0.2"));
        assert!(m("192.168.1.{1,2,3}", "192.168.1.3"));
        assert!(!m("192.168.1.{1,2,3}", "192.168.1.4"));
        assert!(m("*", "8.8.8.8"));
        assert!(!m("", "8.8.8.8"));
        assert!(m("127.0.0.1", "::ffff:127.0.0.1"));
        assert!(AddrPattern::parse_list("300.1.1.1").is_err());
        assert!(AddrPattern::parse_list("1.1.1.9-2").is_err());
    }

    #[test]
    fn given_a_plain_acl_yml_should_read_accounts_perms_and_whitelists() {
        let c = AclConfig::parse(
            "globalWhiteRemoteAddresses:\n  - 10.10.103.*\naccounts:\n  - accessKey: ak\n    secretKey: 12345678\n    whiteRemoteAddress:\n      - 192.168.1.*\n    admin: true\n    defaultTopicPerm: PUB\n    topicPerms:\n      - t=SUB|PUB\n    groupPerms:\n      - g=DENY\n",
        )
        .unwrap();
        assert_eq!(c.global_white.len(), 1);
        let a = &c.accounts["ak"];
        assert_eq!(a.secret_key, "12345678", "a number-looking secret is read as its text");
        assert!(a.admin);
        assert_eq!(a.white, AddrPattern::parse_list("192.168.1.*").unwrap());
        assert_eq!((a.default_topic_perm, a.default_group_perm), (PUB, DENY));
        assert_eq!(a.topic_perms["t"], PUB | SUB);
        assert_eq!(a.group_perms["g"], DENY);
        assert!(AclConfig::parse("accounts:\n  - accessKey: x\n").is_err(), "no secret");
    }

    #[test]
    fn given_perm_strings_should_parse_and_check_as_rocketmq() {
        assert_eq!(parse_perm(Some("PUB|SUB")), PUB | SUB);
        assert_eq!(parse_perm(Some("nonsense")), DENY);
        assert_eq!(parse_perm(None), DENY);
        assert!(permits(PUB, PUB | SUB));
        assert!(!permits(SUB, PUB));
        assert!(!permits(PUB, DENY));
    }
}
