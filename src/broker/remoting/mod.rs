//! The remoting face.

pub(crate) mod namesrv;
pub(crate) mod processor;
pub(crate) mod registrar;
pub(crate) mod server;
pub(crate) mod table;
