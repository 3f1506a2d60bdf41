//! Errors of the benchmark client.

use std::path::PathBuf;

/// Everything that can stop a benchmark (a failed *request* is not an error: it is
/// recorded in the run's results).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    #[error("cannot read or write {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    #[error("{path} is not a repairable ShareGPT JSON file: {reason}")]
    Dataset { path: PathBuf, reason: String },

    #[error("{path}: malformed JSON: {source}")]
    Json {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },

    #[error("{path}: {reason}")]
    Workload { path: PathBuf, reason: String },

    #[error("only {found} of the requested {wanted} prompts pass the length filters")]
    NotEnoughPrompts { wanted: usize, found: usize },

    #[error("cannot fetch {name} through the catalogue: {source}")]
    Catalog {
        name: String,
        #[source]
        source: kiln_catalog::Error,
    },

    #[error("cannot open the GGUF {path}: {source}")]
    Gguf {
        path: PathBuf,
        #[source]
        source: kiln_formats::Error,
    },

    #[error("tokenizer of {path}: {source}")]
    Tokenizer {
        path: PathBuf,
        #[source]
        source: kiln_tokenizer::Error,
    },

    #[error("invalid base URL {url:?}: {reason}")]
    BaseUrl { url: String, reason: String },

    #[error("invalid benchmark option {option}: {reason}")]
    Option {
        option: &'static str,
        reason: String,
    },

    #[error("cannot start the benchmark runtime: {0}")]
    Runtime(#[source] std::io::Error),

    #[error("warm-up request to {url} failed: {message}")]
    Warmup { url: String, message: String },

    #[error("cannot read /proc/{pid}/{file}: {reason}")]
    Proc {
        pid: u32,
        file: &'static str,
        reason: String,
    },

    #[error("cannot spawn server command {command:?}: {source}")]
    Spawn {
        command: String,
        #[source]
        source: std::io::Error,
    },

    #[error(
        "server {command:?} exited before it answered on {url} ({status}); log tail:\n{log_tail}"
    )]
    ServerExited {
        command: String,
        url: String,
        status: String,
        log_tail: String,
    },

    #[error("server at {url} did not answer /health or /v1/models within {seconds} s")]
    ServerTimeout { url: String, seconds: u64 },

    #[error("kernel benchmark {kernel}: {reason}")]
    Kernel { kernel: String, reason: String },

    #[error("cannot draw plot {path}: {reason}")]
    Plot { path: PathBuf, reason: String },
}

/// Result of the benchmark client's fallible operations.
pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    pub(crate) fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> Error {
        let path = path.into();
        move |source| Error::Io { path, source }
    }
}
