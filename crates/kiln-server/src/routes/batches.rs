//! `/v1/batches`: create from an uploaded JSONL file, retrieve, list and cancel, on
//! `kiln-batch`'s service, scoped to the caller's key.

use std::collections::HashMap;

use axum::extract::{Path, Query, State};
use axum::Json;
use kiln_api::batches::{Batch, CreateBatch};
use kiln_api::files::List;

use crate::error::ApiError;
use crate::extract::{query_number, ApiJson};
use crate::lease::CallContext;
use crate::state::AppState;

pub async fn create(
    State(state): State<AppState>,
    ctx: CallContext,
    ApiJson(req): ApiJson<CreateBatch>,
) -> Result<Json<Batch>, ApiError> {
    Ok(Json(state.batches()?.create(&ctx.caller, req)?))
}

pub async fn retrieve(
    State(state): State<AppState>,
    ctx: CallContext,
    Path(id): Path<String>,
) -> Result<Json<Batch>, ApiError> {
    Ok(Json(state.batches()?.get(&ctx.caller, &id)?))
}

/// `GET /v1/batches`: newest first, 20 a page unless `limit` (1 to 100) says otherwise.
pub async fn list(
    State(state): State<AppState>,
    ctx: CallContext,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Json<List<Batch>>, ApiError> {
    let limit = query_number(&q, "limit", 1..=100)?.unwrap_or(20);
    let after = q.get("after").map(String::as_str);
    Ok(Json(state.batches()?.list(&ctx.caller, after, limit)?))
}

pub async fn cancel(
    State(state): State<AppState>,
    ctx: CallContext,
    Path(id): Path<String>,
) -> Result<Json<Batch>, ApiError> {
    Ok(Json(state.batches()?.cancel(&ctx.caller, &id)?))
}
