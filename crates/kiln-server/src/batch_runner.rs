//! Batch lines run as requests to the server's own routes: `kiln-batch`'s
//! [`BatchRunner`] over an internal router of the batchable endpoints, so a line gets
//! exactly the checks, errors, metering and answer of the same request sent over HTTP.
//! Its requests carry the batch's caller and [`RequestClass::Batch`], which lowers their
//! engine priority and meters them as batch usage; the router is never bound to a
//! socket, so no client can send either.

use std::path::Path;
use std::sync::{Arc, Weak};

use axum::body::{to_bytes, Body};
use axum::http::header::CONTENT_TYPE;
use axum::http::Request;
use futures_util::future::BoxFuture;
use kiln_batch::{BatchRunner, BatchStore, Batches, Limits, LineOutcome};
use kiln_files::FileStore;
use kiln_http::OpenAiError;
use kiln_usage::Caller;
use serde_json::Value;
use tower::ServiceExt;

use crate::app::batch_routes;
use crate::error::{ApiError, Result};
use crate::lease::RequestClass;
use crate::state::{AppState, Inner};

/// The batch store's file and the files' directory, in the data directory.
pub const BATCHES_FILE: &str = "batches.sqlite3";

/// Serves files and batches on `state` from `dir` and resumes the batches a restart
/// cut (call on the runtime, before serving): how many resumed, and the file store.
pub fn enable_batches(
    state: &AppState,
    dir: &Path,
    files: kiln_files::Limits,
    limits: Limits,
) -> Result<(usize, Arc<FileStore>)> {
    let files = Arc::new(FileStore::open(dir, files)?);
    let store = BatchStore::open(&dir.join(BATCHES_FILE))?;
    let runner = Arc::new(ServerBatch(state.downgrade()));
    let batches = Batches::new(store, files.clone(), runner, limits);
    state.set_batches(batches.clone());
    Ok((batches.start()?, files))
}

/// Runs batch lines on the server's routes. Holds the state weakly: the state owns the
/// batch service, which owns this.
pub struct ServerBatch(Weak<Inner>);

impl BatchRunner for ServerBatch {
    fn run(&self, caller: &Caller, path: &str, body: Value) -> BoxFuture<'static, LineOutcome> {
        let state = self.0.upgrade().map(AppState::from_inner);
        let request = Request::post(path)
            .header(CONTENT_TYPE, "application/json")
            .body(Body::from(body.to_string()));
        let caller = caller.clone();
        Box::pin(async move {
            let (Some(state), Ok(mut request)) = (state, request) else {
                return outcome(&ApiError::ShuttingDown);
            };
            if state.is_shutting_down() {
                return outcome(&ApiError::ShuttingDown);
            }
            request.extensions_mut().insert(caller);
            request.extensions_mut().insert(RequestClass::Batch);
            let response = match batch_routes(state).oneshot(request).await {
                Ok(r) => r,
                Err(never) => match never {},
            };
            let status = response.status().as_u16();
            let body = match to_bytes(response.into_body(), usize::MAX).await {
                Ok(bytes) => serde_json::from_slice(&bytes).unwrap_or_else(|_| {
                    Value::String(String::from_utf8_lossy(&bytes).into_owned())
                }),
                Err(e) => return outcome(&ApiError::Internal(format!("reading the answer: {e}"))),
            };
            LineOutcome { status, body }
        })
    }
}

/// The outcome a line gets for `e`: its status and OpenAI error body.
fn outcome(e: &ApiError) -> LineOutcome {
    LineOutcome {
        status: e.status().as_u16(),
        body: serde_json::to_value(e.body()).unwrap_or_default(),
    }
}
