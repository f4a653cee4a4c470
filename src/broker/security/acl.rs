//! RocketMQ plain ACL accounts (`--acl-file`, RocketMQ 4.x / 5.x ACL 1.0 `plain_acl.yml`):
//! the parsed file ([`AclConfig`]), the checks RocketMQ's `PlainPermissionManager.validate`
//! makes of one request against it ([`AclConfig::validate`]), and the running broker's
//! [`Acl`] (the rules, reloaded when the file changes, and the refusals counted).
//!
//! What a request needs (its code's or RPC's row of the permission matrix) and where its
//! resources and signature are is the face's business: the remoting face's rules are in
//! `remoting/acl.rs`, the gRPC face's in `grpc/acl.rs`; each hands a request to
//! [`AclConfig::validate`] as a [`SignedRequest`]. In this order:
//!
//! 1. codes RocketMQ lets through without credentials (`open`) pass;
//! 2. a peer matching `globalWhiteRemoteAddresses` passes;
//! 3. the request must name a configured account (`AccessKey`); a peer matching that account's
//!    `whiteRemoteAddress` passes;
//! 4. its signature must verify with the account's secret key;
//! 5. admin-only codes need `admin: true`;
//! 6. each resource the request names needs its permission: the account's `topicPerms` /
//!    `groupPerms` entry, else `defaultTopicPerm` / `defaultGroupPerm`. A retry topic
//!    `%RETRY%G` is group `G`'s resource.
//!
//! The file is re-read when its modification time or length changes (polled); a file that no
//! longer parses leaves the previous rules in force, with a warning.

use crate::sync::Arc;
use std::borrow::Cow;
use std::collections::HashMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use super::watch::FileStamp;
use crate::broker::core::topics::RETRY_PREFIX;
use crate::sync::{read, write, AtomicU64, Ordering, RwLock};

/// Permission bits, as RocketMQ's `Permission`.
pub(crate) const DENY: u8 = 1;
/// Any of publish and subscribe.
pub(crate) const ANY: u8 = 2;
/// Publish.
pub(crate) const PUB: u8 = 4;
/// Subscribe.
pub(crate) const SUB: u8 = 8;

