//! Pinning an engine's own epoch collector from any thread.
//!
//! The engine owns a [`Collector`] (never the process-global one, so loom models and separate
//! engines start fresh). `crossbeam-epoch` handles are `!Send`, so each thread keeps one handle
//! per live engine in a thread-local list; handles of dropped engines are pruned on the next
//! registration.

use std::cell::RefCell;

use crossbeam_epoch::{Collector, Guard, LocalHandle};

use crate::sync::plain::{AtomicBool, Ordering};
use crate::sync::{thread_local, Arc};

struct Cached {
    id: usize,
    alive: Arc<AtomicBool>,
    handle: LocalHandle,
}

thread_local! {
    #[allow(clippy::missing_const_for_thread_local)] // loom's thread_local! has no const form
    static HANDLES: RefCell<Vec<Cached>> = RefCell::new(Vec::new());
}

/// An engine's collector plus the bookkeeping to pin it cheaply from any thread.
pub(crate) struct Epoch {
    collector: Collector,
    alive: Arc<AtomicBool>,
}

impl std::fmt::Debug for Epoch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Epoch").finish_non_exhaustive()
    }
}

impl Epoch {
    pub(crate) fn new(collector: Collector) -> Self {
        Epoch { collector, alive: Arc::new(AtomicBool::new(true)) }
    }

    fn id(&self) -> usize {
        Arc::as_ptr(&self.alive) as usize
    }

    /// Pins the current thread in this engine's collector.
    pub(crate) fn pin(&self) -> Guard {
        let id = self.id();
        let pinned = HANDLES.try_with(|cell| {
            let mut list = cell.borrow_mut();
            if let Some(c) = list.iter().find(|c| c.id == id) {
                return c.handle.pin();
            }
            // Relaxed: a stale `true` only delays pruning to the next registration.
            list.retain(|c| c.alive.load(Ordering::Relaxed));
            let handle = self.collector.register();
            let guard = handle.pin();
            list.push(Cached { id, alive: Arc::clone(&self.alive), handle });
            guard
        });
        match pinned {
            Ok(g) => g,
            // The thread is tearing down its thread-locals: use a one-off handle. The guard
            // keeps the participant registered until it is dropped.
            Err(_) => self.collector.register().pin(),
        }
    }
}

impl Drop for Epoch {
    fn drop(&mut self) {
        // Relaxed: only used to prune caches; correctness never depends on it.
        self.alive.store(false, Ordering::Relaxed);
    }
}
