//! What a generation request can fail with, classified for clients: a field's 400, the
//! context length, the shutdown deadline, or hosting's typed [`HostError`] (wrapped, not
//! copied). The messages are the ones clients have always got; statuses follow from
//! each error's [`ErrorKind`].

use kiln_api::{without_paths, ClassifiedError, ErrorKind};
use kiln_host::{HostError, ModelKind};

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum GenerateError {
    /// A field has a wrong type or an out-of-range value, or fields conflict.
    #[error("{message}")]
    Invalid {
        param: Option<String>,
        message: String,
    },
    #[error(
        "this model's maximum context length is {max_model_len} tokens, but {prompt} tokens \
         were requested for the prompt and {max_tokens} for the completion \
         ({total} in all); shorten the prompt or lower max_tokens",
        total = .prompt + .max_tokens
    )]
    ContextLength {
        prompt: usize,
        max_tokens: usize,
        max_model_len: usize,
        param: String,
    },
    /// The shutdown deadline passed while the request was still running.
    #[error("the server shut down before the request finished; retry it")]
    ShutdownCut,
    #[error("{}", host_message(.0))]
    Host(HostError),
    #[error("internal error: {0}")]
    Internal(String),
}

impl GenerateError {
    pub fn invalid(param: impl Into<String>, message: impl Into<String>) -> Self {
        GenerateError::Invalid {
            param: Some(param.into()),
            message: message.into(),
        }
    }
}

impl From<HostError> for GenerateError {
    fn from(e: HostError) -> Self {
        match e {
            HostError::Invalid(message) => GenerateError::Invalid {
                param: None,
                message,
            },
            HostError::ContextLength {
                prompt,
                max_tokens,
                max_model_len,
            } => GenerateError::ContextLength {
                prompt,
                max_tokens,
                max_model_len,
                param: "max_tokens".into(),
            },
            HostError::Internal(message) => GenerateError::Internal(message),
            e @ (HostError::NoModelOfKind { .. } | HostError::TwoAdapters { .. }) => {
                let param = match e {
                    HostError::TwoAdapters { .. } => "lora",
                    _ => "model",
                };
                GenerateError::invalid(param, e.to_string())
            }
            e => GenerateError::Host(e),
        }
    }
}

impl From<kiln_engine::Error> for GenerateError {
    fn from(e: kiln_engine::Error) -> Self {
        GenerateError::from(HostError::from(e))
    }
}

pub type Result<T, E = GenerateError> = std::result::Result<T, E>;

impl ClassifiedError for GenerateError {
    fn error_kind(&self) -> ErrorKind {
        match self {
            GenerateError::Invalid { .. } | GenerateError::ContextLength { .. } => {
                ErrorKind::Invalid
            }
            GenerateError::ShutdownCut => ErrorKind::Unavailable,
            GenerateError::Internal(_) => ErrorKind::Internal,
            GenerateError::Host(h) => match h {
                HostError::ModelNotFound { .. } | HostError::AdapterNotFound { .. } => {
                    ErrorKind::NotFound
                }
                HostError::QueueFull { .. } | HostError::Busy { .. } => ErrorKind::Busy,
                HostError::ShuttingDown
                | HostError::ModelLoading { .. }
                | HostError::ModelUnavailable { .. }
                | HostError::NoRoom { .. } => ErrorKind::Unavailable,
                HostError::Aborted | HostError::NonFiniteLogits { .. } => ErrorKind::Internal,
                HostError::Internal(_) => ErrorKind::Internal,
                _ => ErrorKind::Invalid,
            },
        }
    }

    fn code(&self) -> &'static str {
        match self {
            GenerateError::Invalid { .. } => "invalid_value",
            GenerateError::ContextLength { .. } => "context_length_exceeded",
            GenerateError::ShutdownCut => "server_shutdown",
            GenerateError::Internal(_) => "internal_error",
            GenerateError::Host(h) => match h {
                HostError::ModelNotFound { .. } => "model_not_found",
                HostError::WrongModelTask { .. } => "wrong_model_task",
                HostError::QueueFull { .. } => "queue_full",
                HostError::Busy { .. } => "model_busy",
                HostError::ShuttingDown => "shutting_down",
                HostError::ModelLoading { .. } => "model_loading",
                HostError::ModelUnavailable { .. } => "model_unavailable",
                HostError::NoRoom { .. } => "model_memory_exhausted",
                HostError::AdapterNotFound { .. } => "adapter_not_found",
                HostError::AdapterMismatch { .. } => "adapter_mismatch",
                HostError::AdapterInvalid { .. } => "adapter_invalid",
                HostError::Aborted => "aborted",
                HostError::NonFiniteLogits { .. } => "non_finite_logits",
                HostError::Invalid(_) => "invalid_value",
                HostError::ContextLength { .. } => "context_length_exceeded",
                _ => "internal_error",
            },
        }
    }

    fn param(&self) -> Option<String> {
        match self {
            GenerateError::Invalid { param, .. } => param.clone(),
            GenerateError::ContextLength { param, .. } => Some(param.clone()),
            GenerateError::Host(
                HostError::ModelNotFound { .. }
                | HostError::WrongModelTask { .. }
                | HostError::ModelLoading { .. }
                | HostError::ModelUnavailable { .. }
                | HostError::NoRoom { .. }
                | HostError::AdapterNotFound { .. }
                | HostError::AdapterMismatch { .. }
                | HostError::AdapterInvalid { .. },
            ) => Some("model".into()),
            _ => None,
        }
    }

    fn retry_later(&self) -> bool {
        matches!(
            self,
            GenerateError::Host(
                HostError::QueueFull { .. }
                    | HostError::Busy { .. }
                    | HostError::ModelLoading { .. }
                    | HostError::NoRoom { .. }
            )
        )
    }
}

