//! Errors: [`ApiError`] for what a request gets back (status + OpenAI's JSON body), and
//! [`Error`] for what stops the server from starting.

use std::net::SocketAddr;

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use kiln_host::{HostError, ModelKind};
use kiln_http::OpenAiError;

/// Everything a request can fail with; [`IntoResponse`] is the one place statuses live.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ApiError {
    /// The body is not JSON, or not the JSON the endpoint takes at its top level.
    #[error("{message}")]
    InvalidJson { message: String },
    /// A field has a wrong type or an out-of-range value, or fields conflict.
    #[error("{message}")]
    InvalidRequest {
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
    #[error("the model `{model}` does not exist; served models: {served}")]
    ModelNotFound { model: String, served: String },
    /// The model exists but does something else than the endpoint needs.
    #[error(
        "model `{model}` is {article} {task} model, not {wanted_article} {wanted} model; use {endpoints}",
        article = article(.task),
        wanted_article = article(.wanted)
    )]
    WrongModelTask {
        model: String,
        task: String,
        wanted: &'static str,
        endpoints: String,
    },
    #[error("no route for {method} {path}")]
    RouteNotFound { method: String, path: String },
    #[error("method {method} is not allowed on {path}")]
    MethodNotAllowed { method: String, path: String },
    #[error("{0}")]
    Unauthorized(String),
    #[error("the request body is over the limit of {limit} bytes")]
    PayloadTooLarge { limit: usize },
    #[error("the request body did not arrive within {limit_s} s")]
    BodyTimeout { limit_s: u64 },
    #[error("unsupported Content-Type `{0}`: send JSON with `Content-Type: application/json`")]
    UnsupportedMediaType(String),
    #[error("the queue of model `{model}` is full ({limit} requests in flight); retry later")]
    QueueFull { model: String, limit: usize },
    /// Over the key's requests or tokens per minute.
    #[error("{message}")]
    RateLimited {
        message: String,
        retry_after_secs: u64,
    },
    /// Over the key's daily neuron quota.
    #[error("{message}")]
    QuotaExceeded {
        message: String,
        retry_after_secs: u64,
    },
    /// Refused by the prompt firewall (the policy's message).
    #[error("{0}")]
    PromptBlocked(String),
    #[error(
        "model `{model}` is busy ({running} sequences running, its maximum) and the request \
         asked not to queue (reject_if_busy)"
    )]
    Busy { model: String, running: usize },
    #[error("the server is shutting down")]
    ShuttingDown,
    /// The shutdown deadline passed while the request was still running.
    #[error("the server shut down before the request finished; retry it")]
    ShutdownCut,
    #[error("model `{model}` is still loading; retry later")]
    ModelLoading { model: String },
    #[error("model `{model}` failed to load: {reason}")]
    ModelUnavailable { model: String, reason: String },
    #[error(
        "model `{model}` needs {need_mib:.1} MiB but only {free_mib:.1} MiB of the {budget_mib:.1} \
         MiB model memory budget (--models-memory) can be freed: the rest is held by pinned \
         models and models with requests in flight; retry later or raise the budget",
        need_mib = mib(*.need),
        free_mib = mib(.budget.saturating_sub(*.held)),
        budget_mib = mib(*.budget)
    )]
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
    #[error("{0}")]
    Forbidden(String),
    #[error("the engine aborted the request")]
    Aborted,
    /// The model's output was not finite numbers (corrupt weights).
    #[error("{0}")]
    NonFiniteOutput(String),
    /// A stored object (a response) this caller has none of.
    #[error("{message}")]
    NotFound {
        message: String,
        param: Option<String>,
    },
    /// The caller's stored data is at its cap.
    #[error("{0}")]
    StorageLimit(String),
    /// A state database is unreadable, corrupt or locked.
    #[error("{0}")]
    StoreUnavailable(String),
    #[error("internal error: {0}")]
    Internal(String),
}

impl ApiError {
    pub fn invalid(param: impl Into<String>, message: impl Into<String>) -> Self {
        ApiError::InvalidRequest {
            param: Some(param.into()),
            message: message.into(),
        }
    }
}

