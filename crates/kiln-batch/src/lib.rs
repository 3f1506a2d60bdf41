//! Async work without HTTP: OpenAI's Batch API over files of `kiln-files`, and Workers
//! AI's queued requests (`queueRequest`), both as batches of lines in one SQLite store.
//!
//! A batch is validated into one row per input line (`store.rs`), then drained by a
//! driver (`drain.rs`) that runs its pending lines through the server's
//! [`BatchRunner`] under a global bound on lines in flight, so a 100k-line batch never
//! floods the model's queue or KV cache; the runner marks them low priority, so the
//! engine serves interactive requests first. Each line's result is written in the
//! transaction that marks it done, so after a crash the batch resumes with the lines
//! that have no result, and none is run into the output twice. Finalizing writes the
//! output and error files (`finalize.rs`) under ids derived from the batch's, so a
//! finalize a crash cut is simply done again.

mod drain;
mod error;
mod finalize;
mod ids;
mod input;
mod row;
mod runner;
mod service;
mod store;

pub use error::{BatchError, Result};
pub use input::MAX_CUSTOM_ID_CHARS;
pub use row::{Kind, Status};
pub use runner::{BatchRunner, LineOutcome, LineUsage};
pub use service::{Batches, Limits, Polled};
pub use store::BatchStore;
