//! Failures of the HTTP exchange itself: no such route, no key, a body too large or too
//! slow, a rate limit, a shutdown. A node and the router answer them the same way, so
//! both wrap this one enum (with their own service errors beside it) rather than each
//! keeping a copy that can drift.

use axum::extract::Request;
use axum::response::{IntoResponse, Response};

use crate::error::{error_response, ClassifiedError, ErrorKind};

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum TransportError {
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
    /// Over the key's requests or tokens per minute.
    #[error("{message}")]
    RateLimited {
        message: String,
        retry_after_secs: u64,
    },
    #[error("the server is shutting down")]
    ShuttingDown,
    #[error("internal error: {0}")]
    Internal(String),
}

impl ClassifiedError for TransportError {
    fn error_kind(&self) -> ErrorKind {
        match self {
            Self::RouteNotFound { .. } => ErrorKind::NotFound,
            Self::MethodNotAllowed { .. } => ErrorKind::MethodNotAllowed,
            Self::Unauthorized(_) => ErrorKind::Unauthorized,
            Self::PayloadTooLarge { .. } => ErrorKind::TooLarge,
            Self::BodyTimeout { .. } => ErrorKind::Timeout,
            Self::RateLimited { .. } => ErrorKind::Limited,
            Self::ShuttingDown => ErrorKind::Unavailable,
            Self::Internal(_) => ErrorKind::Internal,
        }
    }

    fn code(&self) -> &str {
        match self {
            Self::RouteNotFound { .. } => "not_found",
            Self::MethodNotAllowed { .. } => "method_not_allowed",
            Self::Unauthorized(_) => "invalid_api_key",
            Self::PayloadTooLarge { .. } => "request_too_large",
            Self::BodyTimeout { .. } => "request_timeout",
            Self::RateLimited { .. } => "rate_limit_exceeded",
            Self::ShuttingDown => "shutting_down",
            Self::Internal(_) => "internal_error",
        }
    }

    /// A limit passes and another instance takes over from one shutting down.
    fn retry_later(&self) -> bool {
        matches!(self, Self::RateLimited { .. } | Self::ShuttingDown)
    }

    fn retry_after_secs(&self) -> Option<u64> {
        match self {
            Self::RateLimited {
                retry_after_secs, ..
            } => Some(*retry_after_secs),
            _ => None,
        }
    }
}

impl IntoResponse for TransportError {
    fn into_response(self) -> Response {
        error_response(&self)
    }
}

/// The fallback for a path no route serves.
pub async fn route_not_found(req: Request) -> Response {
    TransportError::RouteNotFound {
        method: req.method().to_string(),
        path: req.uri().path().to_string(),
    }
    .into_response()
}

/// The answer for a served path asked with a method it does not take.
pub async fn method_not_allowed(req: Request) -> Response {
    TransportError::MethodNotAllowed {
        method: req.method().to_string(),
        path: req.uri().path().to_string(),
    }
    .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::OpenAiError;
    use axum::http::{header, StatusCode};

    #[test]
    fn limits_and_shutdowns_ask_for_a_retry() {
        let limited = TransportError::RateLimited {
            message: "slow down".into(),
            retry_after_secs: 7,
        }
        .into_response();
        assert_eq!(limited.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(limited.headers()[header::RETRY_AFTER], "7");
        let down = TransportError::ShuttingDown.into_response();
        assert_eq!(down.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert!(down.headers().contains_key(header::RETRY_AFTER));
        let e = TransportError::Unauthorized("invalid API key".into());
        assert_eq!(e.body().error.kind, "authentication_error");
        assert_eq!(e.retry_after(), None);
    }
}
