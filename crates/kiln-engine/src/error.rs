/// Errors the engine reports to its callers.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    #[error("{0}")]
    Validation(String),
    #[error(
        "this model's maximum context length is {max_model_len} tokens, but the prompt has \
         {prompt} tokens and max_tokens asks for {max_tokens} more"
    )]
    ContextLength {
        prompt: usize,
        max_tokens: usize,
        max_model_len: usize,
    },
    #[error("the engine is shutting down")]
    ShuttingDown,
    #[error("invalid engine config: {0}")]
    Config(String),
    #[error(transparent)]
    Model(#[from] kiln_model::Error),
}

pub type Result<T> = std::result::Result<T, Error>;
