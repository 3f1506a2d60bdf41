//! Errors: [`ApiError`] for what a request gets back (status + OpenAI's JSON body), and
//! [`Error`] for what stops the server from starting.
//!
//! `ApiError` holds the request-level failures the server finds itself (the body's
//! JSON, the gates) and wraps the exchange's (`kiln_http::TransportError`, shared with
//! the router) and the services' errors as they are. Each says
//! its [`ErrorKind`], `code`, `param` and safe message through [`ClassifiedError`], and
//! `kiln-http` turns any of them into the response, so no variant is copied here.

use axum::response::{IntoResponse, Response};
use kiln_generate::GenerateError;
use kiln_host::HostError;
use kiln_http::{ClassifiedError, ErrorKind, TransportError};

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
    #[error("{0}")]
    Forbidden(String),
    #[error("unsupported Content-Type `{0}`: send JSON with `Content-Type: application/json`")]
    UnsupportedMediaType(String),
    /// Over the key's daily neuron quota.
    #[error("{message}")]
    QuotaExceeded {
        message: String,
        retry_after_secs: u64,
    },
    /// Refused by the prompt firewall (the policy's message).
    #[error("{0}")]
    PromptBlocked(String),
    /// A stored object this caller has none of.
    #[error("{message}")]
    NotFound {
        message: String,
        param: Option<String>,
    },
    /// A state database is unreadable, corrupt or locked, or not set up.
    #[error("{0}")]
    StoreUnavailable(String),
    /// The exchange itself failed (route, key, body, rate limit, shutdown).
    #[error(transparent)]
    Transport(#[from] TransportError),
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
            ApiError::Transport(e) => Some(e),
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
            ApiError::NotFound { .. } => ErrorKind::NotFound,
            ApiError::Forbidden(_) | ApiError::PromptBlocked(_) => ErrorKind::Forbidden,
            ApiError::UnsupportedMediaType(_) => ErrorKind::UnsupportedMedia,
            ApiError::QuotaExceeded { .. } => ErrorKind::Limited,
            ApiError::StoreUnavailable(_) => ErrorKind::Unavailable,
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
            ApiError::NotFound { .. } => "not_found",
            ApiError::Forbidden(_) => "forbidden",
            ApiError::UnsupportedMediaType(_) => "unsupported_media_type",
            ApiError::QuotaExceeded { .. } => "insufficient_quota",
            ApiError::PromptBlocked(_) => "prompt_blocked",
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
            ApiError::Transport(e) => e.retry_after_secs(),
            ApiError::QuotaExceeded {
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

/// What keeps the server from starting or from shutting down cleanly.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    #[error("server error: {0}")]
    Serve(#[source] std::io::Error),
    #[error("cannot load pinned model `{model}`: {reason}")]
    Load { model: String, reason: String },
    #[error("usage metering: {0}")]
    Usage(#[from] kiln_usage::Error),
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
