//! A bounds-checked little-endian cursor over the mapped header bytes.
//!
//! Field names are passed as `&dyn Display` and only rendered when an error is built, so a
//! header with huge names costs nothing extra on the success path.

use std::fmt::{self, Display};
use std::path::Path;

use crate::{Error, Result};

/// Most bytes reserved up front for a collection whose length a file claims. A count is
/// only checked against the bytes that remain, which may be the whole data section, so
/// beyond this collections grow only as items are actually parsed.
const MAX_RESERVE_BYTES: usize = 256 << 10;

/// How many of `n` claimed items of type `T` to reserve room for.
pub(crate) fn reserve_items<T>(n: usize) -> usize {
    n.min(MAX_RESERVE_BYTES / std::mem::size_of::<T>().max(1))
}

/// Names quoted in error messages are cut to this many characters: a corrupt length can
/// make a "name" megabytes long.
const MAX_SHOWN_CHARS: usize = 64;

/// Displays a name from the file quoted and escaped like `{:?}`, shortened if long.
#[derive(Clone, Copy)]
pub(crate) struct Quoted<'a>(pub &'a str);

impl Display for Quoted<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0.char_indices().nth(MAX_SHOWN_CHARS) {
            None => write!(f, "{:?}", self.0),
            Some((cut, _)) => write!(f, "{:?}... ({} bytes)", &self.0[..cut], self.0.len()),
        }
    }
}

/// A name from the file, cut to [`MAX_SHOWN_CHARS`] characters, to store in an error.
pub(crate) fn shortened(name: &str) -> String {
    cut(name, MAX_SHOWN_CHARS)
}

/// `text` cut to at most `max_chars` characters, marked with `...` if cut.
pub(crate) fn cut(text: &str, max_chars: usize) -> String {
    match text.char_indices().nth(max_chars) {
        None => text.to_string(),
        Some((end, _)) => format!("{}...", &text[..end]),
    }
}

/// A field name followed by a fixed suffix, rendered only when needed.
pub(crate) struct Suffixed<'a>(pub &'a dyn Display, pub &'static str);

impl Display for Suffixed<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}", self.0, self.1)
    }
}

pub(crate) struct Reader<'a> {
    path: &'a Path,
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    pub fn new(path: &'a Path, bytes: &'a [u8]) -> Self {
        Self {
            path,
            bytes,
            pos: 0,
        }
    }

    pub fn path(&self) -> &'a Path {
        self.path
    }

    /// Length of the whole input.
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    pub fn pos(&self) -> usize {
        self.pos
    }

    pub fn remaining(&self) -> usize {
        self.bytes.len() - self.pos
    }

    pub fn malformed(
        &self,
        offset: usize,
        field: &dyn Display,
        reason: impl Into<String>,
    ) -> Error {
        Error::Malformed {
            path: self.path.to_path_buf(),
            offset: offset as u64,
            field: field.to_string(),
            reason: reason.into(),
        }
    }

    pub fn take(&mut self, n: usize, field: &dyn Display) -> Result<&'a [u8]> {
        if n > self.remaining() {
            return Err(self.malformed(
                self.pos,
                field,
                format!(
                    "needs {n} bytes but only {} remain (truncated file?)",
                    self.remaining()
                ),
            ));
        }
        let s = &self.bytes[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    fn array<const N: usize>(&mut self, field: &dyn Display) -> Result<[u8; N]> {
        let s = self.take(N, field)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }

    pub fn u8(&mut self, field: &dyn Display) -> Result<u8> {
        Ok(self.array::<1>(field)?[0])
    }
    pub fn u16(&mut self, field: &dyn Display) -> Result<u16> {
        Ok(u16::from_le_bytes(self.array(field)?))
    }
    pub fn u32(&mut self, field: &dyn Display) -> Result<u32> {
        Ok(u32::from_le_bytes(self.array(field)?))
    }
    pub fn u64(&mut self, field: &dyn Display) -> Result<u64> {
        Ok(u64::from_le_bytes(self.array(field)?))
    }
    pub fn f32(&mut self, field: &dyn Display) -> Result<f32> {
        Ok(f32::from_le_bytes(self.array(field)?))
    }
    pub fn f64(&mut self, field: &dyn Display) -> Result<f64> {
        Ok(f64::from_le_bytes(self.array(field)?))
    }

    /// Checks that `n` items of at least `min_item_bytes` each can still fit in what
    /// remains, so a corrupt count can't trigger a huge allocation. `at` is the offset of
    /// the count field, for the error.
    pub fn check_count(
        &self,
        n: u64,
        min_item_bytes: usize,
        at: usize,
        field: &dyn Display,
    ) -> Result<usize> {
        match n.checked_mul(min_item_bytes.max(1) as u64) {
            Some(need) if need <= self.remaining() as u64 => Ok(n as usize),
            _ => Err(self.malformed(
                at,
                field,
                format!(
                    "count {n} (at least {min_item_bytes} bytes each) cannot fit in the {} \
                     bytes that remain",
                    self.remaining()
                ),
            )),
        }
    }

    /// Reads a u64 count and checks it with [`check_count`](Self::check_count).
    pub fn count(&mut self, field: &dyn Display, min_item_bytes: usize) -> Result<usize> {
        let at = self.pos;
        let n = self.u64(field)?;
        self.check_count(n, min_item_bytes, at, field)
    }

    /// A GGUF string: u64 length then UTF-8 bytes.
    pub fn string(&mut self, field: &dyn Display) -> Result<&'a str> {
        let len = self.count(field, 1)?;
        let at = self.pos;
        let bytes = self.take(len, field)?;
        std::str::from_utf8(bytes)
            .map_err(|e| self.malformed(at, field, format!("invalid UTF-8: {e}")))
    }
}
