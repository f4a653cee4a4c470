//! Waiting for appends: the long polls of both faces (a suspended pull, a parked pop, a gRPC
//! receive) wake on the engine's per-queue wake-up, not on a timer scan.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use crate::store::{TopicStore, WaitId};
use crate::sync::Arc;

/// Resolves when a message is appended at or after `offset` (the engine's wake-up, not a
/// timer scan). Withdraws its registration when dropped.
pub(crate) struct AppendWait {
    pub(crate) topic: Arc<dyn TopicStore>,
    pub(crate) queue: u32,
    pub(crate) offset: u64,
    pub(crate) id: Option<WaitId>,
}

impl Future for AppendWait {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = &mut *self;
        match this.topic.watch(this.queue, this.offset, cx.waker(), this.id) {
            Ok(Some(id)) => {
                this.id = Some(id);
                Poll::Pending
            }
            Ok(None) | Err(_) => {
                this.id = None;
                Poll::Ready(())
            }
        }
    }
}

impl Drop for AppendWait {
    fn drop(&mut self) {
        if let Some(id) = self.id.take() {
            self.topic.cancel_watch(self.queue, id);
        }
    }
}
