//! Kiln's agents API, mapped onto [`kiln_agents`]: `GET /v1/agents` (a page of the
//! caller's agents), `PUT`/`GET`/`DELETE /v1/agents/{name}`, its turns (`POST .../responses`) and history (`GET
//! .../responses`), its state (`GET`/`PUT .../state`), schedules (`POST`/`GET
//! .../schedules`, `DELETE .../schedules/{id}`) and events (`GET .../events`, SSE).

use axum::body::Body;
use std::collections::HashMap;

use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures_util::stream;
use kiln_api::agents::{Agent, AgentConfig, List, ScheduleRequest};
use kiln_api::files::List as Page;
use kiln_api::responses::CreateResponse;
use kiln_files::Order;
use kiln_responses::Created;
use serde_json::{json, Value};
use tokio::sync::broadcast::error::RecvError;

use super::responses::sse;
use crate::error::ApiError;
use crate::extract::{query_number, query_order, ApiJson};
use crate::lease::CallContext;
use crate::state::AppState;
use crate::stream::{event_stream, named_event, with_keepalive};

/// `GET /v1/agents`: the caller's agents by name (`order=desc` reverses), `limit` 1 to
/// 100 (20), `after` a name.
pub async fn list(
    State(state): State<AppState>,
    ctx: CallContext,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    let limit = query_number(&q, "limit", 1..=100)?.unwrap_or(20);
    let descending = query_order(&q, Order::Asc)? == Order::Desc;
    let after = q.get("after").map(String::as_str);
    let (data, has_more) = state
        .agents()?
        .list(&ctx.caller, after, limit, descending)?;
    Ok(Json(Page::page(data, has_more, |a: &Agent| &a.id)).into_response())
}

pub async fn put(
    State(state): State<AppState>,
    ctx: CallContext,
    Path(name): Path<String>,
    ApiJson(config): ApiJson<AgentConfig>,
) -> Result<Response, ApiError> {
    Ok(Json(state.agents()?.put(&ctx.caller, &name, config)?).into_response())
}

pub async fn get(
    State(state): State<AppState>,
    ctx: CallContext,
    Path(name): Path<String>,
) -> Result<Response, ApiError> {
    Ok(Json(state.agents()?.get(&ctx.caller, &name)?).into_response())
}

pub async fn delete(
    State(state): State<AppState>,
    ctx: CallContext,
    Path(name): Path<String>,
) -> Result<Response, ApiError> {
    Ok(Json(state.agents()?.delete(&ctx.caller, &name)?).into_response())
}

pub async fn respond(
    State(state): State<AppState>,
    ctx: CallContext,
    Path(name): Path<String>,
    ApiJson(req): ApiJson<CreateResponse>,
) -> Result<Response, ApiError> {
    let agents = state.agents()?.clone();
    Ok(match agents.respond(&ctx.caller, &name, req).await? {
        Created::Done(r) | Created::Background(r) => Json(r).into_response(),
        Created::Streaming(events) => sse(events),
    })
}

pub async fn history(
    State(state): State<AppState>,
    ctx: CallContext,
    Path(name): Path<String>,
) -> Result<Response, ApiError> {
    let data = state.agents()?.history(&ctx.caller, &name)?;
    Ok(Json(List::new(data)).into_response())
}

pub async fn get_state(
    State(state): State<AppState>,
    ctx: CallContext,
    Path(name): Path<String>,
) -> Result<Response, ApiError> {
    Ok(Json(state.agents()?.state(&ctx.caller, &name)?).into_response())
}

pub async fn put_state(
    State(state): State<AppState>,
    ctx: CallContext,
    Path(name): Path<String>,
    ApiJson(doc): ApiJson<Value>,
) -> Result<Response, ApiError> {
    Ok(Json(state.agents()?.put_state(&ctx.caller, &name, doc)?).into_response())
}

pub async fn add_schedule(
    State(state): State<AppState>,
    ctx: CallContext,
    Path(name): Path<String>,
    ApiJson(req): ApiJson<ScheduleRequest>,
) -> Result<Response, ApiError> {
    Ok(Json(state.agents()?.add_schedule(&ctx.caller, &name, req)?).into_response())
}

pub async fn schedules(
    State(state): State<AppState>,
    ctx: CallContext,
    Path(name): Path<String>,
) -> Result<Response, ApiError> {
    let data = state.agents()?.schedules(&ctx.caller, &name)?;
    Ok(Json(List::new(data)).into_response())
}

pub async fn delete_schedule(
    State(state): State<AppState>,
    ctx: CallContext,
    Path((name, id)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    Ok(Json(state.agents()?.delete_schedule(&ctx.caller, &name, &id)?).into_response())
}

/// The agent's events as SSE: `event: <type>` and `data: <json>`, a keep-alive comment
/// when quiet; a subscriber too slow to keep up is told how many it missed.
pub async fn events(
    State(state): State<AppState>,
    ctx: CallContext,
    Path(name): Path<String>,
) -> Result<Response, ApiError> {
    let rx = state.agents()?.subscribe(&ctx.caller, &name)?;
    let body = stream::unfold(rx, |mut rx| async move {
        let ev = match rx.recv().await {
            Ok(ev) => ev,
            Err(RecvError::Lagged(n)) => json!({"type": "agent.events.lagged", "missed": n}),
            Err(RecvError::Closed) => return None,
        };
        let kind = ev["type"].as_str().unwrap_or("message");
        Some((named_event(kind, &ev.to_string()), rx))
    });
    Ok(event_stream(Body::from_stream(with_keepalive(body))))
}
