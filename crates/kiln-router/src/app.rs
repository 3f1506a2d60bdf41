//! The router's HTTP API: the nodes' own API (so a client cannot tell the router from
//! a node), plus `GET /nodes`.
//!
//! API routes (`/v1/*`, `/ai/run/*`, `/tokenize`, `/detokenize`, `/nodes`) need an API
//! key when the router has keys; `/health`, `/ready`, `/metrics` and the `/dashboard`
//! page are always open (its data stream takes the key as `?key=`).

use kiln_http::TransportError;
use std::collections::BTreeMap;
use std::time::Instant;

use axum::extract::{Path, Request, State};
use axum::http::request::Parts;
use axum::http::{header, StatusCode};
use axum::middleware::{from_fn, from_fn_with_state, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, MethodFilter, MethodRouter};
use axum::{Json, Router};
use kiln_api::endpoints::{find_named, BodyLimit, Method, Pin, ENDPOINTS};
use kiln_http::body_deadline;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::affinity::session_key;
use crate::by_rule;
use crate::error::ApiError;
use crate::metrics::NodeGauges;
use crate::nodes::Health;
use crate::observe;
use crate::pinned;
use crate::placement::Resolved;
use crate::proxy::{self, Inbound};
use crate::rules::Route;
use crate::state::RouterState;

/// The whole HTTP API over `state`.
pub fn app(state: RouterState) -> Router {
    let api = api_routes()
        .route("/nodes", get(nodes))
        .route_layer(from_fn_with_state(state.clone(), crate::limits::enforce))
        .route_layer(from_fn_with_state(state.clone(), require_api_key));
    let ops = Router::new()
        .route("/health", get(health))
        .route("/ready", get(ready))
        .route("/metrics", get(metrics))
        .route("/dashboard", get(crate::dashboard::page))
        .route("/dashboard/app.js", get(crate::dashboard::script))
        .route("/dashboard/style.css", get(crate::dashboard::style))
        .route("/dashboard/events", get(crate::dashboard::events));
    let (timeout, cors) = (
        state.config().limits.body_timeout,
        state.config().cors.clone(),
    );
    let app = api
        .merge(ops)
        .fallback(kiln_http::route_not_found)
        .method_not_allowed_fallback(kiln_http::method_not_allowed)
        .layer(from_fn(move |req, next| body_deadline(timeout, req, next)))
        .with_state(state);
    cors.apply(app)
}

/// The API routes: every endpoint of the table that a router places, on the handler
/// for what it is pinned by (so the router serves exactly the nodes' routes).
fn api_routes() -> Router<RouterState> {
    let mut paths: BTreeMap<&str, MethodRouter<RouterState>> = BTreeMap::new();
    for e in ENDPOINTS {
        let filter = match e.method {
            Method::Get => MethodFilter::GET,
            Method::Post => MethodFilter::POST,
            Method::Put => MethodFilter::PUT,
            Method::Delete => MethodFilter::DELETE,
        };
        if e.pin == Pin::NodeOnly {
            continue;
        }
        if e.pin == Pin::RouterOnly {
            let on = paths.remove(e.path).unwrap_or_default();
            paths.insert(e.path, on.on(filter, observability_route(e.path)));
            continue;
        }
        // A `{*model}` path names the model in the path rather than the body.
        let in_path = e.path.ends_with("{*model}");
        let on = paths.remove(e.path).unwrap_or_default();
        let on = match e.pin {
            Pin::NodeOnly | Pin::RouterOnly => on,
            Pin::Model if in_path => on.on(filter, forward_ai_run),
            Pin::Model => on.on(filter, forward),
            Pin::Caller => on.on(filter, forward_callers),
            Pin::Agent => on.on(filter, forward_agent),
            Pin::Router if in_path => on.on(filter, retrieve_model),
            Pin::Router => on.on(filter, list_models),
        };
        paths.insert(e.path, on);
    }
    paths
        .into_iter()
        .fold(Router::new(), |r, (path, on)| r.route(path, on))
}

/// The handler of one of the router's own observability routes.
fn observability_route(path: &str) -> MethodRouter<RouterState> {
    use crate::observe_routes as o;
    match path {
        "/v1/observability/events" => get(o::events),
        "/v1/observability/rollups" => get(o::rollups),
        _ => get(o::alerts),
    }
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
        Ok(inbound) => route_observed(&state, inbound).await,
        Err(e) => e.into_response(),
    }
}

/// Routes by model (or, for what runs a model, by the first routing rule it matches),
/// recording an inference event for what runs a model.
async fn route_observed(state: &RouterState, inbound: Inbound) -> Response {
    let Some(meta) = observe::Meta::of(state, &inbound) else {
        return proxy::route(state, inbound).await;
    };
    let decision = by_rule::decide(state, &inbound);
    let resp = match &decision {
        Some(d) if d.route == Route::Central => proxy::by_rule(state, &inbound, &d.rule).await,
        _ => proxy::route(state, inbound.clone()).await,
    };
    let resp = crate::escalate::maybe(state, &inbound, resp).await;
    observe::track(state, meta.with_rule(decision.map(|d| d.rule)), resp).await
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
        Ok(inbound) => route_observed(&state, inbound).await,
        Err(e) => e.into_response(),
    }
}

/// State a node keeps for a caller (stored responses, files and batches, vector
/// indexes): to that node.
async fn forward_callers(State(state): State<RouterState>, req: Request) -> Response {
    let what = kept_for_caller(req.uri().path());
    pinned_to_caller(&state, req, what).await
}

/// What the caller's node keeps that `path` reaches, for errors.
fn kept_for_caller(path: &str) -> &'static str {
    let family = path.split('/').nth(2).unwrap_or_default();
    match family {
        "responses" => "stored responses",
        "files" => "files",
        "batches" => "batches",
        _ => "vector indexes",
    }
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
    let body = read_body(state, &parts, body).await?;
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

/// Reads a request body up to its route's limit (the endpoint table's), naming why it
/// could not.
pub(crate) async fn read_body(
    state: &RouterState,
    parts: &Parts,
    body: axum::body::Body,
) -> Result<bytes::Bytes, ApiError> {
    let headers = &parts.headers;
    let default = state.config().body_limit;
    let limit = match find_named(parts.method.as_str(), parts.uri.path()).map(|e| e.body) {
        // Never below the default an operator raised.
        Some(BodyLimit::Bytes(n)) => n.max(default),
        // The router keeps no files: an upload passes under the default.
        Some(BodyLimit::Upload | BodyLimit::Default) | None => default,
    };
    let too_large = ApiError::from(TransportError::PayloadTooLarge { limit });
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
            TransportError::BodyTimeout {
                limit_s: state.config().limits.body_timeout.as_secs(),
            }
            .into()
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

/// The ring, and the routing rules in force.
async fn nodes(State(state): State<RouterState>) -> Json<Value> {
    let mut view = state.placement().view(Instant::now());
    if let Some(o) = view.as_object_mut() {
        o.insert("rules".into(), state.rules().view());
    }
    Json(view)
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
    let mut text = state
        .metrics()
        .render(&gauges, state.config().upstream.is_some());
    state.observer().render_prometheus(&mut text);
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
    match kiln_http::authorize(req.headers(), "API", |t| {
        kiln_http::find_key(keys, |k| k, t)
    }) {
        Ok(_) => next.run(req).await,
        Err(refused) => refused.into_response(),
    }
}
