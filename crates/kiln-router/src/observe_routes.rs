//! `GET /v1/observability/{events,rollups,alerts}`: the router's inference events,
//! their per-minute rollups and the alerts firing, as JSON. Every query is bounded:
//! at most [`MAX_EVENTS`] events, [`MAX_MINUTES`] minutes and [`MAX_ROLLUPS`] rows.

use axum::extract::{Query, State};
use axum::response::{IntoResponse, Response};
use axum::Json;
use kiln_http::TransportError;
use kiln_observe::observer::now_ms;
use serde::Deserialize;
use serde_json::json;

use crate::error::ApiError;
use crate::state::RouterState;

/// Most events one call returns.
pub const MAX_EVENTS: usize = 1000;
/// Longest window of rollups (a day, the retention).
pub const MAX_MINUTES: i64 = 1440;
/// Most rollup rows one call returns (`truncated` says when more matched).
pub const MAX_ROLLUPS: usize = 50_000;

#[derive(Deserialize)]
pub struct EventsQuery {
    /// Only events numbered above this.
    after: Option<u64>,
    limit: Option<usize>,
}

pub async fn events(State(state): State<RouterState>, Query(q): Query<EventsQuery>) -> Response {
    let limit = q.limit.unwrap_or(100);
    if limit == 0 || limit > MAX_EVENTS {
        return ApiError::BadRequest {
            param: "limit",
            message: format!("`limit` must be from 1 to {MAX_EVENTS}"),
        }
        .into_response();
    }
    let data = state.observer().events(q.after, limit);
    let last = data.last().map(|e| e.seq);
    Json(json!({"object": "list", "data": data, "last_seq": last})).into_response()
}

#[derive(Deserialize)]
pub struct RollupsQuery {
    /// The window: the last this many minutes (default 60).
    minutes: Option<i64>,
    colo: Option<String>,
    model: Option<String>,
}

pub async fn rollups(State(state): State<RouterState>, Query(q): Query<RollupsQuery>) -> Response {
    let minutes = q.minutes.unwrap_or(60);
    if !(1..=MAX_MINUTES).contains(&minutes) {
        return ApiError::BadRequest {
            param: "minutes",
            message: format!("`minutes` must be from 1 to {MAX_MINUTES}"),
        }
        .into_response();
    }
    let now = (now_ms() / 60_000) as i64;
    let observer = state.observer().clone();
    let rows = tokio::task::spawn_blocking(move || observer.rollups(now - minutes + 1, now)).await;
    let rows = match rows {
        Ok(Ok(rows)) => rows,
        Ok(Err(e)) => return TransportError::Internal(e.to_string()).into_response(),
        Err(e) => return TransportError::Internal(e.to_string()).into_response(),
    };
    let mut data: Vec<_> = rows
        .into_iter()
        .filter(|r| q.colo.as_ref().is_none_or(|c| *c == r.colo))
        .filter(|r| q.model.as_ref().is_none_or(|m| *m == r.model))
        .collect();
    let truncated = data.len() > MAX_ROLLUPS;
    data.truncate(MAX_ROLLUPS);
    Json(json!({"object": "list", "data": data, "truncated": truncated})).into_response()
}

pub async fn alerts(State(state): State<RouterState>) -> Response {
    let observer = state.observer().clone();
    match tokio::task::spawn_blocking(move || observer.alerts()).await {
        Ok(Ok(alerts)) => Json(json!({
            "object": "list",
            "data": alerts,
            "rules": state.observer().rules(),
        }))
        .into_response(),
        Ok(Err(e)) => TransportError::Internal(e.to_string()).into_response(),
        Err(e) => TransportError::Internal(e.to_string()).into_response(),
    }
}
