//! Names unique in one test binary, so tests sharing a broker never share a topic or group.

/// A name unique in this test binary: `<prefix>_<n>`.
pub(crate) fn unique(prefix: &str) -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(1);
    // Relaxed: the counter only has to hand out each number once.
    format!("{prefix}_{}", NEXT.fetch_add(1, Ordering::Relaxed))
}
