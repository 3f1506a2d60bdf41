//! OpenAI's Responses API: `POST /v1/responses`, `GET` (`?stream=true` re-streams it,
//! `&starting_after=n` from after event `n`) and `DELETE /v1/responses/{id}`, `GET /v1/responses/{id}/input_items` and `POST
//! /v1/responses/{id}/cancel`, mapped onto [`kiln_responses`].

use std::collections::HashMap;

use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures_util::stream;
use kiln_api::responses::CreateResponse;
use kiln_responses::{Created, EventStream, ItemsQuery};

use crate::error::ApiError;
use crate::extract::ApiJson;
use crate::lease::CallContext;
use crate::state::AppState;
use crate::stream::{event_stream, named_event, to_json, with_keepalive};

pub async fn create(
    State(state): State<AppState>,
    ctx: CallContext,
    ApiJson(req): ApiJson<CreateResponse>,
) -> Result<Response, ApiError> {
    let responses = state.responses()?.clone();
    Ok(match responses.create(ctx.caller, req).await? {
        Created::Done(r) | Created::Background(r) => Json(r).into_response(),
        Created::Streaming(events) => sse(events),
    })
}

pub async fn retrieve(
    State(state): State<AppState>,
    ctx: CallContext,
    Path(id): Path<String>,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    let responses = state.responses()?;
    if q.get("stream").is_some_and(|s| s == "true") {
        let after = q.get("starting_after").map(String::as_str);
        return Ok(sse(responses.replay(&ctx.caller, &id, after)?));
    }
    Ok(Json(responses.get(&ctx.caller, &id)?).into_response())
}

pub async fn delete(
    State(state): State<AppState>,
    ctx: CallContext,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    Ok(Json(state.responses()?.delete(&ctx.caller, &id)?).into_response())
}

pub async fn cancel(
    State(state): State<AppState>,
    ctx: CallContext,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let responses = state.responses()?.clone();
    Ok(Json(responses.cancel(&ctx.caller, &id).await?).into_response())
}

pub async fn input_items(
    State(state): State<AppState>,
    ctx: CallContext,
    Path(id): Path<String>,
    Query(mut q): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    let limit = match q.remove("limit") {
        Some(l) => Some(l.parse::<usize>().map_err(|_| {
            ApiError::invalid("limit", "`limit` must be an integer between 1 and 100")
        })?),
        None => None,
    };
    let query = ItemsQuery {
        limit,
        order: q.remove("order"),
        after: q.remove("after"),
        before: q.remove("before"),
    };
    Ok(Json(state.responses()?.input_items(&ctx.caller, &id, &query)?).into_response())
}

/// The events as OpenAI sends them: `event: <type>` and `data: <json>` per event. The
/// body owns the stream, so a client that disconnects stops a created response (a
/// re-stream stops only itself).
pub fn sse(events: EventStream) -> Response {
    let frames = stream::unfold(events, |mut events| async move {
        let ev = events.next().await?;
        Some((named_event(&ev.kind, &to_json(&ev)), events))
    });
    event_stream(Body::from_stream(with_keepalive(frames)))
}
