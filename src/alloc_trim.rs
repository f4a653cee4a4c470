//! Giving the memory of consumed messages back to the operating system.
//!
//! The engine frees a message once every group has acknowledged it, but glibc's malloc keeps
//! freed chunks in its arenas: after a backlog of 1M 128-byte messages was consumed, the
//! broker's RSS stayed at its peak (320 MiB) although the store held nothing; one
//! `malloc_trim(0)` brought it back to 6 MiB, next to the 5.7 MiB of an idle broker
//! (measured with `baiji bench --backlog`, see benches/results/REPORT.md).
//!
//! So once a second the broker looks at the store's accounted bytes and trims when they have
//! fallen by at least [`TRIM_STEP`] since the last trim, or when they have settled (no change
//! for a second) at less than half of what they were: steady traffic, whose accounted bytes
//! stay flat, never pays for a trim; a backlog being drained pays once per step and once when
//! it is gone. The trim walks every arena and can take milliseconds, so it runs on a blocking
//! thread, never on a runtime worker. Other allocators and C libraries get no trim (they
//! return memory their own way).

use std::sync::Arc;
use std::time::Duration;

use baiji::store::Store;

/// Fall of the store's accounted bytes since the last trim that triggers the next one.
const TRIM_STEP: u64 = 32 << 20;

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn trim() {
    extern "C" {
        /// glibc: releases free memory at the top of the heap and, since 2.8, free pages
        /// inside every arena; returns 1 if any memory was released.
        fn malloc_trim(pad: usize) -> std::ffi::c_int;
    }
    // SAFETY: malloc_trim takes no pointers and only walks the allocator's own state under
    // its arena locks; it is safe to call from any thread at any time.
    let _ = unsafe { malloc_trim(0) };
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn trim() {}

/// Watches `store` until the runtime stops, trimming after large drops.
pub(crate) fn spawn(store: Arc<dyn Store>) {
    tokio::spawn(async move {
        let mut high = store.memory().bytes_used;
        let mut last = high;
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        loop {
            tick.tick().await;
            let used = store.memory().bytes_used;
            high = high.max(used);
            let settled_low = used == last && used < high / 2;
            last = used;
            if high - used >= TRIM_STEP || settled_low {
                high = used;
                let _ = tokio::task::spawn_blocking(trim).await;
            }
        }
    });
}