impl OpenAiError for ApiError {
    fn status(&self) -> StatusCode {
        match self {
            ApiError::InvalidJson { .. }
            | ApiError::InvalidRequest { .. }
            | ApiError::ContextLength { .. }
            | ApiError::WrongModelTask { .. }
            | ApiError::AdapterMismatch { .. }
            | ApiError::AdapterInvalid { .. }
            | ApiError::StorageLimit(_) => StatusCode::BAD_REQUEST,
            ApiError::ModelNotFound { .. }
            | ApiError::NotFound { .. }
            | ApiError::AdapterNotFound { .. }
            | ApiError::RouteNotFound { .. } => StatusCode::NOT_FOUND,
            ApiError::MethodNotAllowed { .. } => StatusCode::METHOD_NOT_ALLOWED,
            ApiError::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            ApiError::Forbidden(_) => StatusCode::FORBIDDEN,
            ApiError::PayloadTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::BodyTimeout { .. } => StatusCode::REQUEST_TIMEOUT,
            ApiError::UnsupportedMediaType(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ApiError::QueueFull { .. }
            | ApiError::Busy { .. }
            | ApiError::RateLimited { .. }
            | ApiError::QuotaExceeded { .. } => StatusCode::TOO_MANY_REQUESTS,
            ApiError::PromptBlocked(_) => StatusCode::FORBIDDEN,
            ApiError::ShuttingDown
            | ApiError::ShutdownCut
            | ApiError::ModelLoading { .. }
            | ApiError::ModelUnavailable { .. }
            | ApiError::NoRoom { .. }
            | ApiError::StoreUnavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::Aborted | ApiError::NonFiniteOutput(_) | ApiError::Internal(_) => {
                StatusCode::INTERNAL_SERVER_ERROR
            }
        }
    }

    fn code(&self) -> &'static str {
        match self {
            ApiError::InvalidJson { .. } => "invalid_json",
            ApiError::InvalidRequest { .. } => "invalid_value",
            ApiError::ContextLength { .. } => "context_length_exceeded",
            ApiError::ModelNotFound { .. } => "model_not_found",
            ApiError::WrongModelTask { .. } => "wrong_model_task",
            ApiError::RouteNotFound { .. } => "not_found",
            ApiError::MethodNotAllowed { .. } => "method_not_allowed",
            ApiError::Unauthorized(_) => "invalid_api_key",
            ApiError::PayloadTooLarge { .. } => "request_too_large",
            ApiError::BodyTimeout { .. } => "request_timeout",
            ApiError::UnsupportedMediaType(_) => "unsupported_media_type",
            ApiError::QueueFull { .. } => "queue_full",
            ApiError::RateLimited { .. } => "rate_limit_exceeded",
            ApiError::QuotaExceeded { .. } => "insufficient_quota",
            ApiError::PromptBlocked(_) => "prompt_blocked",
            ApiError::Busy { .. } => "model_busy",
            ApiError::ShuttingDown => "shutting_down",
            ApiError::ShutdownCut => "server_shutdown",
            ApiError::ModelLoading { .. } => "model_loading",
            ApiError::ModelUnavailable { .. } => "model_unavailable",
            ApiError::NoRoom { .. } => "model_memory_exhausted",
            ApiError::AdapterNotFound { .. } => "adapter_not_found",
            ApiError::AdapterMismatch { .. } => "adapter_mismatch",
            ApiError::AdapterInvalid { .. } => "adapter_invalid",
            ApiError::Forbidden(_) => "forbidden",
            ApiError::Aborted => "aborted",
            ApiError::NonFiniteOutput(_) => "non_finite_logits",
            ApiError::NotFound { .. } => "not_found",
            ApiError::StorageLimit(_) => "storage_limit_reached",
            ApiError::StoreUnavailable(_) => "store_unavailable",
            ApiError::Internal(_) => "internal_error",
        }
    }

    fn param(&self) -> Option<String> {
        match self {
            ApiError::InvalidRequest { param, .. } | ApiError::NotFound { param, .. } => {
                param.clone()
            }
            ApiError::ContextLength { param, .. } => Some(param.clone()),
            ApiError::ModelNotFound { .. }
            | ApiError::WrongModelTask { .. }
            | ApiError::ModelLoading { .. }
            | ApiError::ModelUnavailable { .. }
            | ApiError::NoRoom { .. }
            | ApiError::AdapterNotFound { .. }
            | ApiError::AdapterMismatch { .. }
            | ApiError::AdapterInvalid { .. } => Some("model".into()),
            _ => None,
        }
    }

