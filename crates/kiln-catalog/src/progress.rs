//! Progress reporting hooks, so callers choose how (or whether) to show a fetch.

/// Receives progress while a model is fetched.
///
/// One fetch reports `set_len` once with the total number of bytes it will account for
/// (wheel downloads plus assembled files), then `inc` as bytes arrive, `stage` whenever
/// it moves to another step, and `finish` at the end.
pub trait Progress {
    /// A human-readable description of the current step.
    fn stage(&self, msg: &str);
    /// Total amount of work, in bytes.
    fn set_len(&self, n: u64);
    /// `n` more bytes done.
    fn inc(&self, n: u64);
    /// The work is complete.
    fn finish(&self);
}

/// Ignores all progress.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoProgress;

impl Progress for NoProgress {
    fn stage(&self, _msg: &str) {}
    fn set_len(&self, _n: u64) {}
    fn inc(&self, _n: u64) {}
    fn finish(&self) {}
}
