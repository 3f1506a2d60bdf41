use std::path::PathBuf;

/// Errors from loading, converting or running an encoder model.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Format(#[from] kiln_formats::Error),
    #[error("{path}: invalid json: {source}")]
    Json {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    /// A configuration value is missing or out of range.
    #[error("{path}: {field}: {reason}")]
    Config {
        path: PathBuf,
        field: String,
        reason: String,
    },
    /// The model asks for something this crate does not implement.
    #[error("{path}: unsupported {what}")]
    Unsupported { path: PathBuf, what: String },
    /// A weight tensor whose shape or type is not what the configuration implies.
    #[error("{path}: tensor {name:?}: expected {expected}, found {found}")]
    Tensor {
        path: PathBuf,
        name: String,
        expected: String,
        found: String,
    },
    #[error("{dir}: missing model files: {missing}")]
    MissingFiles { dir: PathBuf, missing: String },
    #[error("{path}: cannot load tokenizer: {message}")]
    Tokenizer { path: PathBuf, message: String },
    #[error("input {index}: cannot tokenize: {message}")]
    Tokenize { index: usize, message: String },
    /// An input longer than the model accepts, when truncation was not asked for.
    #[error(
        "input {index} has {tokens} tokens, more than the model's maximum of {max}; \
         shorten it or ask for truncation"
    )]
    InputTooLong {
        index: usize,
        tokens: usize,
        max: usize,
    },
    /// A PyTorch checkpoint or pickle that this crate's readers cannot interpret (`what`
    /// names the archive member or object; `offset` is that of the pickle opcode, if any).
    #[error("{}: {what}{}: {reason}", path.display(), at(*offset))]
    Checkpoint {
        path: PathBuf,
        what: String,
        offset: Option<u64>,
        reason: String,
    },
    /// A conversion input that is not the file the conversion was written for.
    #[error("{path}: sha256 {found}, expected {expected}; refusing to convert an unknown file")]
    SourceMismatch {
        path: PathBuf,
        expected: &'static str,
        found: String,
    },
    /// A converted file that differs from the reference conversion's output.
    #[error("converted {file} has sha256 {found} ({size} bytes), expected {expected}")]
    ConversionMismatch {
        file: &'static str,
        size: usize,
        expected: &'static str,
        found: String,
    },
}

pub type Result<T> = std::result::Result<T, Error>;

/// ` at offset N`, or nothing.
fn at(offset: Option<u64>) -> String {
    offset
        .map(|o| format!(" at offset {o}"))
        .unwrap_or_default()
}

impl Error {
    pub(crate) fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> Error {
        let path = path.into();
        move |source| Error::Io { path, source }
    }
}
