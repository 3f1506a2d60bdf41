/// Why an adapter could not be loaded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LoraError {
    /// No adapter at the path (no `adapter_config.json`).
    #[error("no adapter at {0} (it has no adapter_config.json)")]
    NotFound(String),
    #[error("cannot read {path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("invalid adapter config: {0}")]
    Config(String),
    #[error("unsupported adapter: {0}")]
    Unsupported(String),
    /// The weights file is unreadable or not what PEFT writes.
    #[error("invalid adapter weights: {0}")]
    Weights(String),
    /// The adapter's shapes are not the base model's: it was made for another model.
    #[error("the adapter does not fit this model: {0}")]
    WrongBase(String),
}
