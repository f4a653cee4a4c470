//! What both faces' security needs, outside either face: the ACL accounts and request
//! signatures, the TLS certificate store, and their configuration.

pub(crate) mod config;
