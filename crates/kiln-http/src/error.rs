//! One error, one response: OpenAI's `{"error": {message, type, param, code}}` body with
//! the status, plus the headers a client acts on (`Retry-After`, `WWW-Authenticate`).

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use kiln_api::ErrorResponse;

/// Seconds a 429 or 503 asks the client to wait before retrying.
pub const RETRY_AFTER_SECS: u64 = 1;

/// An error a request gets back, described the way OpenAI's API describes its own.
pub trait OpenAiError: std::fmt::Display {
    fn status(&self) -> StatusCode;

    /// OpenAI's `code` field (also a stable label for logs).
    fn code(&self) -> &'static str;

    /// The request field at fault, if one is.
    fn param(&self) -> Option<String>;

    /// Whether the client should try again shortly (the response gets `Retry-After`).
    fn retry_later(&self) -> bool;

    /// Seconds the `Retry-After` header asks for, when the client should retry.
    fn retry_after_secs(&self) -> Option<u64> {
        self.retry_later().then_some(RETRY_AFTER_SECS)
    }

    /// OpenAI's `type` field, which follows from the status.
    fn kind(&self) -> &'static str {
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
            self.to_string(),
            self.kind(),
            self.param(),
            Some(self.code().into()),
        )
    }
}

/// The response for `e`, logged at `warn` for server errors and `debug` otherwise.
pub fn error_response(e: &impl OpenAiError) -> Response {
    let status = e.status();
    if status.is_server_error() {
        tracing::warn!(status = status.as_u16(), code = e.code(), "{e}");
    } else {
        tracing::debug!(status = status.as_u16(), code = e.code(), "{e}");
    }
    let mut resp = (status, Json(e.body())).into_response();
    let headers = resp.headers_mut();
    if let Some(secs) = e.retry_after_secs() {
        headers.insert(header::RETRY_AFTER, HeaderValue::from(secs));
    }
    if status == StatusCode::UNAUTHORIZED {
        headers.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    }
    resp
}
