//! `POST /ai/run/{model}?queueRequest=true`, after Workers AI's batch API: a body of
//! `{"requests": [...]}` queues them as one batch and answers
//! `{"result": {"status": "queued", "request_id", "model"}}`; a body of
//! `{"request_id"}` polls it: the same status while it waits or runs, then
//! `{"result": {"responses": [...], "usage"}}`.

use std::collections::HashMap;

use axum::body::Bytes;
use axum::response::{IntoResponse, Response};
use axum::Json;
use kiln_api::batches::{QueueEnvelope, QueueRequest};
use kiln_batch::Polled;

use crate::error::ApiError;
use crate::extract::parse;
use crate::lease::CallContext;
use crate::state::AppState;

/// Whether the query asks for the request to be queued (`queueRequest=true`).
pub fn queued(query: &HashMap<String, String>) -> Result<bool, ApiError> {
    match query.get("queueRequest").map(String::as_str) {
        None | Some("false") => Ok(false),
        Some("true") => Ok(true),
        Some(_) => Err(ApiError::invalid(
            "queueRequest",
            "`queueRequest` must be true or false",
        )),
    }
}

/// Queues or polls on `model` (the caller checked it is served).
pub fn queue(
    state: &AppState,
    model: &str,
    ctx: &CallContext,
    body: &Bytes,
) -> Result<Response, ApiError> {
    let batches = state.batches()?;
    let req: QueueRequest = parse(body).map_err(|_| {
        ApiError::invalid(
            "requests",
            "a queued request's body is {\"requests\": [...]} to queue or {\"request_id\": \"...\"} to poll",
        )
    })?;
    Ok(match req {
        QueueRequest::Submit { requests } => Json(QueueEnvelope::ok(batches.queue(
            &ctx.caller,
            model,
            &requests,
        )?))
        .into_response(),
        QueueRequest::Poll { request_id } => match batches.poll(&ctx.caller, model, &request_id)? {
            Polled::Pending(status) => Json(QueueEnvelope::ok(status)).into_response(),
            Polled::Done(results) => Json(QueueEnvelope::ok(results)).into_response(),
        },
    })
}
