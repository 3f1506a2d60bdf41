//! Errors: [`ApiError`] for what a request gets back (status + OpenAI's JSON body), and
//! [`Error`] for what stops the server from starting.
//!
//! `ApiError` holds the request-level failures the server finds itself (the body, auth,
//! routing, limits, the gates) and wraps the services' errors as they are. Each says
//! its [`ErrorKind`], `code`, `param` and safe message through [`ClassifiedError`], and
//! `kiln-http` turns any of them into the response, so no variant is copied here.

use std::net::SocketAddr;

use axum::response::{IntoResponse, Response};
use kiln_generate::GenerateError;
use kiln_host::HostError;
use kiln_http::{ClassifiedError, ErrorKind};

/// Everything a request can fail with.
#[derive(Debug, thiserror::Error)]
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
    #[error("no route for {method} {path}")]
    RouteNotFound { method: String, path: String },
    #[error("method {method} is not allowed on {path}")]
    MethodNotAllowed { method: String, path: String },
    #[error("{0}")]
    Unauthorized(String),
    #[error("{0}")]
    Forbidden(String),
    #[error("the request body is over the limit of {limit} bytes")]
    PayloadTooLarge { limit: usize },
    #[error("the request body did not arrive within {limit_s} s")]
    BodyTimeout { limit_s: u64 },
    #[error("unsupported Content-Type `{0}`: send JSON with `Content-Type: application/json`")]
    UnsupportedMediaType(String),
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
    #[error("the server is shutting down")]
    ShuttingDown,
    /// A stored object this caller has none of.
    #[error("{message}")]
    NotFound {
        message: String,
        param: Option<String>,
    },
    /// A state database is unreadable, corrupt or locked, or not set up.
    #[error("{0}")]
    StoreUnavailable(String),
    #[error("internal error: {0}")]
    Internal(String),
    #[error("{}", .0.safe_message())]
    Generate(#[from] GenerateError),
    #[error("{}", .0.safe_message())]
    Responses(#[from] kiln_responses::ResponsesError),
    #[error("{}", .0.safe_message())]
    Agents(#[from] kiln_agents::AgentError),
    #[error("{}", .0.safe_message())]
    Batches(#[from] kiln_batch::BatchError),
    #[error("{}", .0.safe_message())]
    Files(#[from] kiln_files::FileError),
    #[error("{}", .0.safe_message())]
    Vectors(#[from] kiln_vectors::VectorError),
    #[error("{}", .0.safe_message())]
    Rag(#[from] kiln_rag::RagError),
}

impl ApiError {
    pub fn invalid(param: impl Into<String>, message: impl Into<String>) -> Self {
        ApiError::InvalidRequest {
            param: Some(param.into()),
            message: message.into(),
        }
    }

    /// The service error this wraps, if it wraps one.
    fn wrapped(&self) -> Option<&dyn ClassifiedError> {
        match self {
            ApiError::Generate(e) => Some(e),
            ApiError::Responses(e) => Some(e),
            ApiError::Agents(e) => Some(e),
            ApiError::Batches(e) => Some(e),
            ApiError::Files(e) => Some(e),
            ApiError::Vectors(e) => Some(e),
            ApiError::Rag(e) => Some(e),
            _ => None,
        }
    }
}

impl From<HostError> for ApiError {
    fn from(e: HostError) -> Self {
        ApiError::Generate(e.into())
    }
}

impl ClassifiedError for ApiError {
    fn error_kind(&self) -> ErrorKind {
        if let Some(e) = self.wrapped() {
            return e.error_kind();
        }
        match self {
            ApiError::InvalidJson { .. } | ApiError::InvalidRequest { .. } => ErrorKind::Invalid,
            ApiError::RouteNotFound { .. } | ApiError::NotFound { .. } => ErrorKind::NotFound,
            ApiError::MethodNotAllowed { .. } => ErrorKind::MethodNotAllowed,
            ApiError::Unauthorized(_) => ErrorKind::Unauthorized,
            ApiError::Forbidden(_) | ApiError::PromptBlocked(_) => ErrorKind::Forbidden,
            ApiError::PayloadTooLarge { .. } => ErrorKind::TooLarge,
            ApiError::BodyTimeout { .. } => ErrorKind::Timeout,
            ApiError::UnsupportedMediaType(_) => ErrorKind::UnsupportedMedia,
            ApiError::RateLimited { .. } | ApiError::QuotaExceeded { .. } => ErrorKind::Limited,
            ApiError::ShuttingDown | ApiError::StoreUnavailable(_) => ErrorKind::Unavailable,
            _ => ErrorKind::Internal,
        }
    }

    fn code(&self) -> &str {
        if let Some(e) = self.wrapped() {
            return e.code();
        }
        match self {
            ApiError::InvalidJson { .. } => "invalid_json",
            ApiError::InvalidRequest { .. } => "invalid_value",
            ApiError::RouteNotFound { .. } | ApiError::NotFound { .. } => "not_found",
            ApiError::MethodNotAllowed { .. } => "method_not_allowed",
            ApiError::Unauthorized(_) => "invalid_api_key",
            ApiError::Forbidden(_) => "forbidden",
            ApiError::PayloadTooLarge { .. } => "request_too_large",
            ApiError::BodyTimeout { .. } => "request_timeout",
            ApiError::UnsupportedMediaType(_) => "unsupported_media_type",
            ApiError::RateLimited { .. } => "rate_limit_exceeded",
            ApiError::QuotaExceeded { .. } => "insufficient_quota",
            ApiError::PromptBlocked(_) => "prompt_blocked",
            ApiError::ShuttingDown => "shutting_down",
            ApiError::StoreUnavailable(_) => "store_unavailable",
            _ => "internal_error",
        }
    }

    fn param(&self) -> Option<String> {
        if let Some(e) = self.wrapped() {
            return e.param();
        }
        match self {
            ApiError::InvalidRequest { param, .. } | ApiError::NotFound { param, .. } => {
                param.clone()
            }
            _ => None,
        }
    }

    fn safe_message(&self) -> String {
        match self.wrapped() {
            Some(e) => e.safe_message(),
            None => self.to_string(),
        }
    }

    fn retry_later(&self) -> bool {
        match self.wrapped() {
            Some(e) => e.retry_later(),
            None => matches!(self.error_kind(), ErrorKind::Limited),
        }
    }

    fn retry_after_secs(&self) -> Option<u64> {
        match self {
            ApiError::RateLimited {
                retry_after_secs, ..
            }
            | ApiError::QuotaExceeded {
                retry_after_secs, ..
            } => Some(*retry_after_secs),
            _ => None,
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        kiln_http::error_response(&self)
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

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::{header, StatusCode};
    use kiln_http::OpenAiError;

    #[test]
    fn busy_and_full_are_429_with_retry_after() {
        for e in [
            HostError::QueueFull {
                model: "m".into(),
                limit: 1,
            },
            HostError::Busy {
                model: "m".into(),
                running: 1,
            },
        ] {
            let r = ApiError::from(e).into_response();
            assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
            assert!(r.headers().contains_key(header::RETRY_AFTER));
        }
    }

    #[test]
    fn wrapped_errors_answer_as_their_service_classifies_them() {
        let e = ApiError::from(HostError::ModelLoading { model: "m".into() });
        assert_eq!(e.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(e.code(), "model_loading");
        assert_eq!(e.param().as_deref(), Some("model"));
        assert_eq!(e.retry_after(), Some(kiln_http::RETRY_AFTER_SECS));
        let e = ApiError::from(kiln_files::FileError::TooLarge { limit: 10 });
        assert_eq!(e.status(), StatusCode::PAYLOAD_TOO_LARGE);
        assert_eq!(
            e.body().error.message,
            "the request body is over the limit of 10 bytes"
        );
    }
}
