/// Errors from loading a model or running a batch.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    #[error(transparent)]
    Format(#[from] kiln_formats::Error),
    #[error("unsupported architecture {0:?} (supported: llama, qwen2, gemma3)")]
    UnsupportedArchitecture(String),
    #[error("invalid model config: {0}")]
    Config(String),
    #[error("tensor {name:?} has shape {found:?}, expected {expected:?}")]
    TensorShape {
        name: String,
        expected: Vec<u64>,
        found: Vec<u64>,
    },
    #[error("tensor {name:?} has type {ty}, which the kernels can't compute with")]
    UnsupportedWeightType { name: String, ty: String },
    #[error("invalid batch: {0}")]
    InvalidBatch(String),
}

pub type Result<T> = std::result::Result<T, Error>;
