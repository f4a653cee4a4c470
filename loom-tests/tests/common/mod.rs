//! What both loom test targets share: how a model is run.

/// Runs a model with the preemption bound from `LOOM_MAX_PREEMPTIONS` (default 3).
pub fn model<F: Fn() + Sync + Send + 'static>(f: F) {
    let mut b = loom::model::Builder::new();
    if b.preemption_bound.is_none() {
        b.preemption_bound = Some(3);
    }
    b.check(f);
}

/// Like [`model`], with the preemption bound capped at `cap`: for models whose bug needs
/// fewer preemptions than the suite's bound and whose full exploration at that bound (a whole
/// engine operation racing a reaper pass, epoch pins and flushes on every thread) would take
/// many minutes.
#[allow(dead_code)] // each target uses its own subset
pub fn model_capped<F: Fn() + Sync + Send + 'static>(cap: usize, f: F) {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(b.preemption_bound.unwrap_or(3).min(cap));
    b.check(f);
}
