//! The one place that names atomics, locks and threads.
//!
//! Every module of baiji's engine imports its primitives from here, never from `std` directly,
//! so that the same source compiles against [loom] when the crate is built with `--cfg loom`
//! (see `loom-tests/`). Under loom, every atomic access, lock and park becomes a point where
//! the model checker may switch threads. (`crossbeam-epoch` follows the same switch through
//! its own `crossbeam_loom` cfg.)
//!
//! [loom]: https://docs.rs/loom

#[cfg(not(loom))]
mod imp {
    pub(crate) use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
    pub(crate) use std::sync::{Arc, Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};
    pub(crate) use std::thread::{self, Thread};
    pub(crate) use std::thread_local;

    /// Spin-loop hint; under loom a yield so the model can make progress.
    #[inline]
    pub(crate) fn spin_hint() {
        std::hint::spin_loop();
    }
}

#[cfg(loom)]
mod imp {
    pub(crate) use loom::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
    pub(crate) use loom::sync::{
        Arc, Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard,
    };
    pub(crate) use loom::thread::{self, Thread};
    pub(crate) use loom::thread_local;

    /// Spin-loop hint; under loom a yield so the model can make progress.
    #[inline]
    pub(crate) fn spin_hint() {
        loom::thread::yield_now();
    }
}

pub(crate) use imp::*;

/// Locks a mutex, recovering the data if another thread panicked while holding it.
///
/// baiji's critical sections keep their data consistent at every point where they could panic
/// (only allocation failure, which aborts), so a poisoned lock is still usable; propagating the
/// poison would turn one bug into a dead engine.
#[inline]
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Locks a mutex only if nobody holds it (`None` then), recovering from poison (see [`lock`]).
#[inline]
pub(crate) fn try_lock<T>(m: &Mutex<T>) -> Option<MutexGuard<'_, T>> {
    match m.try_lock() {
        Ok(g) => Some(g),
        Err(std::sync::TryLockError::Poisoned(p)) => Some(p.into_inner()),
        Err(std::sync::TryLockError::WouldBlock) => None,
    }
}

/// Read-locks an `RwLock`, recovering from poison (see [`lock`]).
#[inline]
pub(crate) fn read<T>(l: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    l.read().unwrap_or_else(|p| p.into_inner())
}

/// Write-locks an `RwLock`, recovering from poison (see [`lock`]).
#[inline]
pub(crate) fn write<T>(l: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    l.write().unwrap_or_else(|p| p.into_inner())
}

/// Write-locks an `RwLock` only if nobody holds it (`None` then), recovering from poison
/// (see [`lock`]). For writers that must not wait, such as appenders updating an index.
#[inline]
pub(crate) fn try_write<T>(l: &RwLock<T>) -> Option<RwLockWriteGuard<'_, T>> {
    match l.try_write() {
        Ok(g) => Some(g),
        Err(std::sync::TryLockError::Poisoned(p)) => Some(p.into_inner()),
        Err(std::sync::TryLockError::WouldBlock) => None,
    }
}

/// Atomics that only count (statistics, id generators, best-effort flags): always `std`, even
/// under loom. No protocol synchronises through them, so modelling them would only multiply
/// the interleavings loom explores without checking anything.
pub(crate) mod plain {
    pub(crate) use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

    /// [`super::lock`] for a `std` mutex, even under loom: for state outside every model
    /// (the store's tables), which keeps `std` locks so the models do not explore them.
    #[inline]
    #[allow(dead_code)] // unused in some feature sets
    pub(crate) fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
        m.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// [`super::read`] for a `std` `RwLock`, even under loom (see [`lock`]).
    #[inline]
    #[allow(dead_code)] // unused in some feature sets
    pub(crate) fn read<T>(l: &std::sync::RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
        l.read().unwrap_or_else(|p| p.into_inner())
    }

    /// [`super::write`] for a `std` `RwLock`, even under loom (see [`lock`]).
    #[inline]
    #[allow(dead_code)] // unused in some feature sets
    pub(crate) fn write<T>(l: &std::sync::RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
        l.write().unwrap_or_else(|p| p.into_inner())
    }
}

/// A field written before its node is published and only read afterwards.
///
/// Outside loom it is the plain value. Under loom it is a `loom::cell::UnsafeCell`, so every
/// read is checked against the write: a read that does not happen after the write (a
/// publication with too weak an ordering) fails the model (invariant 2).
#[cfg(not(loom))]
#[derive(Debug)]
pub(crate) struct Published<T>(T);

#[cfg(not(loom))]
impl<T> Published<T> {
    pub(crate) const fn new(v: T) -> Self {
        Published(v)
    }
    #[inline(always)]
    pub(crate) fn get(&self) -> &T {
        &self.0
    }
    #[inline(always)]
    pub(crate) fn get_mut(&mut self) -> &mut T {
        &mut self.0
    }
}

/// See the non-loom definition.
#[cfg(loom)]
#[derive(Debug)]
pub(crate) struct Published<T>(loom::cell::UnsafeCell<T>);

// SAFETY: a `Published` value is only written through `get_mut` (`&mut self`, before the node
// is shared) and only read afterwards, exactly like a plain field of a `Sync` struct; the loom
// cell adds causality tracking, not interior mutability reachable from `&self`.
#[cfg(loom)]
unsafe impl<T: Send + Sync> Sync for Published<T> {}

#[cfg(loom)]
impl<T> Published<T> {
    pub(crate) fn new(v: T) -> Self {
        Published(loom::cell::UnsafeCell::new(v))
    }
    pub(crate) fn get(&self) -> &T {
        // SAFETY: the value is only mutated through `get_mut` (`&mut self`), so no mutable
        // reference can be live while this shared one is; loom checks the causality of the read.
        self.0.with(|p| unsafe { &*p })
    }
    pub(crate) fn get_mut(&mut self) -> &mut T {
        // SAFETY: `&mut self` is exclusive.
        self.0.with_mut(|p| unsafe { &mut *p })
    }
}

/// Test-only mutation switch: whether the deliberately injected bug `name` is switched on.
///
/// The loom models and the reference/stress tests must each fail against the bug they exist
/// to catch; `.ci/loom-mutants` and `.ci/test-mutants` check that they do (README,
/// "Verification", lists every mutant and the models that catch it). Each mutant is a one-line
/// branch at the exact place of the protocol it breaks, e.g.
/// `if mutant("weak_publish") { Acquire } else { AcqRel }`.
///
/// In a normal build this is a `const fn` returning `false`, so every such branch folds away.
/// Only under `cfg(loom)` (the loom crate) or the hidden `__mutants` feature (test-only, never
/// for a shipped build) does it compare `name` with the environment variable `BAIJI_MUTANT`,
/// read once. An unknown name switches nothing on, so a misspelt mutant makes its model pass
/// and the mutant check report it as surviving instead of silently "catching" it.
#[cfg(not(any(loom, feature = "__mutants")))]
#[inline(always)]
pub(crate) const fn mutant(_name: &str) -> bool {
    false
}

/// See the normal-build definition.
#[cfg(any(loom, feature = "__mutants"))]
pub(crate) fn mutant(name: &str) -> bool {
    // std's `OnceLock`, not a modelled primitive: the value never changes during a run.
    static ACTIVE: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    // `BAIJI_MUTANT` names one mutant, or several separated by commas (a bug that needs two
    // rules broken at once, such as an index entry neither pruned nor validated).
    ACTIVE
        .get_or_init(|| std::env::var("BAIJI_MUTANT").ok())
        .as_deref()
        .is_some_and(|active| active.split(',').any(|m| m == name))
}