/// What a client is told of a hosting failure (its own wording is for logs).
fn host_message(e: &HostError) -> String {
    match e {
        HostError::WrongModelTask {
            model,
            task,
            wanted,
        } => {
            let endpoints = ModelKind::from_task(task).map_or_else(
                || "nothing: the server can't run this task".to_string(),
                |k| endpoints(k, model),
            );
            format!(
                "model `{model}` is {} {task} model, not {} {} model; use {endpoints}",
                article(task),
                article(wanted.task()),
                wanted.task()
            )
        }
        HostError::QueueFull { model, limit } => format!(
            "the queue of model `{model}` is full ({limit} requests in flight); retry later"
        ),
        HostError::Busy { model, running } => format!(
            "model `{model}` is busy ({running} sequences running, its maximum) and the request \
             asked not to queue (reject_if_busy)"
        ),
        HostError::ShuttingDown => "the server is shutting down".into(),
        HostError::ModelLoading { model } => {
            format!("model `{model}` is still loading; retry later")
        }
        HostError::ModelUnavailable { model, reason } => {
            format!("model `{model}` failed to load: {}", without_paths(reason))
        }
        HostError::NoRoom {
            model,
            need,
            budget,
            held,
        } => format!(
            "model `{model}` needs {:.1} MiB but only {:.1} MiB of the {:.1} MiB model memory \
             budget (--models-memory) can be freed: the rest is held by pinned models and \
             models with requests in flight; retry later or raise the budget",
            mib(*need),
            mib(budget.saturating_sub(*held)),
            mib(*budget)
        ),
        HostError::Internal(message) => format!("internal error: {message}"),
        other => other.to_string(),
    }
}

/// The endpoints that serve model `model` of kind `kind`, for error messages.
pub fn endpoints(kind: ModelKind, model: &str) -> String {
    use kiln_api::endpoints::{serving, ModelKind as Serves};
    // The endpoint table says which routes take a model of each kind by name.
    let kind = match kind {
        ModelKind::Generate => Serves::Generate,
        ModelKind::Embed => Serves::Embed,
        ModelKind::Classify => Serves::Classify,
    };
    serving(kind, model)
}

/// `a` or `an` before a task name.
fn article(word: &str) -> &'static str {
    match word.chars().next() {
        Some('a' | 'e' | 'i' | 'o' | 'u') => "an",
        _ => "a",
    }
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / f64::from(1u32 << 20)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn context_length_message_names_both_numbers() {
        let e = GenerateError::ContextLength {
            prompt: 30,
            max_tokens: 8192,
            max_model_len: 8192,
            param: "max_tokens".into(),
        };
        let m = e.safe_message();
        assert!(m.contains("30 tokens") && m.contains("8192 for the completion"));
        assert_eq!(e.param().as_deref(), Some("max_tokens"));
        assert_eq!(e.error_kind(), ErrorKind::Invalid);
    }

    #[test]
    fn a_wrong_model_task_names_the_right_endpoints() {
        let e = GenerateError::from(ModelKind::mismatch(
            ModelKind::Generate,
            "minilm",
            "embeddings",
        ));
        let msg = e.to_string();
        assert!(
            msg.contains("`minilm` is an embeddings model")
                && msg.contains("use POST /v1/embeddings or POST /ai/run/minilm"),
            "{msg}"
        );
        assert_eq!(e.error_kind(), ErrorKind::Invalid);
        assert_eq!(e.param().as_deref(), Some("model"));
        let e = GenerateError::from(ModelKind::mismatch(
            ModelKind::Embed,
            "smol",
            "text-generation",
        ));
        assert!(e.to_string().contains("`smol` is a text-generation model"));
    }
}
