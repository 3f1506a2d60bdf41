//! The router's HTTP API: the nodes' own API (so a client cannot tell the router from
//! a node), plus `GET /nodes`.
//!
//! API routes (`/v1/*`, `/ai/run/*`, `/tokenize`, `/detokenize`, `/nodes`) need an API
//! key when the router has keys; `/health`, `/ready` and `/metrics` are always open.

use std::time::Instant;

use axum::extract::{Path, Request, State};
use axum::http::header::AUTHORIZATION;
use axum::http::{header, HeaderMap, StatusCode};
use axum::middleware::{from_fn, from_fn_with_state, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get, post};
use axum::{Json, Router};
use kiln_http::body_deadline;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::affinity::session_key;
use crate::error::ApiError;
use crate::metrics::NodeGauges;
use crate::nodes::Health;
use crate::pinned;
use crate::placement::Resolved;
use crate::proxy::{self, Inbound};
use crate::state::RouterState;

/// The whole HTTP API over `state`.
pub fn app(state: RouterState) -> Router {
    let api = Router::new()
        .route("/v1/chat/completions", post(forward))
        .route("/v1/completions", post(forward))
        .route("/v1/embeddings", post(forward))
        .route("/tokenize", post(forward))
        .route("/detokenize", post(forward))
        .route("/ai/run/{*model}", post(forward_ai_run))
        .route("/v1/responses", post(forward_responses))
        .route("/v1/responses/{*rest}", any(forward_responses))
        .route("/v1/files", any(forward_files))
        .route("/v1/files/{*rest}", any(forward_files))
        .route("/v1/batches", any(forward_batches))
        .route("/v1/batches/{*rest}", any(forward_batches))
        .route("/vectorize/v2/indexes", any(forward_vectors))
        .route("/vectorize/v2/indexes/{*rest}", any(forward_vectors))
        .route("/v1/vector_stores", any(forward_vectors))
        .route("/v1/vector_stores/{*rest}", any(forward_vectors))
        .route("/v1/agents/{name}", any(forward_agent))
        .route("/v1/agents/{name}/{*rest}", any(forward_agent))
        .route("/v1/models", get(list_models))
        .route("/v1/models/{*model}", get(retrieve_model))
        .route("/nodes", get(nodes))
        .route_layer(from_fn_with_state(state.clone(), crate::limits::enforce))
        .route_layer(from_fn_with_state(state.clone(), require_api_key));
    let ops = Router::new()
        .route("/health", get(health))
        .route("/ready", get(ready))
        .route("/metrics", get(metrics));
    let (timeout, cors) = (
        state.config().limits.body_timeout,
        state.config().cors.clone(),
    );
    let app = api
        .merge(ops)
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(from_fn(move |req, next| body_deadline(timeout, req, next)))
        .with_state(state);
    cors.apply(app)
}

/// The fields routing needs; anything else (and any type) is the node's business.
#[derive(Deserialize)]
struct Peek {
    #[serde(default)]
    model: Option<Value>,
    #[serde(default)]
    user: Option<Value>,
}

async fn forward(State(state): State<RouterState>, req: Request) -> Response {
    match inbound(&state, req, None).await {
        Ok(inbound) => proxy::route(&state, inbound).await,
        Err(e) => e.into_response(),
    }
}

/// `/ai/run/{model}`: by model, or, queued (`?queueRequest=true`), to the node that
/// keeps the caller's queued requests.
async fn forward_ai_run(
    State(state): State<RouterState>,
    Path(model): Path<String>,
    req: Request,
) -> Response {
    let queued = req
        .uri()
        .query()
        .is_some_and(|q| q.split('&').any(|p| p == "queueRequest=true"));
    match inbound(&state, req, Some(model)).await {
        Ok(inbound) if queued => to_caller_node(&state, inbound, "queued requests").await,
        Ok(inbound) => proxy::route(&state, inbound).await,
        Err(e) => e.into_response(),
    }
}

/// The Responses API: to the node that keeps the caller's stored responses.
async fn forward_responses(State(state): State<RouterState>, req: Request) -> Response {
    pinned_to_caller(&state, req, "stored responses").await
}

/// The Files API: to the node that keeps the caller's files (and runs its batches).
async fn forward_files(State(state): State<RouterState>, req: Request) -> Response {
    pinned_to_caller(&state, req, "files").await
}

/// The Batch API: to the node that keeps the caller's files and batches.
async fn forward_batches(State(state): State<RouterState>, req: Request) -> Response {
    pinned_to_caller(&state, req, "batches").await
}

/// Vectorize and vector stores: to the node that keeps the caller's vector indexes
/// (a store's vectors live in that node's index, beside its files).
async fn forward_vectors(State(state): State<RouterState>, req: Request) -> Response {
    pinned_to_caller(&state, req, "vector indexes").await
}

async fn pinned_to_caller(state: &RouterState, req: Request, what: &str) -> Response {
    match inbound(state, req, None).await {
        Ok(inbound) => to_caller_node(state, inbound, what).await,
        Err(e) => e.into_response(),
    }
}

async fn to_caller_node(state: &RouterState, inbound: Inbound, what: &str) -> Response {
    let key = pinned::caller_key(&inbound);
    pinned::route(state, inbound, &key, format!("this API key's {what}")).await
}

/// An agent's requests: to the node the agent lives on, by its name.
async fn forward_agent(
    State(state): State<RouterState>,
    Path(params): Path<Vec<(String, String)>>,
    req: Request,
) -> Response {
    let name = params
        .into_iter()
        .find(|(k, _)| k == "name")
        .map(|(_, v)| v)
        .unwrap_or_default();
    match inbound(&state, req, None).await {
        Ok(inbound) => {
            let key = pinned::agent_key(&name);
            pinned::route(&state, inbound, &key, format!("agent '{name}'")).await
        }
        Err(e) => e.into_response(),
    }
}

