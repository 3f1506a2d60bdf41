//! Recognising a server-sent-events response, for the node's and the router's
//! middleware that treat streams apart from bodies read whole.

use axum::http::{header, HeaderMap};

/// Whether `headers` say the body is `text/event-stream`.
pub fn is_event_stream(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim_start().starts_with("text/event-stream"))
}
