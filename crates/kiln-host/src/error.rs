//! What hosting a model can fail with. Typed, without HTTP: the server maps each variant
//! to a status and OpenAI's error body (`kiln-server/src/error.rs`).

use crate::kind::ModelKind;

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum HostError {
    #[error("the model `{model}` does not exist; served models: {served}")]
    ModelNotFound { model: String, served: String },
    /// The model exists but does something else than the caller needs.
    #[error("model `{model}` does {task}, not {}", .wanted.task())]
    WrongModelTask {
        model: String,
        task: String,
        wanted: ModelKind,
    },
    /// A request named no model and none of the kind it needs is served.
    #[error("no {} model is served; served models: {served}", .kind.task())]
    NoModelOfKind { kind: ModelKind, served: String },
    /// `model: "base:adapter"` and `lora` name two different adapters.
    #[error("`model` names adapter `{in_model}` but `lora` names `{in_lora}`")]
    TwoAdapters { in_model: String, in_lora: String },
    #[error("the queue of model `{model}` is full ({limit} requests in flight)")]
    QueueFull { model: String, limit: usize },
    #[error("model `{model}` is busy ({running} sequences running, its maximum)")]
    Busy { model: String, running: usize },
    #[error("shutting down")]
    ShuttingDown,
    #[error("model `{model}` is still loading")]
    ModelLoading { model: String },
    #[error("model `{model}` failed to load: {reason}")]
    ModelUnavailable { model: String, reason: String },
    /// Loading the model would take more than the budget, even after unloading every
    /// idle model.
    #[error("model `{model}` needs {need} bytes; {held} of the {budget}-byte budget are held")]
    NoRoom {
        model: String,
        need: u64,
        budget: u64,
        held: u64,
    },
    #[error("model `{model}` has no adapter `{adapter}`{available}")]
    AdapterNotFound {
        model: String,
        adapter: String,
        /// What is available, e.g. `; adapters: a, b` (empty when none are configured).
        available: String,
    },
    /// The adapter's shapes are another model's.
    #[error("adapter `{adapter}` does not fit model `{model}`: {reason}")]
    AdapterMismatch {
        model: String,
        adapter: String,
        reason: String,
    },
    /// The adapter's files are unreadable, malformed or use what Kiln can't run.
    #[error("adapter `{adapter}` cannot be loaded: {reason}")]
    AdapterInvalid { adapter: String, reason: String },
    /// A sequence the engine aborted (a failed step).
    #[error("the engine aborted the request")]
    Aborted,
    /// The model's logits for the request held a NaN or an infinity.
    #[error(
        "model `{model}` produced non-finite logits (NaN or infinity) for this request; \
         its weights are likely corrupt"
    )]
    NonFiniteLogits { model: String },
    /// The engine refused the request's settings.
    #[error("{0}")]
    Invalid(String),
    #[error("{prompt} prompt tokens and {max_tokens} to generate exceed {max_model_len}")]
    ContextLength {
        prompt: usize,
        max_tokens: usize,
        max_model_len: usize,
    },
    #[error("{0}")]
    Internal(String),
}

impl From<kiln_engine::Error> for HostError {
    fn from(e: kiln_engine::Error) -> Self {
        match e {
            kiln_engine::Error::Validation(message) => HostError::Invalid(message),
            kiln_engine::Error::ContextLength {
                prompt,
                max_tokens,
                max_model_len,
            } => HostError::ContextLength {
                prompt,
                max_tokens,
                max_model_len,
            },
            kiln_engine::Error::ShuttingDown => HostError::ShuttingDown,
            other => HostError::Internal(other.to_string()),
        }
    }
}

pub type Result<T, E = HostError> = std::result::Result<T, E>;