/// Reads the request whole (bounded), and what routing needs from it.
async fn inbound(
    state: &RouterState,
    req: Request,
    path_model: Option<String>,
) -> Result<Inbound, ApiError> {
    let received = Instant::now();
    let (parts, body) = req.into_parts();
    let body = read_body(state, &parts.headers, body).await?;
    let peek: Option<Peek> = serde_json::from_slice(&body).ok();
    let field = |v: Option<&Value>| v.and_then(Value::as_str).map(str::to_string);
    let model = path_model.or_else(|| field(peek.as_ref().and_then(|p| p.model.as_ref())));
    let user = field(peek.as_ref().and_then(|p| p.user.as_ref()));
    Ok(Inbound {
        method: parts.method,
        path: parts
            .uri
            .path_and_query()
            .map_or_else(|| parts.uri.path().to_string(), |p| p.as_str().to_string()),
        session: session_key(&parts.headers, user.as_deref()),
        headers: parts.headers,
        body,
        model,
        received,
    })
}

/// Reads a request body up to the configured limit, naming why it could not.
pub(crate) async fn read_body(
    state: &RouterState,
    headers: &HeaderMap,
    body: axum::body::Body,
) -> Result<bytes::Bytes, ApiError> {
    let limit = state.config().body_limit;
    let too_large = ApiError::PayloadTooLarge { limit };
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if declared.is_some_and(|n| n > limit) {
        return Err(too_large);
    }
    axum::body::to_bytes(body, limit).await.map_err(|e| {
        let e = e.into_inner();
        if e.downcast_ref::<http_body_util::LengthLimitError>()
            .is_some()
        {
            too_large
        } else if kiln_http::is_body_timeout(&*e) {
            ApiError::BodyTimeout {
                limit_s: state.config().limits.body_timeout.as_secs(),
            }
        } else {
            ApiError::BadBody(e.to_string())
        }
    })
}

async fn list_models(State(state): State<RouterState>) -> Json<Value> {
    let cards = state.placement().union_cards();
    Json(json!({"object": "list", "data": cards}))
}

async fn retrieve_model(
    State(state): State<RouterState>,
    Path(name): Path<String>,
    req: Request,
) -> Response {
    let placement = state.placement();
    match placement.resolve(Some(&name)) {
        Resolved::Known(id) => placement
            .union_cards()
            .into_iter()
            .find(|c| c.get("id").and_then(Value::as_str) == Some(id.as_str()))
            .map_or_else(
                || StatusCode::NOT_FOUND.into_response(),
                |c| Json(c).into_response(),
            ),
        _ if state.config().upstream.is_some() => {
            // Not ours: the upstream may know it.
            match inbound(&state, req, Some(name)).await {
                Ok(inbound) => proxy::route(&state, inbound).await,
                Err(e) => e.into_response(),
            }
        }
        _ => ApiError::ModelNotFound {
            model: name,
            served: placement.served(),
        }
        .into_response(),
    }
}

async fn nodes(State(state): State<RouterState>) -> Json<Value> {
    Json(state.placement().view(Instant::now()))
}

async fn health() -> Json<Value> {
    Json(json!({"status": "ok"}))
}

/// 200 while the router can answer: not shutting down, and some node passes its
/// health checks (even if resting after a failure or a 429: that is seconds) or an
/// upstream takes what the nodes can't.
async fn ready(State(state): State<RouterState>) -> (StatusCode, Json<Value>) {
    let placement = state.placement();
    let now = Instant::now();
    let usable = placement.nodes.iter().filter(|n| n.usable(now)).count();
    let alive = placement
        .nodes
        .iter()
        .filter(|n| !matches!(n.health(now), Health::Down | Health::Unknown))
        .count();
    let status = if state.is_shutting_down() {
        "shutting_down"
    } else if alive == 0 && state.config().upstream.is_none() {
        "no_nodes"
    } else {
        "ready"
    };
    let code = if status == "ready" {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    let body = json!({
        "status": status,
        "nodes_usable": usable,
        "nodes_alive": alive,
        "nodes": placement.nodes.len(),
    });
    (code, Json(body))
}

async fn metrics(State(state): State<RouterState>) -> Response {
    let placement = state.placement();
    let now = Instant::now();
    let gauges: Vec<NodeGauges<'_>> = placement
        .nodes
        .iter()
        .enumerate()
        .map(|(i, n)| NodeGauges {
            id: &n.id,
            colo: &n.colo,
            up: n.usable(now),
            in_flight: n.in_flight(),
            placements: placement.placements_of(i),
        })
        .collect();
    let text = state
        .metrics()
        .render(&gauges, state.config().upstream.is_some());
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        text,
    )
        .into_response()
}

async fn require_api_key(State(state): State<RouterState>, req: Request, next: Next) -> Response {
    let keys = &state.config().api_keys;
    if keys.is_empty() {
        return next.run(req).await;
    }
    let token = req
        .headers()
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim);
    match token {
        None => ApiError::Unauthorized(
            "missing API key: send it as `Authorization: Bearer <key>`".into(),
        )
        .into_response(),
        Some(t) if keys.iter().any(|k| k == t) => next.run(req).await,
        Some(_) => ApiError::Unauthorized("invalid API key".into()).into_response(),
    }
}

async fn not_found(req: Request) -> ApiError {
    ApiError::RouteNotFound {
        method: req.method().to_string(),
        path: req.uri().path().to_string(),
    }
}

async fn method_not_allowed(req: Request) -> ApiError {
    ApiError::MethodNotAllowed {
        method: req.method().to_string(),
        path: req.uri().path().to_string(),
    }
}
