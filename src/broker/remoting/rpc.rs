//! `rocketmq_rpc_latency` of the remoting face: per request code of the dispatch tables and
//! response code, the time to answer inline (a suspended pull's later answer is not timed).
//! The metrics endpoint renders it.

use std::time::Duration;

use super::table::{Role, BROKER, NAMESRV};
use crate::broker::core::counters::Histogram;
use crate::remoting::code::response_code;

/// RocketMQ's `rocketmq_rpc_latency` buckets, milliseconds (kept in microseconds here).
const LATENCY_BOUNDS_US: &[u64] = &[1_000, 3_000, 5_000, 10_000, 100_000, 1_000_000, 3_000_000];

/// Slots of [`RpcLatency`]: one per response code RocketMQ names, one for any other code.
fn response_slot(code: i32) -> usize {
    response_code::ALL.iter().position(|(c, _)| *c == code).unwrap_or(response_code::ALL.len())
}

/// `rocketmq_rpc_latency` per (request code of the dispatch tables, response code), for the
/// requests answered inline (a suspended pull's later answer is not timed).
#[derive(Debug)]
pub(crate) struct RpcLatency {
    pub(crate) broker: Box<[Box<[Histogram]>]>,
    pub(crate) namesrv: Box<[Box<[Histogram]>]>,
}

impl Default for RpcLatency {
    fn default() -> Self {
        let slots = || -> Box<[Histogram]> {
            (0..=response_code::ALL.len()).map(|_| Histogram::new(LATENCY_BOUNDS_US)).collect()
        };
        RpcLatency {
            broker: BROKER.iter().map(|_| slots()).collect(),
            namesrv: NAMESRV.iter().map(|_| slots()).collect(),
        }
    }
}

impl RpcLatency {
    /// A request of the `index`-th code of `role`'s table answered with `code` after `took`.
    pub(crate) fn observe(&self, role: Role, index: usize, code: i32, took: Duration) {
        let table = match role {
            Role::Broker => &self.broker,
            Role::NameServer => &self.namesrv,
        };
        if let Some(h) = table.get(index).and_then(|t| t.get(response_slot(code))) {
            h.observe(u64::try_from(took.as_micros()).unwrap_or(u64::MAX));
        }
    }
}