/// A resource a request touches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Resource<'a> {
    /// A topic.
    Topic(Cow<'a, str>),
    /// A consumer group.
    Group(Cow<'a, str>),
}

impl Resource<'_> {
    /// A topic; a retry topic is its group's resource.
    pub(crate) fn topic(name: Cow<'_, str>) -> Resource<'_> {
        match name.strip_prefix(RETRY_PREFIX) {
            Some(g) => Resource::Group(Cow::Owned(g.to_owned())),
            None => Resource::Topic(name),
        }
    }
}

/// One request as the ACL checks it: its account, signature and resources, read by the face
/// that received it.
pub(crate) trait SignedRequest {
    /// The account it names (`AccessKey`), if any.
    fn access_key(&self) -> Option<&str>;
    /// Whether its signature verifies with `secret_key`.
    fn verify(&self, secret_key: &str) -> bool;
    /// What it is, for a refusal's remark (remoting: `request code=N`).
    fn what(&self) -> String;
    /// The resources it touches, each with the permission it needs (computed only once the
    /// signature verified).
    ///
    /// # Errors
    /// The remark when the request cannot be read for them (a bad heartbeat body).
    fn resources(&self) -> Result<Vec<(Resource<'_>, u8)>, String>;
}

/// Why [`AclConfig::validate`] refused a request: RocketMQ's `AclException` text, and whether
/// the account was known and its signature verified (then a right was missing: the gRPC face
/// answers `FORBIDDEN` rather than `UNAUTHORIZED`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Refusal {
    /// The remark a refusal carries.
    pub(crate) remark: String,
    /// The signature verified; a permission (or admin) was missing.
    pub(crate) authenticated: bool,
}

impl Refusal {
    fn unauthenticated(remark: String) -> Refusal {
        Refusal { remark, authenticated: false }
    }

    fn forbidden(remark: String) -> Refusal {
        Refusal { remark, authenticated: true }
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
pub(crate) fn parse_perm(s: Option<&str>) -> u8 {
    match s.map(str::trim) {
        Some("PUB") => PUB,
        Some("SUB") => SUB,
        Some("PUB|SUB") | Some("SUB|PUB") => PUB | SUB,
        Some("ANY") => ANY,
        _ => DENY,
    }
}

/// RocketMQ's `Permission.checkPermission`.
pub(crate) fn permits(needed: u8, owned: u8) -> bool {
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

    /// RocketMQ's `PlainPermissionManager.validate` of `req` from `peer`: `Ok` or the
    /// refusal. `open`: the code needs no credentials; `admin`: it needs an admin account.
    pub(crate) fn validate(
        &self,
        open: bool,
        admin: bool,
        peer: IpAddr,
        req: &impl SignedRequest,
    ) -> Result<(), Refusal> {
        if open || any_matches(&self.global_white, peer) {
            return Ok(());
        }
        let Some(ak) = req.access_key() else {
            return Err(Refusal::unauthenticated("No accessKey is configured".into()));
        };
        let Some(acc) = self.accounts.get(ak) else {
            return Err(Refusal::unauthenticated(format!("No acl config for {ak}")));
        };
        if any_matches(&acc.white, peer) {
            return Ok(());
        }
        if !req.verify(&acc.secret_key) {
            return Err(Refusal::unauthenticated(format!(
                "Check signature failed for accessKey={ak}"
            )));
        }
        if admin && !acc.admin {
            return Err(Refusal::forbidden(format!(
                "Need admin permission for {}, but accessKey={} is not",
                req.what(),
                acc.access_key
            )));
        }
        if acc.admin && acc.topic_perms.is_empty() && acc.group_perms.is_empty() {
            return Ok(());
        }
        for (res, needed) in req.resources().map_err(Refusal::forbidden)? {
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
                return Err(Refusal::forbidden(format!("No default permission for {label}")));
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

/// The ACL of a running broker: the rules of its file, reloaded when the file changes.
#[derive(Debug)]
pub(crate) struct Acl {
    path: PathBuf,
    rules: RwLock<Arc<AclConfig>>,
    stamp: FileStamp,
    /// Requests refused (one-way ones included, which get no answer).
    pub(crate) refused: AtomicU64,
}

impl Acl {
    /// Reads `path`; an unreadable or invalid file is an error (the broker does not start).
    pub(crate) fn load(path: &Path) -> Result<Acl, String> {
        let stamp = FileStamp::of(&[path]);
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read the ACL file {}: {e}", path.display()))?;
        let rules =
            AclConfig::parse(&text).map_err(|e| format!("ACL file {}: {e}", path.display()))?;
        Ok(Acl {
            path: path.to_owned(),
            rules: RwLock::new(Arc::new(rules)),
            stamp,
            refused: AtomicU64::new(0),
        })
    }

    /// The rules in force now.
    pub(crate) fn rules(&self) -> Arc<AclConfig> {
        Arc::clone(&read(&self.rules))
    }

    /// Counts a refused request.
    pub(crate) fn refuse(&self) {
        // Relaxed: a statistic.
        self.refused.fetch_add(1, Ordering::Relaxed);
    }

    /// Re-reads the file if its modification time or length changed; keeps the old rules if
    /// the new text does not parse.
    pub(crate) fn reload_if_changed(&self) {
        if self.stamp.unchanged(&[&self.path]) {
            return;
        }
        match std::fs::read_to_string(&self.path)
            .map_err(|e| e.to_string())
            .and_then(|t| AclConfig::parse(&t))
        {
            Ok(rules) => {
                *write(&self.rules) = Arc::new(rules);
                tracing::info!(path = %self.path.display(), "ACL file reloaded");
            }
            Err(e) => {
                tracing::warn!(path = %self.path.display(), error = %e, "ACL file not reloaded; the previous rules stay in force")
            }
        }
    }
}

impl super::watch::Reload for Acl {
    fn reload_if_changed(&self) {
        Acl::reload_if_changed(self);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
