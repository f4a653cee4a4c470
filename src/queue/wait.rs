//! The wait list of one queue: who to wake when a message is appended.
//!
//! A waiter registers here and then sets the `WAITING` tag on the `next` link of the node it
//! waits behind (see the protocol essay in [`super`]); an appender that finds that tag drains
//! this list and wakes everybody in it. The list is a plain mutex-protected map (keyed by
//! registration id, so a re-poll or a withdrawal costs O(log n), not a scan) because it is only
//! touched by waiters that found nothing to read and by appenders that found the tag, never on
//! the fast path of an append nobody waits for. Each queue has its own list: an append wakes
//! only the waiters of its queue.

use std::collections::BTreeMap;
use std::task::Waker;

use crate::sync::{lock, Mutex, Thread};

/// Something that can be woken: a parked thread or an async task.
#[derive(Debug, Clone)]
pub enum Wakeup {
    /// A thread parked with `thread::park`.
    Thread(Thread),
    /// An async task.
    Task(Waker),
}

impl Wakeup {
    fn wake(self) {
        match self {
            Wakeup::Thread(t) => t.unpark(),
            Wakeup::Task(w) => w.wake(),
        }
    }

    fn will_wake(&self, other: &Wakeup) -> bool {
        match (self, other) {
            (Wakeup::Task(a), Wakeup::Task(b)) => a.will_wake(b),
            (Wakeup::Thread(a), Wakeup::Thread(b)) => a.id() == b.id(),
            _ => false,
        }
    }
}

/// Identifies one registration so its owner can withdraw it (timeout, cancelled future).
pub type WaitId = u64;

#[derive(Debug, Default)]
struct Entries {
    next_id: WaitId,
    list: BTreeMap<WaitId, Wakeup>,
}

/// The waiters of one queue. One-shot: a wake-up removes every entry it wakes.
#[derive(Debug, Default)]
pub(crate) struct WaitList {
    entries: Mutex<Entries>,
}

impl WaitList {
    /// Adds `who`, or refreshes the entry `id` if it is still registered, while `then` runs
    /// under the list's lock. `then` returns whether the registration should stay (it sets the
    /// `WAITING` tag and returns `false` when a message arrived in the meantime).
    pub(crate) fn register_with<F: FnOnce() -> bool>(
        &self,
        id: Option<WaitId>,
        who: Wakeup,
        then: F,
    ) -> Option<WaitId> {
        let mut e = lock(&self.entries);
        let id = match id.filter(|id| e.list.contains_key(id)) {
            Some(id) => {
                if let Some(slot) = e.list.get_mut(&id) {
                    if !slot.will_wake(&who) {
                        *slot = who;
                    }
                }
                id
            }
            None => {
                let id = e.next_id;
                e.next_id = e.next_id.wrapping_add(1);
                e.list.insert(id, who);
                id
            }
        };
        if then() {
            Some(id)
        } else {
            e.list.remove(&id);
            None
        }
    }

    /// Withdraws a registration; a no-op when a wake-up already removed it.
    pub(crate) fn deregister(&self, id: WaitId) {
        lock(&self.entries).list.remove(&id);
    }

    /// Wakes and removes every registered waiter. Returns how many were woken.
    pub(crate) fn wake_all(&self) -> usize {
        let drained = {
            let mut e = lock(&self.entries);
            std::mem::take(&mut e.list)
        };
        let n = drained.len();
        for w in drained.into_values() {
            w.wake();
        }
        n
    }

    /// Whether `id` is still registered (not yet woken).
    #[cfg(loom)]
    pub(crate) fn is_registered(&self, id: WaitId) -> bool {
        lock(&self.entries).list.contains_key(&id)
    }
}
