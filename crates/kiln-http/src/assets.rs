//! Static files compiled into a binary (the node's and the router's dashboards): each
//! served with its content type, from memory.

use axum::http::header;
use axum::response::{IntoResponse, Response};

pub const HTML: &str = "text/html; charset=utf-8";
pub const JAVASCRIPT: &str = "text/javascript; charset=utf-8";
pub const CSS: &str = "text/css; charset=utf-8";

/// `body` as a response of content type `ty`.
pub fn asset(ty: &'static str, body: &'static str) -> Response {
    ([(header::CONTENT_TYPE, ty)], body).into_response()
}