    fn retry_later(&self) -> bool {
        matches!(
            self,
            ApiError::QueueFull { .. }
                | ApiError::Busy { .. }
                | ApiError::ModelLoading { .. }
                | ApiError::NoRoom { .. }
                | ApiError::RateLimited { .. }
                | ApiError::QuotaExceeded { .. }
        )
    }

    fn retry_after_secs(&self) -> Option<u64> {
        match self {
            ApiError::RateLimited {
                retry_after_secs, ..
            }
            | ApiError::QuotaExceeded {
                retry_after_secs, ..
            } => Some((*retry_after_secs).max(1)),
            e => e.retry_later().then_some(kiln_http::RETRY_AFTER_SECS),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        kiln_http::error_response(&self)
    }
}

impl From<kiln_engine::Error> for ApiError {
    fn from(e: kiln_engine::Error) -> Self {
        ApiError::from(HostError::from(e))
    }
}

impl From<kiln_db::LockError> for Error {
    fn from(e: kiln_db::LockError) -> Self {
        match e {
            kiln_db::LockError::InUse { dir } => Error::DataDirInUse { dir },
            kiln_db::LockError::Io { path, source } => Error::DataDir { path, source },
        }
    }
}

impl From<kiln_responses::ResponsesError> for ApiError {
    fn from(e: kiln_responses::ResponsesError) -> Self {
        use kiln_responses::ResponsesError as R;
        match e {
            R::Invalid { param, message } => ApiError::invalid(param, message),
            R::NotFound { ref param, .. } => ApiError::NotFound {
                param: param.clone(),
                message: e.to_string(),
            },
            R::Chain { message } => ApiError::invalid("previous_response_id", message),
            e @ R::StorageLimit { .. } => ApiError::StorageLimit(e.to_string()),
            e @ R::NotCancellable { .. } => ApiError::InvalidRequest {
                param: None,
                message: e.to_string(),
            },
            // The chat path's own error, as a chat completion would have answered.
            R::Generate(g) => match g.source.as_ref().and_then(|s| s.downcast_ref::<ApiError>()) {
                Some(api) => api.clone(),
                None => ApiError::Internal(g.message),
            },
            e @ R::Db(_) => ApiError::StoreUnavailable(without_paths(&e.to_string())),
            e => ApiError::Internal(without_paths(&e.to_string())),
        }
    }
}

impl From<kiln_batch::BatchError> for ApiError {
    fn from(e: kiln_batch::BatchError) -> Self {
        use kiln_batch::BatchError as B;
        match e {
            B::Invalid { param, message } => ApiError::invalid(param, message),
            e @ B::NotFound { .. } => ApiError::NotFound {
                message: e.to_string(),
                param: None,
            },
            e @ B::NotCancellable { .. } => ApiError::InvalidRequest {
                param: None,
                message: e.to_string(),
            },
            e @ B::TooManyActive { .. } => ApiError::StorageLimit(e.to_string()),
            B::Files(f) => ApiError::from(f),
            e @ B::Db(_) => ApiError::StoreUnavailable(without_paths(&e.to_string())),
            e => ApiError::Internal(without_paths(&e.to_string())),
        }
    }
}

impl From<kiln_files::FileError> for ApiError {
    fn from(e: kiln_files::FileError) -> Self {
        use kiln_files::FileError as F;
        match e {
            F::TooLarge { limit } => ApiError::PayloadTooLarge {
                limit: usize::try_from(limit).unwrap_or(usize::MAX),
            },
            e @ F::OwnerFull { .. } => ApiError::StorageLimit(e.to_string()),
            e @ F::InvalidName(_) => ApiError::invalid("file", e.to_string()),
            e @ (F::InvalidId(_) | F::IdTaken(_)) => ApiError::NotFound {
                message: e.to_string(),
                param: None,
            },
            e => ApiError::StoreUnavailable(without_paths(&e.to_string())),
        }
    }
}

impl From<kiln_vectors::VectorError> for ApiError {
    fn from(e: kiln_vectors::VectorError) -> Self {
        use kiln_vectors::VectorError as V;
        match e {
            V::Invalid { param, message } => ApiError::invalid(param, message),
            e @ V::NoIndex(_) => ApiError::NotFound {
                message: e.to_string(),
                param: Some("name".into()),
            },
            e @ V::NoMetadataIndex { .. } => ApiError::NotFound {
                message: e.to_string(),
                param: Some("propertyName".into()),
            },
            e @ V::IndexExists(_) => ApiError::invalid("name", e.to_string()),
            e @ V::MetadataIndexExists { .. } => ApiError::invalid("propertyName", e.to_string()),
            e => ApiError::StoreUnavailable(without_paths(&e.to_string())),
        }
    }
}

impl From<kiln_rag::RagError> for ApiError {
    fn from(e: kiln_rag::RagError) -> Self {
        use kiln_rag::{EmbedError, RagError as R};
        match e {
            R::Invalid { param, message } => ApiError::invalid(param, message),
            e @ R::NotFound { .. } => ApiError::NotFound {
                message: e.to_string(),
                param: None,
            },
            R::Embed(EmbedError::Input(message)) => ApiError::InvalidRequest {
                param: None,
                message,
            },
            R::Embed(EmbedError::Model(message)) => ApiError::Internal(without_paths(&message)),
            R::Files(f) => ApiError::from(f),
            R::Vectors(v) => ApiError::from(v),
            e @ R::Db(_) => ApiError::StoreUnavailable(without_paths(&e.to_string())),
            e => ApiError::Internal(without_paths(&e.to_string())),
        }
    }
}

impl From<kiln_agents::AgentError> for ApiError {
    fn from(e: kiln_agents::AgentError) -> Self {
        use kiln_agents::AgentError as A;
        match e {
            A::Invalid { param, message } => ApiError::invalid(param, message),
            e @ (A::NotFound { .. } | A::ScheduleNotFound { .. }) => ApiError::NotFound {
                message: e.to_string(),
                param: None,
            },
            e @ A::Unavailable { .. } => ApiError::StoreUnavailable(without_paths(&e.to_string())),
            A::Limit(message) => ApiError::StorageLimit(message),
            A::Responses(r) => ApiError::from(r),
            e => ApiError::Internal(without_paths(&e.to_string())),
        }
    }
}

impl From<HostError> for ApiError {
    fn from(e: HostError) -> Self {
        match e {
            HostError::ModelNotFound { model, served } => ApiError::ModelNotFound { model, served },
            HostError::WrongModelTask {
                model,
                task,
                wanted,
            } => {
                let endpoints = ModelKind::from_task(&task).map_or_else(
                    || "nothing: the server can't run this task".to_string(),
                    |k| endpoints(k, &model),
                );
                ApiError::WrongModelTask {
                    model,
                    task,
                    wanted: wanted.task(),
                    endpoints,
                }
            }
            e @ HostError::NoModelOfKind { .. } => ApiError::invalid("model", e.to_string()),
            e @ HostError::TwoAdapters { .. } => ApiError::invalid("lora", e.to_string()),
            HostError::QueueFull { model, limit } => ApiError::QueueFull { model, limit },
            HostError::Busy { model, running } => ApiError::Busy { model, running },
            HostError::ShuttingDown => ApiError::ShuttingDown,
            HostError::ModelLoading { model } => ApiError::ModelLoading { model },
            HostError::ModelUnavailable { model, reason } => {
                let reason = without_paths(&reason);
                ApiError::ModelUnavailable { model, reason }
            }
            HostError::NoRoom {
                model,
                need,
                budget,
                held,
            } => ApiError::NoRoom {
                model,
                need,
                budget,
                held,
            },
            HostError::AdapterNotFound {
                model,
                adapter,
                available,
            } => ApiError::AdapterNotFound {
                model,
                adapter,
                available,
            },
            HostError::AdapterMismatch {
                model,
                adapter,
                reason,
            } => ApiError::AdapterMismatch {
                model,
                adapter,
                reason,
            },
            HostError::AdapterInvalid { adapter, reason } => {
                ApiError::AdapterInvalid { adapter, reason }
            }
            HostError::Aborted => ApiError::Aborted,
            e @ HostError::NonFiniteLogits { .. } => ApiError::NonFiniteOutput(e.to_string()),
            HostError::Invalid(message) => ApiError::InvalidRequest {
                param: None,
                message,
            },
            HostError::ContextLength {
                prompt,
                max_tokens,
                max_model_len,
            } => ApiError::ContextLength {
                prompt,
                max_tokens,
                max_model_len,
                param: "max_tokens".into(),
            },
            HostError::Internal(message) => ApiError::Internal(message),
            other => ApiError::Internal(other.to_string()),
        }
    }
}

/// The endpoints that serve model `model` of kind `kind`, for error messages.
pub fn endpoints(kind: ModelKind, model: &str) -> String {
    match kind {
        ModelKind::Generate => {
            format!("POST /v1/chat/completions, POST /v1/completions or POST /ai/run/{model}")
        }
        ModelKind::Embed => format!("POST /v1/embeddings or POST /ai/run/{model}"),
        ModelKind::Classify => format!("POST /ai/run/{model}"),
    }
}

/// What keeps the server from starting or from shutting down cleanly.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("server error: {0}")]
    Serve(#[source] std::io::Error),
    #[error("cannot load pinned model `{model}`: {reason}")]
    Load { model: String, reason: String },
    #[error("usage metering: {0}")]
    Usage(#[from] kiln_usage::Error),
    #[error("response store: {0}")]
    Responses(#[from] kiln_responses::ResponsesError),
    #[error("batch store: {0}")]
    Batches(#[from] kiln_batch::BatchError),
    #[error("file store: {0}")]
    Files(#[from] kiln_files::FileError),
    #[error(transparent)]
    Vectors(#[from] kiln_vectors::VectorError),
    #[error(transparent)]
    VectorStores(#[from] kiln_rag::RagError),
    #[error("data directory {}: {source}", .path.display())]
    DataDir {
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "the data directory {} is in use by another kiln serve; give each server its own \
         --data-dir",
        .dir.display()
    )]
    DataDirInUse { dir: std::path::PathBuf },
    #[error("{0}")]
    Firewall(String),
    #[error("the shutdown deadline cut {cut} request(s) short")]
    RequestsCut { cut: usize },
    #[error(transparent)]
    Setup(#[from] kiln_host::SetupError),
}

pub type Result<T> = std::result::Result<T, Error>;

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

/// `text` with every absolute path cut to its file name: clients see which file, never
/// where the server keeps it (the full text is in the server's log).
pub fn without_paths(text: &str) -> String {
    text.split_inclusive(char::is_whitespace)
        .map(|word| {
            let start = word.find(['/', '\\']).filter(|&i| {
                let lead = &word[..i];
                lead.chars().all(|c| "\"'`([{<".contains(c)) || lead.ends_with(':')
            });
            match start {
                Some(i) if word[i + 1..].contains(['/', '\\']) => {
                    let tail = word.rsplit(['/', '\\']).next().unwrap_or_default();
                    format!("{}{tail}", &word[..i])
                }
                _ => word.to_string(),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn context_length_message_names_both_numbers() {
        let e = ApiError::ContextLength {
            prompt: 30,
            max_tokens: 8192,
            max_model_len: 8192,
            param: "max_tokens".into(),
        };
        let body = e.body().error;
        assert!(
            body.message.contains("30 tokens") && body.message.contains("8192 for the completion")
        );
        assert_eq!(body.param.as_deref(), Some("max_tokens"));
        assert_eq!(e.status(), StatusCode::BAD_REQUEST);
    }

    #[test]
    fn a_wrong_model_task_names_the_right_endpoints() {
        let e = ApiError::from(ModelKind::mismatch(
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
        assert_eq!(e.status(), StatusCode::BAD_REQUEST);
        assert_eq!(e.param().as_deref(), Some("model"));
        let e = ApiError::from(ModelKind::mismatch(
            ModelKind::Embed,
            "smol",
            "text-generation",
        ));
        assert!(e.to_string().contains("`smol` is a text-generation model"));
    }

    #[test]
    fn paths_are_cut_to_file_names() {
        assert_eq!(
            without_paths("cannot open /root/.cache/kiln/models/x.gguf: No such file"),
            "cannot open x.gguf: No such file"
        );
        assert_eq!(
            without_paths("bad tensor in \"/data/m/y.gguf\" at 12"),
            "bad tensor in \"y.gguf\" at 12"
        );
        assert_eq!(
            without_paths("ratio 1/2 and a/b stay"),
            "ratio 1/2 and a/b stay"
        );
    }

    #[test]
    fn busy_and_full_are_429_with_retry_after() {
        use axum::http::header;
        for e in [
            ApiError::QueueFull {
                model: "m".into(),
                limit: 1,
            },
            ApiError::Busy {
                model: "m".into(),
                running: 1,
            },
        ] {
            let r = e.into_response();
            assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
            assert!(r.headers().contains_key(header::RETRY_AFTER));
        }
    }
}
