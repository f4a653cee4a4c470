//! A bounds-checked big-endian cursor over a byte slice.
//!
//! Every read returns `None` instead of panicking when fewer bytes remain than the read needs,
//! so decoders of peer bytes can turn a short buffer into their own typed error with `ok_or`.
//! Positions are plain offsets into the slice the reader was created over, which lets callers
//! cut zero-copy [`bytes::Bytes`] slices out of the buffer the slice came from.

use std::ops::Range;

/// Cursor over `buf`; `pos` never exceeds `buf.len()`.
#[derive(Debug, Clone)]
pub(crate) struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    /// Starts reading at the first byte of `buf`.
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Self { buf, pos: 0 }
    }

    /// Bytes not yet consumed.
    pub(crate) fn remaining(&self) -> usize {
        self.buf.len().saturating_sub(self.pos)
    }

    /// Offset of the next unread byte.
    pub(crate) fn position(&self) -> usize {
        self.pos
    }

    /// Consumes `n` bytes and returns their offsets, or `None` (consuming nothing) if fewer remain.
    pub(crate) fn take_range(&mut self, n: usize) -> Option<Range<usize>> {
        let end = self.pos.checked_add(n)?;
        if end > self.buf.len() {
            return None;
        }
        let range = self.pos..end;
        self.pos = end;
        Some(range)
    }

    /// Consumes `n` bytes and borrows them.
    pub(crate) fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let range = self.take_range(n)?;
        self.buf.get(range)
    }

    /// Consumes exactly `N` bytes into an array.
    pub(crate) fn array<const N: usize>(&mut self) -> Option<[u8; N]> {
        let bytes = self.take(N)?;
        <[u8; N]>::try_from(bytes).ok()
    }

    pub(crate) fn u8(&mut self) -> Option<u8> {
        self.array::<1>().map(|[b]| b)
    }

    pub(crate) fn i16(&mut self) -> Option<i16> {
        self.array().map(i16::from_be_bytes)
    }

    pub(crate) fn i32(&mut self) -> Option<i32> {
        self.array().map(i32::from_be_bytes)
    }

    pub(crate) fn i64(&mut self) -> Option<i64> {
        self.array().map(i64::from_be_bytes)
    }
}

#[cfg(test)]
mod tests;
