//! The memory behind a segment: a shared file mapping, or (loom models and unit tests of the
//! protocol) a heap buffer of atomic words.
//!
//! The protocol in `segment.rs` and `log.rs` only ever touches a segment through this type:
//! header words through [`Memory::word`] (atomics, in both back-ends), payload bytes through
//! [`Memory::write`] and [`Memory::with_bytes`]. In a mapping those are plain copies; in the
//! heap buffer they are Relaxed stores and loads of whole words, so that under loom a payload
//! read that does not happen after its write (a commit mark published too weakly) reads stale
//! words and fails the model's checksum.

use crate::sync::AtomicU64;

/// A segment's bytes.
pub(crate) enum Memory {
    /// A `MAP_SHARED` mapping of the segment's file.
    #[cfg(not(loom))]
    Mapped(memmap2::MmapRaw),
    /// Atomic words on the heap (not persistent).
    #[cfg(any(test, loom))]
    Heap(Box<[AtomicU64]>),
}

impl std::fmt::Debug for Memory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            #[cfg(not(loom))]
            Memory::Mapped(m) => f.debug_tuple("Mapped").field(&m.len()).finish(),
            #[cfg(any(test, loom))]
            Memory::Heap(w) => f.debug_tuple("Heap").field(&(w.len() * 8)).finish(),
        }
    }
}

/// Where a record's payload bytes live for the `Bytes` that hands them out.
pub(crate) enum PayloadSource {
    /// Inside the mapping (valid while the segment is mapped).
    #[cfg(not(loom))]
    Mapped(*const u8, usize),
    /// A copy (heap segments: their words cannot be borrowed as bytes).
    #[cfg(any(test, loom))]
    Copied(Vec<u8>),
}

impl Memory {
    /// A zeroed heap buffer of `size` bytes (a multiple of 8).
    #[cfg(any(test, loom))]
    pub(crate) fn heap(size: usize) -> Self {
        Memory::Heap((0..size / 8).map(|_| AtomicU64::new(0)).collect())
    }

    /// Its size in bytes.
    pub(crate) fn len(&self) -> usize {
        match self {
            #[cfg(not(loom))]
            Memory::Mapped(m) => m.len(),
            #[cfg(any(test, loom))]
            Memory::Heap(w) => w.len() * 8,
        }
    }

    /// The 8-byte word at byte offset `at`.
    ///
    /// # Panics
    /// If `at` is not 8-aligned or the word is not inside the segment: callers only pass
    /// positions they computed from a reservation or validated against the segment's size, so
    /// a panic here is a bug of this module, never something found on disk.
    #[inline]
    pub(crate) fn word(&self, at: usize) -> &AtomicU64 {
        assert!(
            at % 8 == 0 && at + 8 <= self.len(),
            "a segment word must be aligned and inside the segment (at {at}, size {})",
            self.len()
        );
        match self {
            #[cfg(not(loom))]
            Memory::Mapped(m) => {
                // The mapping is page-aligned and outlives `&self`; this module accesses header
                // words only atomically (module docs).
                // SAFETY: `at` is 8-aligned and in bounds (checked above), so the address is a valid, aligned `u64` of a live mapping; `AtomicU64` has the layout of `u64`.
                unsafe { &*(m.as_mut_ptr().add(at) as *const AtomicU64) }
            }
            #[cfg(any(test, loom))]
            Memory::Heap(w) => &w[at / 8],
        }
    }

    /// Copies `parts`, one after the other, to `at..` (8-aligned; the last word's tail is
    /// zeroed in heap memory).
    ///
    /// # Safety
    /// The caller owns the range (a reservation, or a segment nobody else sees yet): no other
    /// thread reads or writes it until the caller publishes it.
    pub(crate) unsafe fn write(&self, at: usize, parts: &[&[u8]]) {
        let total: usize = parts.iter().map(|p| p.len()).sum();
        assert!(
            at % 8 == 0 && at + total <= self.len(),
            "a write must stay inside its segment (at {at}, {total} bytes, size {})",
            self.len()
        );
        match self {
            #[cfg(not(loom))]
            Memory::Mapped(m) => {
                let mut dst = at;
                for p in parts {
                    // SAFETY: `dst..dst + p.len()` is inside the mapping (checked above), the
                    // caller owns it (function contract), and `p` cannot overlap the mapping's
                    // range being written (the caller owns that range; `p` is its own data).
                    unsafe {
                        std::ptr::copy_nonoverlapping(p.as_ptr(), m.as_mut_ptr().add(dst), p.len())
                    };
                    dst += p.len();
                }
            }
            #[cfg(any(test, loom))]
            Memory::Heap(w) => {
                let bytes: Vec<u8> = parts.concat();
                for (i, chunk) in bytes.chunks(8).enumerate() {
                    let mut word = [0u8; 8];
                    word[..chunk.len()].copy_from_slice(chunk);
                    // Relaxed: the range is published by the writer's later Release store (the
                    // commit mark, or the caller's own publication of the payload).
                    w[at / 8 + i].store(u64::from_le_bytes(word), crate::sync::Ordering::Relaxed);
                }
            }
        }
    }

    /// Calls `f` with the bytes `at..at + len`.
    ///
    /// # Safety
    /// No thread writes the range non-atomically while `f` runs: it is a committed record's
    /// payload (immutable), or recovery runs before any writer exists.
    pub(crate) unsafe fn with_bytes<R>(
        &self,
        at: usize,
        len: usize,
        f: impl FnOnce(&[u8]) -> R,
    ) -> R {
        assert!(
            at + len <= self.len(),
            "a read must stay inside its segment (at {at}, {len} bytes, size {})",
            self.len()
        );
        match self {
            #[cfg(not(loom))]
            Memory::Mapped(m) => {
                // SAFETY: in bounds (checked above), mapped while `&self` lives, and not
                // written while `f` runs (function contract).
                f(unsafe { std::slice::from_raw_parts(m.as_mut_ptr().add(at), len) })
            }
            #[cfg(any(test, loom))]
            Memory::Heap(_) => f(&self.copy(at, len)),
        }
    }

    /// Where the payload `at..at + len` can be read from after this call.
    ///
    /// # Safety
    /// As [`with_bytes`](Self::with_bytes), for as long as the returned source is used.
    pub(crate) unsafe fn payload(&self, at: usize, len: usize) -> PayloadSource {
        assert!(
            at + len <= self.len(),
            "a payload must lie inside its segment (at {at}, {len} bytes, size {})",
            self.len()
        );
        match self {
            #[cfg(not(loom))]
            Memory::Mapped(m) => {
                // SAFETY: in bounds (checked above).
                PayloadSource::Mapped(unsafe { m.as_mut_ptr().add(at) }, len)
            }
            #[cfg(any(test, loom))]
            Memory::Heap(_) => PayloadSource::Copied(self.copy(at, len)),
        }
    }

    /// The bytes `at..at + len` of heap memory, word by word.
    #[cfg(any(test, loom))]
    fn copy(&self, at: usize, len: usize) -> Vec<u8> {
        let mut out = Vec::with_capacity(len + 8);
        let first = at / 8;
        let skip = at % 8;
        let mut i = first;
        while out.len() < skip + len {
            // Relaxed: the caller's contract says the bytes were published to this thread
            // (a commit mark or recovery's Acquire load of it, or the writer itself).
            out.extend_from_slice(
                &self.word(i * 8).load(crate::sync::Ordering::Relaxed).to_le_bytes(),
            );
            i += 1;
        }
        out.drain(..skip);
        out.truncate(len);
        out
    }
}
