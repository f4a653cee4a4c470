//! Recycling node memory.
//!
//! Every append allocates a node and the reaper frees it on another thread, later. With the
//! system allocator that cross-thread free is the most expensive step of a message's life
//! (measured here: about 35% of an append's instructions are `malloc`, and the reaper's
//! `free` plus glibc's consolidation about 70% of a reclamation), and fresh pages fault on the
//! producer's thread. So reclaimed nodes are not freed: once their epoch grace period has
//! passed and their payload is dropped, the reaper returns their memory to a small global
//! stash, and appenders take it back through a per-thread cache, refilled in batches.
//!
//! Reuse is safe for readers holding a [`NodeRef`](super::NodeRef): a node is only recycled
//! after it was reclaimed, which moved the queue's head past its `end`, so
//! `NodeRef::get` refuses the old reference before it could look at the reused memory.
//!
//! Both caches are bounded (the stash to [`STASH_MAX`] nodes, a thread to [`REFILL`]); what
//! does not fit is freed. Under loom the pool is off: nodes are plain boxes, so the models see
//! exactly the queue's protocol.

use super::Node;

/// Most nodes kept in the global stash (about 600 KiB).
#[cfg(not(loom))]
pub(crate) const STASH_MAX: usize = 8192;
/// How many nodes a thread takes from the stash at once (and so at most keeps).
#[cfg(not(loom))]
pub(crate) const REFILL: usize = 64;

#[cfg(not(loom))]
mod imp {
    use std::cell::RefCell;
    use std::mem::MaybeUninit;
    use std::sync::Mutex;

    use super::{Node, REFILL, STASH_MAX};

    /// Node memory whose contents are dropped (uninitialised).
    struct Slot(*mut MaybeUninit<Node>);

    // SAFETY: a slot is exclusively owned memory with no live value in it; moving it between
    // threads moves nothing but the allocation's ownership.
    unsafe impl Send for Slot {}

    impl Slot {
        fn free(self) {
            // SAFETY: slots come from `Box<Node>` allocations (same layout as
            // `MaybeUninit<Node>`), hold no value, and are owned by exactly one holder.
            drop(unsafe { Box::from_raw(self.0) });
        }
    }

    static STASH: Mutex<Vec<Slot>> = Mutex::new(Vec::new());

    struct Local(Vec<Slot>);

    impl Drop for Local {
        fn drop(&mut self) {
            for s in self.0.drain(..) {
                s.free();
            }
        }
    }

    thread_local! {
        static LOCAL: RefCell<Local> = const { RefCell::new(Local(Vec::new())) };
    }

    fn stash() -> std::sync::MutexGuard<'static, Vec<Slot>> {
        crate::sync::lock(&STASH)
    }

    /// Places `node` in recycled memory if there is some, in a new allocation otherwise.
    pub(crate) fn alloc(node: Node) -> *mut Node {
        let slot = LOCAL
            .try_with(|l| {
                let mut l = l.borrow_mut();
                if l.0.is_empty() {
                    let mut s = stash();
                    let n = s.len().min(REFILL);
                    let at = s.len() - n;
                    l.0.extend(s.drain(at..));
                }
                l.0.pop()
            })
            .ok()
            .flatten();
        match slot {
            Some(Slot(p)) => {
                // SAFETY: the slot is exclusively ours and sized and aligned for a `Node`.
                unsafe { (*p).write(node) };
                p.cast::<Node>()
            }
            None => Box::into_raw(Box::new(node)),
        }
    }

    /// Takes back nodes whose contents have already been dropped in place.
    ///
    /// # Safety
    /// Each pointer must come from [`alloc`] (or `Box<Node>`), hold no live value, and not be
    /// used by the caller afterwards.
    pub(crate) unsafe fn recycle(nodes: Vec<*mut Node>) {
        let mut slots = nodes.into_iter().map(|p| Slot(p.cast::<MaybeUninit<Node>>()));
        {
            let mut s = stash();
            let room = STASH_MAX.saturating_sub(s.len());
            s.extend(slots.by_ref().take(room));
        }
        for s in slots {
            s.free();
        }
    }
}

#[cfg(loom)]
mod imp {
    use super::Node;

    pub(crate) fn alloc(node: Node) -> *mut Node {
        Box::into_raw(Box::new(node))
    }
}

pub(crate) use imp::alloc;
#[cfg(not(loom))]
pub(crate) use imp::recycle;
