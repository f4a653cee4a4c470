//! Tests with real RocketMQ clients (rocketmq-client-rust, and ali-ons through Node.js) against
//! an in-process baiji broker over loopback. One test target, so the heavy client crate is
//! linked once.
//!
//! The modules live in `tests/rocketmq_client/`; `#[path]` is needed because a test target's
//! root file looks for its modules next to itself (`tests/`), where cargo would also pick them
//! up as test targets of their own.

#[path = "rocketmq_client/completeness_support.rs"]
mod completeness_support;

#[path = "rocketmq_client/completeness.rs"]
mod completeness;
