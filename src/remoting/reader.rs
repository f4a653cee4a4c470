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
mod tests {
    use super::*;

    #[test]
    fn given_short_buffer_when_reading_wider_int_should_return_none_and_not_advance() {
        let mut r = Reader::new(&[0, 1, 2]);
        assert_eq!(r.i32(), None, "a 4-byte read from 3 bytes must fail");
        assert_eq!(r.position(), 0, "a failed read must not consume anything");
        assert_eq!(r.i16(), Some(1));
        assert_eq!(r.u8(), Some(2));
        assert_eq!(r.remaining(), 0);
        assert_eq!(r.take(1), None);
    }

    #[test]
    fn given_huge_length_when_taking_should_not_overflow() {
        let mut r = Reader::new(&[0; 4]);
        r.pos = 2;
        assert_eq!(r.take_range(usize::MAX), None, "offset overflow must be a short read");
    }
}
