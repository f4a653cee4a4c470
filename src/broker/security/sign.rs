//! RocketMQ ACL 1.0 request signatures: HMAC-SHA1 (base64) keyed with an account's secret key
//! over the values of every ext field sorted by key, then the body (what the Java
//! `AclClientRPCHook` and the Rust client's hook sign), and the credentials the broker signs
//! its own requests with. Shared: the remoting face verifies with it, the registrar and the
//! benches sign with it.
//!
//! The 5.x SDKs sign gRPC calls with the same MAC over one value, their `x-mq-date-time`
//! metadata ([`sign_content_hex`], [`verify_content`]); the gRPC face reads their
//! `authorization` metadata and verifies with these.

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use hmac::{KeyInit, Mac};

use crate::remoting::{ExtFields, RemotingCommand};

type HmacSha1 = hmac::Hmac<sha1::Sha1>;

/// Ext field naming the account (RocketMQ `SessionCredentials.ACCESS_KEY`).
pub const ACCESS_KEY: &str = "AccessKey";
/// Ext field carrying the signature (RocketMQ `SessionCredentials.SIGNATURE`).
pub const SIGNATURE: &str = "Signature";
/// Ext field RocketMQ's server leaves out of the signed content (`MixAll.UNIQUE_MSG_QUERY_FLAG`).
const UNIQUE_MSG_QUERY_FLAG: &str = "_UNIQUE_KEY_QUERY";

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

/// The hex HMAC-SHA1 keyed with `secret_key` over `content`, lower case, as the 5.x SDKs write
/// it in their `authorization` metadata (`Signature=<hex>`, over the `x-mq-date-time` value:
/// rocketmq-clients `python/rocketmq/v5/util/signature.py`, Java `TlsHelper.sign`).
#[must_use]
pub fn sign_content_hex(content: &[u8], secret_key: &str) -> String {
    use std::fmt::Write as _;
    let Some(mut mac) = keyed(secret_key) else { return String::new() };
    mac.update(content);
    mac.finalize().into_bytes().iter().fold(String::with_capacity(40), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

/// Whether `tag` is the HMAC-SHA1 keyed with `secret_key` over `content` (the raw MAC, as
/// decoded from a gRPC `Signature=<hex>`). Compares in constant time.
#[must_use]
pub fn verify_content(content: &[u8], secret_key: &str, tag: &[u8]) -> bool {
    keyed(secret_key).is_some_and(|mut mac| {
        mac.update(content);
        mac.verify_slice(tag).is_ok()
    })
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
    let mut mac = keyed(secret_key)?;
    for (_, v) in sorted {
        mac.update(v.as_bytes());
    }
    mac.update(body);
    Some(mac)
}

/// A MAC keyed with `secret_key`; `None` never happens (HMAC takes keys of any length).
fn keyed(secret_key: &str) -> Option<HmacSha1> {
    HmacSha1::new_from_slice(secret_key.as_bytes()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::remoting::code::request_code as rc;

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
    fn given_the_proxys_grpc_test_vector_should_sign_the_date_time_as_the_sdks_do() {
        // RocketMQ's DefaultAuthenticationContextBuilderTest: x-mq-date-time 20231227T194619Z
        // signed Signature=D18A9CBCDDBA9041D6693268FEF15A989E64430B (hex, any case), which the
        // proxy turns into base64 0YqcvN26kEHWaTJo/vFamJ5kQws=. Its secret is not in the test:
        // the vector here is the HMAC of the same date with secret "secret", as the Python SDK
        // computes it (`hexlify(hmac.new(b"secret", b"20231227T194619Z", sha1).digest())`).
        let hex = sign_content_hex(b"20231227T194619Z", "secret");
        assert_eq!(hex, "fe5145b93c155d66cc248ae77f6558969db74f99");
        let tag: Vec<u8> =
            (0..20).map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap()).collect();
        assert!(verify_content(b"20231227T194619Z", "secret", &tag));
        assert!(!verify_content(b"20231227T194620Z", "secret", &tag));
        assert!(!verify_content(b"20231227T194619Z", "other", &tag));
        assert!(!verify_content(b"20231227T194619Z", "secret", &tag[..19]));
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
}
