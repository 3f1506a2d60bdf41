//! The response cache on chat, completions and embeddings: a deterministic request
//! (temperature 0 or a seed; embeddings always) that is not streamed is answered from
//! memory when the same caller sent the same body before (`x-kiln-cache: hit`), and its
//! answer is kept otherwise (`miss`). A hit runs no model, so it is not metered.

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::header::CONTENT_TYPE;
use axum::http::{HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use kiln_api::endpoints::{find_named, ModelKind};
use kiln_guard::{deterministic, request_key, Cached};
use kiln_http::TransportError;
use serde_json::Value;

use crate::lease::caller_of;
use crate::state::AppState;

pub const CACHE_HEADER: &str = "x-kiln-cache";

/// Largest answer read back to be kept.
const MAX_ANSWER: usize = 64 << 20;

pub async fn serve_cached(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let path = req.uri().path().to_string();
    let endpoint = find_named(req.method().as_str(), &path).filter(|e| e.cacheable);
    let Some((cache, endpoint)) = state.gates().cache.as_ref().zip(endpoint) else {
        return next.run(req).await;
    };
    let caller = caller_of(req.extensions());
    let (req, bytes) = match super::buffered(&state, req).await {
        Ok(b) => b,
        Err(too_large) => return too_large,
    };
    let json: Option<Value> = serde_json::from_slice(&bytes).ok();
    let Some(json) = json else {
        return next.run(req).await;
    };
    let streamed = json.get("stream").and_then(Value::as_bool) == Some(true);
    let cacheable = !streamed
        && json.get("cache") != Some(&Value::Bool(false))
        // An embedding is the same every time; generation only when it is deterministic.
        && (endpoint.serves == [ModelKind::Embed] || deterministic(&json));
    if !cacheable {
        return next.run(req).await;
    }
    let key = request_key(&[&caller.key_id, &path], &json);
    if let Some(hit) = cache.get(&key) {
        let mut resp = (StatusCode::OK, hit.body).into_response();
        if let Ok(ct) = HeaderValue::from_str(&hit.content_type) {
            resp.headers_mut().insert(CONTENT_TYPE, ct);
        }
        resp.headers_mut()
            .insert(CACHE_HEADER, HeaderValue::from_static("hit"));
        return resp;
    }
    let resp = next.run(req).await;
    if resp.status() != StatusCode::OK {
        return resp;
    }
    let (mut parts, body) = resp.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, MAX_ANSWER).await else {
        return TransportError::Internal(
            "the answer was too large to pass through the cache".into(),
        )
        .into_response();
    };
    let content_type = parts
        .headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("application/json")
        .to_string();
    cache.put(
        key,
        Cached {
            body: bytes.to_vec(),
            content_type,
        },
    );
    parts
        .headers
        .insert(CACHE_HEADER, HeaderValue::from_static("miss"));
    Response::from_parts(parts, Body::from(bytes))
}
