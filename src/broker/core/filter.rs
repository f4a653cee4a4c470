//! SQL92 property filters on the broker: compiled once per subscription (per heartbeat
//! version, or per distinct expression a pull carries), evaluated on each stored record a pull
//! looks at, so a message that does not match never crosses the wire.
//!
//! RocketMQ keeps the compiled filter per group and topic (`ConsumerFilterManager`) from the
//! heartbeats, and compiles a pull's own expression through a parse cache of 100 entries
//! (`SelectorParser.PARSE_CACHE`); baiji does both. Tag filtering stays in the engine
//! ([`crate::store::Filter`]); an SQL92 subscription reads with `Filter::All` and tests each
//! record's properties here.

use std::collections::HashMap;
use std::sync::OnceLock;

use crate::sync::{Arc, Mutex};

use crate::broker::core::record;
use crate::remoting::body::{ExpressionType, SubscriptionData};
use crate::remoting::sql92::{Sql92, Sql92Error};
use crate::sync::lock;

/// The `expressionType` of SQL92 subscriptions (RocketMQ's `ExpressionType.SQL92`).
pub(crate) const SQL92: &str = "SQL92";

/// A heartbeat subscription's SQL92 filter.
#[derive(Debug, Clone)]
pub(crate) enum SqlFilter {
    /// The expression compiled.
    Compiled(Arc<Sql92>),
    /// The expression does not compile: pulls answer `FILTER_DATA_NOT_EXIST`, as RocketMQ's do
    /// when its `ConsumerFilterManager` refused to register it.
    Invalid(Arc<Sql92Error>),
}

/// The SQL92 filter of a heartbeat subscription; `None` for tag subscriptions.
pub(crate) fn of_subscription(sd: &SubscriptionData) -> Option<SqlFilter> {
    if sd.expression_type != ExpressionType::Sql92 {
        return None;
    }
    Some(match compile(&sd.sub_string) {
        Ok(f) => SqlFilter::Compiled(f),
        Err(e) => {
            tracing::warn!(expression = %sd.sub_string, topic = %sd.topic, error = %e,
                "a heartbeat's SQL92 subscription does not compile");
            SqlFilter::Invalid(Arc::new(e))
        }
    })
}

/// Most expressions the parse cache keeps (RocketMQ's `PARSE_CACHE` size).
const CACHE_ENTRIES: usize = 100;

type Cache = HashMap<Box<str>, Result<Arc<Sql92>, Sql92Error>>;

/// Compiles `expression`, through a cache of the last [`CACHE_ENTRIES`] distinct expressions
/// (pulls that carry their subscription repeat it on every request).
///
/// # Errors
///
/// The [`Sql92Error`] that names what is wrong.
pub(crate) fn compile(expression: &str) -> Result<Arc<Sql92>, Sql92Error> {
    static CACHE: OnceLock<Mutex<Cache>> = OnceLock::new();
    let cache = CACHE.get_or_init(|| Mutex::new(HashMap::new()));
    if let Some(hit) = lock(cache).get(expression) {
        return hit.clone();
    }
    // Compiled outside the lock: parsing is bounded but not free.
    let result = Sql92::compile(expression).map(Arc::new);
    let mut c = lock(cache);
    if c.len() >= CACHE_ENTRIES {
        c.clear();
    }
    c.insert(expression.into(), result.clone());
    result
}

/// Whether a stored record's properties, with the broker's `extra` ones (`CLUSTER`), satisfy
/// `sql`. A record that does not decode does not match (the pull steps over it either way).
pub(crate) fn matches(sql: &Sql92, stored_record: &[u8], extra: &[u8]) -> bool {
    record::decode(stored_record).is_some_and(|d| sql.matches_properties(d.properties, extra))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn given_the_same_expression_twice_should_compile_it_once() {
        let a = compile("cache_probe_a > 1").expect("valid");
        let b = compile("cache_probe_a > 1").expect("valid");
        assert!(Arc::ptr_eq(&a, &b), "the second pull reuses the compiled expression");
        assert_eq!(compile("cache_probe_b >").err(), compile("cache_probe_b >").err());
        for i in 0..2 * CACHE_ENTRIES {
            let e = format!("cache_probe_{i} = 1");
            assert_eq!(
                compile(&e).map(|f| f.expression().to_owned()),
                Ok(e),
                "bounded, still right"
            );
        }
    }
}
