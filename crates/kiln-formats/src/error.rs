use std::path::PathBuf;

/// Errors from reading a model file. Every variant names the file; those about the file's
/// contents also name the byte offset and the field.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: not a GGUF file (magic {found:?} at offset 0)")]
    BadMagic { path: PathBuf, found: [u8; 4] },
    #[error("{path}: unsupported GGUF version {version} at offset 4 (supported: 2, 3)")]
    UnsupportedVersion { path: PathBuf, version: u32 },
    #[error("{path}: malformed {field} at offset {offset}: {reason}")]
    Malformed {
        path: PathBuf,
        offset: u64,
        field: String,
        reason: String,
    },
    /// A GGUF tensor whose ggml type id has no known layout; `offset` is that of the type
    /// field.
    #[error(
        "{path}: tensor {tensor:?} type at offset {offset}: unsupported ggml type id {type_id}"
    )]
    UnsupportedType {
        path: PathBuf,
        offset: u64,
        tensor: String,
        type_id: u32,
    },
    /// A safetensors tensor whose dtype string is unknown; `offset` is that of its entry in
    /// the file.
    #[error("{path}: tensor {tensor:?} dtype at offset {offset}: unsupported safetensors dtype {dtype:?}")]
    UnsupportedDtype {
        path: PathBuf,
        offset: u64,
        tensor: String,
        dtype: String,
    },
    #[error("{path}: missing metadata key {key:?}")]
    MissingKey { path: PathBuf, key: String },
    #[error("{path}: metadata key {key:?} is {found}, expected {expected}")]
    WrongType {
        path: PathBuf,
        key: String,
        expected: &'static str,
        found: &'static str,
    },
    #[error("{path}: missing tensor {name:?}")]
    MissingTensor { path: PathBuf, name: String },
}

pub type Result<T> = std::result::Result<T, Error>;
