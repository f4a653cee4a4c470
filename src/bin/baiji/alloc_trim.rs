//! Giving the memory of consumed messages back to the operating system.
//!
//! The engine frees a message once every group has acknowledged it, but the allocator keeps
//! freed memory for reuse: after a backlog of 1M 128-byte messages was consumed, the broker's
//! RSS stayed well above that of an idle broker although the store held nothing (measured with
//! `baiji bench --backlog`, see benches/results/REPORT.md). The binary's allocator is mimalloc
//! (see `main.rs`); a message's memory belongs to the runtime worker that read it from the
//! socket, and the reaper's frees only queue it on that worker's pages. mimalloc gives such
//! pages back when their owning thread collects, which an idle worker never does.
//!
//! So once a second the broker looks at the store's accounted bytes and asks for a trim when
//! they have fallen by at least [`TRIM_STEP`] since the last one, or when they have settled (no
//! change for a second) at less than half of what they were: steady traffic, whose accounted
//! bytes stay flat, never pays for a trim; a backlog being drained pays once per step and once
//! when it is gone. A trim request bumps a generation number; every runtime worker, when it
//! next parks (it has nothing to run, so the collection delays no request), sees the new
//! generation and runs `mi_collect(true)` on its own heap: thread-freed blocks are taken back,
//! empty pages are freed and their memory purged.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use baiji::store::Store;

/// Fall of the store's accounted bytes since the last trim that triggers the next one.
const TRIM_STEP: u64 = 32 << 20;

/// Trim requests so far; a worker collects when it has not seen the latest.
static GENERATION: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// The generation this thread last collected for.
    static SEEN: Cell<u64> = const { Cell::new(0) };
}

extern "C" {
    /// mimalloc (linked in by the `mimalloc` crate, the global allocator): collects the calling
    /// thread's heap; `force` also frees and purges every empty page and abandoned segment.
    fn mi_collect(force: bool);
}

/// Runtime hook (`on_thread_park`): collects this worker's heap once per trim request. Costs a
/// load and a compare on every park when nothing was requested.
pub(crate) fn on_park() {
    // Relaxed: the generation carries no data; a worker that sees a bump late collects at its
    // next park, and mi_collect synchronises with the allocator's own state by itself.
    let wanted = GENERATION.load(Ordering::Relaxed);
    if SEEN.with(|s| s.replace(wanted)) != wanted {
        // SAFETY: mi_collect takes no pointers and touches only the calling thread's heap and
        // the allocator's shared segment state under its own synchronisation; it may be called
        // from any thread at any time.
        unsafe { mi_collect(true) };
    }
}

/// Watches `store` until the runtime stops, asking the workers to trim after large drops.
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
                // Relaxed: see `on_park`.
                GENERATION.fetch_add(1, Ordering::Relaxed);
            }
        }
    });
}
