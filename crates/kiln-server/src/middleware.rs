//! Per-request plumbing: an id and a tracing span for every request, the `x-kiln-warm`,
//! `x-kiln-cold-start`, `x-kiln-neurons` and `x-kiln-colo` headers, panics turned into 500s, the shutdown gate, and OpenAI-shaped 404/405
//! fallbacks (the public app's after auth: 401 before 404).

use kiln_http::TransportError;
use std::panic::AssertUnwindSafe;
use std::time::Instant;

use axum::extract::{Request, State};
use axum::http::HeaderValue;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use futures_util::FutureExt;
use tracing::Instrument;

use crate::lease::WARM_HEADER;
use crate::state::AppState;
use kiln_api::observe::{
    COLD_START_HEADER, COLO_HEADER, NEURONS_COMMENT, NEURONS_HEADER, STREAM_NEURONS_HEADER,
};
use kiln_generate::Warmth;

/// The server's id of one request (32 hex digits); also the suffix of completion ids
/// and the `x-request-id` response header.
#[derive(Debug, Clone)]
pub struct RequestId(pub String);

impl RequestId {
    pub fn random() -> Self {
        Self(format!("{:032x}", rand::random::<u128>()))
    }
}

/// Gives each request an id and a span, logs its status, turns a panic in a handler into
/// a 500 for that request alone, and, once a handler has taken its model, says in
/// `x-kiln-warm` whether the model was loaded when the request arrived.
pub async fn request_context(mut req: Request, next: Next) -> Response {
    let RequestId(id) = RequestId::random();
    req.extensions_mut().insert(RequestId(id.clone()));
    let warmth = Warmth::default();
    req.extensions_mut().insert(warmth.clone());
    let stream_neurons = req.headers().contains_key(STREAM_NEURONS_HEADER);
    let span =
        tracing::info_span!("request", id = %id, method = %req.method(), path = %req.uri().path());
    let start = Instant::now();
    let mut resp = AssertUnwindSafe(next.run(req))
        .catch_unwind()
        .instrument(span.clone())
        .await
        .unwrap_or_else(|_| {
            TransportError::Internal("the request handler panicked".into()).into_response()
        });
    span.in_scope(|| {
        tracing::info!(
            status = resp.status().as_u16(),
            elapsed_ms = start.elapsed().as_millis() as u64,
            "response"
        );
    });
    if let Ok(v) = HeaderValue::from_str(&id) {
        resp.headers_mut().insert("x-request-id", v);
    }
    if let Some(warm) = warmth.get() {
        let v = HeaderValue::from_static(if warm { "true" } else { "false" });
        resp.headers_mut().insert(WARM_HEADER, v);
    }
    if let Some(waited) = warmth.load_wait() {
        resp.headers_mut().insert(
            COLD_START_HEADER,
            HeaderValue::from(waited.as_millis() as u64),
        );
    }
    // Known by now only for a response read whole; a stream's usage comes later, so
    // it ends with them in a comment when the router asks.
    if let Some(n) = warmth.neurons() {
        if let Ok(v) = HeaderValue::from_str(&format!("{n:.6}")) {
            resp.headers_mut().insert(NEURONS_HEADER, v);
        }
    } else if stream_neurons && kiln_http::is_event_stream(resp.headers()) {
        return with_neurons_comment(resp, warmth);
    }
    resp
}

/// `resp`'s stream, then `: x-kiln-neurons N` once it has ended and its usage was
/// metered (nothing when it used no model).
fn with_neurons_comment(resp: Response, warmth: Warmth) -> Response {
    use futures_util::StreamExt;
    let (parts, body) = resp.into_parts();
    let tail = futures_util::stream::once(async move {
        warmth.neurons().map(|n| {
            Ok(axum::body::Bytes::from(format!(
                "{NEURONS_COMMENT}{n:.6}\n\n"
            )))
        })
    })
    .filter_map(std::future::ready);
    let body = body.into_data_stream().chain(tail);
    Response::from_parts(parts, axum::body::Body::from_stream(body))
}

/// Names the node's colo (`--colo`) on every response, for the router's events.
pub async fn colo_header(colo: Option<HeaderValue>, req: Request, next: Next) -> Response {
    let mut resp = next.run(req).await;
    if let Some(v) = colo {
        resp.headers_mut().insert(COLO_HEADER, v);
    }
    resp
}

/// Once shutdown has begun, API requests get 503 (in-flight ones carry on).
pub async fn shutdown_gate(State(state): State<AppState>, req: Request, next: Next) -> Response {
    if state.is_shutting_down() {
        return TransportError::ShuttingDown.into_response();
    }
    next.run(req).await
}

/// The public app's 404: a 401 first for a caller without a key (see
/// [`crate::auth::refuse_unmatched`]).
pub async fn not_found_after_auth(State(state): State<AppState>, req: Request) -> Response {
    match crate::auth::refuse_unmatched(&state, &req) {
        Some(refused) => refused.into_response(),
        None => kiln_http::route_not_found(req).await,
    }
}

/// The public app's 405, after the same check as [`not_found_after_auth`].
pub async fn method_not_allowed_after_auth(
    State(state): State<AppState>,
    req: Request,
) -> Response {
    match crate::auth::refuse_unmatched(&state, &req) {
        Some(refused) => refused.into_response(),
        None => kiln_http::method_not_allowed(req).await,
    }
}
