//! Errors: [`Error`] for what keeps the router from starting, and [`ApiError`] for what
//! a request gets back when the router itself answers (OpenAI's JSON error body, the
//! same statuses and codes a `kiln serve` node uses, so clients cannot tell the two
//! apart).

use std::net::SocketAddr;
use std::path::PathBuf;

use axum::response::{IntoResponse, Response};
use kiln_http::{ClassifiedError, ErrorKind, TransportError};

/// What keeps the router from starting.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    #[error("invalid node {spec:?}: {reason}")]
    NodeSpec { spec: String, reason: String },
    #[error("invalid DNS name {spec:?}: {reason}")]
    DnsSpec { spec: String, reason: String },
    #[error("cannot read router config {path}: {source}")]
    ConfigRead {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("invalid router config {path}: {message}")]
    ConfigParse { path: PathBuf, message: String },
    #[error("invalid setting `{name}`: {reason}")]
    Setting { name: String, reason: String },
    /// A routing rule (`#N \`name\``, 1-based) or the table as a whole.
    #[error("invalid routing rule {rule}: {reason}")]
    Rule { rule: String, reason: String },
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("server error: {0}")]
    Serve(#[source] std::io::Error),
    #[error("cannot build the HTTP client: {0}")]
    Client(#[source] reqwest::Error),
    #[error(transparent)]
    Observe(#[from] kiln_observe::ObserveError),
}

pub type Result<T> = std::result::Result<T, Error>;

/// An error response the router makes itself (a node's own errors pass through as the
/// node sent them).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ApiError {
    #[error("the model `{model}` does not exist; served models: {served}")]
    ModelNotFound { model: String, served: String },
    #[error("cannot read the request body: {0}")]
    BadBody(String),
    #[error("every node serving model `{model}` is busy; retry later")]
    AllBusy { model: String },
    #[error("no node can serve model `{model}` now: {detail}")]
    NoNode { model: String, detail: String },
    /// The one node that keeps some state (an agent, stored responses) can't answer.
    #[error("{what} lives on node {node}, which is unavailable: {detail}")]
    OwnerDown {
        what: String,
        node: String,
        detail: String,
    },
    #[error("the fallback upstream failed: {0}")]
    Upstream(String),
    /// The exchange itself failed (route, key, body, rate limit, shutdown).
    #[error(transparent)]
    Transport(#[from] TransportError),
    /// A query parameter out of its documented range.
    #[error("{message}")]
    BadRequest {
        param: &'static str,
        message: String,
    },
}

impl ClassifiedError for ApiError {
    fn error_kind(&self) -> ErrorKind {
        match self {
            ApiError::Transport(e) => e.error_kind(),
            ApiError::ModelNotFound { .. } => ErrorKind::NotFound,
            ApiError::BadBody(_) => ErrorKind::Invalid,
            ApiError::AllBusy { .. } => ErrorKind::Busy,
            ApiError::NoNode { .. } | ApiError::OwnerDown { .. } => ErrorKind::Unavailable,
            ApiError::Upstream(_) => ErrorKind::Upstream,
            ApiError::BadRequest { .. } => ErrorKind::Invalid,
        }
    }

    fn code(&self) -> &str {
        match self {
            ApiError::Transport(e) => e.code(),
            ApiError::ModelNotFound { .. } => "model_not_found",
            ApiError::BadBody(_) => "invalid_body",
            ApiError::AllBusy { .. } => "nodes_busy",
            ApiError::NoNode { .. } => "no_node_available",
            ApiError::OwnerDown { .. } => "owner_node_unavailable",
            ApiError::Upstream(_) => "upstream_failed",
            ApiError::BadRequest { .. } => "invalid_value",
        }
    }

    fn param(&self) -> Option<String> {
        match self {
            ApiError::ModelNotFound { .. } | ApiError::NoNode { .. } => Some("model".into()),
            ApiError::BadRequest { param, .. } => Some((*param).into()),
            _ => None,
        }
    }

    /// A node may free up or come back: every 429 and 503 the router makes says so.
    fn retry_later(&self) -> bool {
        matches!(
            self.error_kind(),
            ErrorKind::Busy | ErrorKind::Limited | ErrorKind::Unavailable
        )
    }

    fn retry_after_secs(&self) -> Option<u64> {
        match self {
            ApiError::Transport(e) => e.retry_after_secs(),
            _ => None,
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        kiln_http::error_response(&self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::StatusCode;
    use kiln_http::OpenAiError;

    #[test]
    fn busy_is_a_rate_limit_error_with_retry_after() {
        use axum::http::header;
        let r = ApiError::AllBusy { model: "m".into() }.into_response();
        assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
        assert!(r.headers().contains_key(header::RETRY_AFTER));
    }

    #[test]
    fn model_not_found_names_the_field() {
        let e = ApiError::ModelNotFound {
            model: "x".into(),
            served: "a, b".into(),
        };
        let body = e.body().error;
        assert_eq!(body.param.as_deref(), Some("model"));
        assert_eq!(body.kind, "not_found_error");
        assert_eq!(body.code.as_deref(), Some("model_not_found"));
    }
}
