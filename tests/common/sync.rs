//! Poison-recovering locks for test code (the crate's own `sync::lock` is internal): a test
//! thread that panicked while holding a lock fails its own test; the others keep going.

use std::sync::{Mutex, MutexGuard};

/// Locks `m`, recovering the data if a panicking thread poisoned it.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
