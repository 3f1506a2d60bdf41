//! One error, one response: any [`ClassifiedError`] becomes OpenAI's
//! `{"error": {message, type, param, code}}` body with the status of its [`ErrorKind`],
//! plus the headers a client acts on (`Retry-After`, `WWW-Authenticate`). The server's
//! and the router's errors both go through here.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use kiln_api::ErrorResponse;
pub use kiln_api::{ClassifiedError, ErrorKind};

/// Seconds a 429 or 503 asks the client to wait before retrying.
pub const RETRY_AFTER_SECS: u64 = 1;

/// The status of an error of kind `kind`.
pub fn status_of(kind: ErrorKind) -> StatusCode {
    match kind {
        ErrorKind::Invalid => StatusCode::BAD_REQUEST,
        ErrorKind::Unauthorized => StatusCode::UNAUTHORIZED,
        ErrorKind::Forbidden => StatusCode::FORBIDDEN,
        ErrorKind::NotFound => StatusCode::NOT_FOUND,
        ErrorKind::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
        ErrorKind::Timeout => StatusCode::REQUEST_TIMEOUT,
        ErrorKind::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
        ErrorKind::UnsupportedMedia => StatusCode::UNSUPPORTED_MEDIA_TYPE,
        ErrorKind::Limited | ErrorKind::Busy => StatusCode::TOO_MANY_REQUESTS,
        ErrorKind::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        ErrorKind::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        ErrorKind::Upstream => StatusCode::BAD_GATEWAY,
    }
}

/// How a [`ClassifiedError`] is described the way OpenAI's API describes its own.
pub trait OpenAiError: ClassifiedError {
    fn status(&self) -> StatusCode {
        status_of(self.error_kind())
    }

    /// Seconds the `Retry-After` header asks for, when the client should retry.
    fn retry_after(&self) -> Option<u64> {
        match self.retry_after_secs() {
            Some(secs) => Some(secs.max(1)),
            None => self.retry_later().then_some(RETRY_AFTER_SECS),
        }
    }

    /// OpenAI's `type` field, which follows from the status.
    fn openai_type(&self) -> &'static str {
        match self.status() {
            StatusCode::UNAUTHORIZED => "authentication_error",
            StatusCode::FORBIDDEN => "permission_error",
            StatusCode::NOT_FOUND => "not_found_error",
            StatusCode::TOO_MANY_REQUESTS => "rate_limit_error",
            s if s.is_server_error() => "server_error",
            _ => "invalid_request_error",
        }
    }

    /// The JSON body, also sent as an SSE `data:` event when a stream fails midway.
    fn body(&self) -> ErrorResponse {
        ErrorResponse::new(
            self.safe_message(),
            self.openai_type(),
            self.param(),
            Some(self.code().into()),
        )
    }
}

impl<T: ClassifiedError + ?Sized> OpenAiError for T {}

/// The response for `e`, logged at `warn` for server errors and `debug` otherwise.
pub fn error_response(e: &impl ClassifiedError) -> Response {
    let status = e.status();
    if status.is_server_error() {
        tracing::warn!(status = status.as_u16(), code = e.code(), "{e}");
    } else {
        tracing::debug!(status = status.as_u16(), code = e.code(), "{e}");
    }
    let mut resp = (status, Json(e.body())).into_response();
    let headers = resp.headers_mut();
    if let Some(secs) = e.retry_after() {
        headers.insert(header::RETRY_AFTER, HeaderValue::from(secs));
    }
    if status == StatusCode::UNAUTHORIZED {
        headers.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    }
    resp
}
