//! Re-reading files when they change: the ACL file and the TLS certificate and key are polled
//! for their modification time and length (every [`RELOAD_POLL`]), and reloaded when either
//! changes.

use std::path::Path;
use std::time::{Duration, SystemTime};

use tokio::sync::watch;

use crate::sync::{lock, Arc, Mutex};

/// How often watched files are checked for changes.
pub(crate) const RELOAD_POLL: Duration = Duration::from_millis(500);

/// A file's modification time and length (`None` if it cannot be read).
pub(crate) type Stamp = Option<(SystemTime, u64)>;

/// The modification time and length of `path` (`None` if it cannot be read).
pub(crate) fn stamp_of(path: &Path) -> Stamp {
    let m = std::fs::metadata(path).ok()?;
    Some((m.modified().ok()?, m.len()))
}

/// The stamps of some files when they were last read.
#[derive(Debug)]
pub(crate) struct FileStamp {
    last: Mutex<Vec<Stamp>>,
}

impl FileStamp {
    /// The stamps of `paths` now.
    pub(crate) fn of(paths: &[&Path]) -> Self {
        FileStamp { last: Mutex::new(paths.iter().map(|p| stamp_of(p)).collect()) }
    }

    /// Whether `paths` have the stamps they had when last asked; if not, remembers the new
    /// ones (the caller reloads).
    pub(crate) fn unchanged(&self, paths: &[&Path]) -> bool {
        let now: Vec<Stamp> = paths.iter().map(|p| stamp_of(p)).collect();
        let mut last = lock(&self.last);
        if *last == now {
            return true;
        }
        *last = now;
        false
    }
}

/// Something that re-reads its files when they changed.
pub(crate) trait Reload: Send + Sync {
    /// Re-reads if a file changed; keeps what it has if the new content does not load.
    fn reload_if_changed(&self);
}

/// Polls `what` every [`RELOAD_POLL`] until shutdown.
pub(crate) async fn poll(what: Arc<dyn Reload>, mut shutdown: watch::Receiver<bool>) {
    loop {
        tokio::select! {
            _ = tokio::time::sleep(RELOAD_POLL) => what.reload_if_changed(),
            _ = shutdown.changed() => return,
        }
    }
}
