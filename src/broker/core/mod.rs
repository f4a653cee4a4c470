//! The broker's protocol-free core.

pub(crate) mod clients;
pub(crate) mod delay;
pub(crate) mod filter;
pub(crate) mod locks;
pub(crate) mod pop;
pub(crate) mod rates;
pub(crate) mod record;
pub(crate) mod timer;
pub(crate) mod topics;
pub(crate) mod transaction;
