//! What both faces' security needs, outside either face: RocketMQ ACL accounts and the checks
//! against them ([`acl`]), request signatures and the broker's own credentials ([`sign`]), the
//! TLS certificate store and server ([`tls`]), one request to a peer over TLS ([`peer`]), their settings ([`config`]), and the polling
//! that reloads their files ([`watch`]). Which request codes need what, and the TLS modes'
//! first-byte gate, are the remoting face's (`remoting/acl.rs`, `remoting/tls.rs`).

pub(crate) mod acl;
pub(crate) mod config;
pub(crate) mod peer;
pub mod sign;
pub(crate) mod tls;
pub(crate) mod watch;
