//! Waiting for a condition in a test, with a bound: the one polling loop every harness's
//! `eventually` / `wait_until` wraps.

use std::future::Future;
use std::time::{Duration, Instant};

/// Polls `cond` every `every` until it holds (`Ok`, with how long that took) or `within`
/// passes (`Err`, with how long it polled).
pub(crate) async fn poll<F, Fut>(
    within: Duration,
    every: Duration,
    mut cond: F,
) -> Result<Duration, Duration>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let start = Instant::now();
    loop {
        if cond().await {
            return Ok(start.elapsed());
        }
        if start.elapsed() >= within {
            return Err(start.elapsed());
        }
        tokio::time::sleep(every).await;
    }
}
