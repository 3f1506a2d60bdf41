//! Batch lines run on the generator: `kiln-batch`'s [`BatchRunner`] calls the same
//! mapping the routes use (body → typed request → generator → the endpoint's JSON), so
//! a line gets exactly the checks, errors, metering and answer of the same request sent
//! over HTTP, firewall included. Its calls carry the batch's caller and
//! [`RequestClass::Batch`], which lowers their engine priority and meters them as
//! batch usage.

use std::panic::AssertUnwindSafe;
use std::path::Path;
use std::sync::Arc;

use axum::body::to_bytes;
use axum::response::IntoResponse;
use futures_util::future::BoxFuture;
use futures_util::FutureExt;
use kiln_api::Caller;
use kiln_batch::{BatchRunner, BatchStore, Batches, Limits, LineOutcome};
use kiln_files::FileStore;
use kiln_generate::{Call, Generator, RequestClass};
use kiln_http::OpenAiError;
use kiln_rag::VectorStores;
use serde_json::Value;

use crate::error::{ApiError, Result};
use crate::gate::firewall::screen_line;
use crate::gate::Gates;
use crate::middleware::RequestId;
use crate::routes::{chat, completions, embeddings, workers_ai};

/// The batch store's file and the files' directory, in the data directory.
pub const BATCHES_FILE: &str = "batches.sqlite3";

/// The batch service over `files`, its store under `dir`, running lines on `runner`;
/// the batches a restart cut are resumed (call on the runtime, before serving): the
/// service and how many resumed.
pub fn start_batches(
    dir: &Path,
    files: Arc<FileStore>,
    runner: ServerBatch,
    limits: Limits,
) -> Result<(Arc<Batches>, usize)> {
    let store = BatchStore::open(&dir.join(BATCHES_FILE))?;
    let batches = Batches::new(store, files, Arc::new(runner), limits);
    let resumed = batches.start()?;
    Ok((batches, resumed))
}

/// Runs batch lines on the generator, behind the gates' firewall.
pub struct ServerBatch {
    pub generator: Arc<Generator>,
    /// For chat's `file_search` tool.
    pub stores: Option<VectorStores>,
    pub gates: Arc<Gates>,
}

impl BatchRunner for ServerBatch {
    fn run(&self, caller: &Caller, path: &str, body: Value) -> BoxFuture<'static, LineOutcome> {
        let (generator, stores, gates) = (
            self.generator.clone(),
            self.stores.clone(),
            self.gates.clone(),
        );
        let (caller, path) = (caller.clone(), path.to_string());
        Box::pin(async move {
            if generator.host().is_shutting_down() {
                return outcome(&ApiError::ShuttingDown);
            }
            if let Some(refused) = screen_line(&gates, &caller, &path, &body).await {
                return outcome(&refused);
            }
            let call = Call::new(caller, RequestClass::Batch);
            let bytes = body.to_string().into_bytes();
            let rid = RequestId::random();
            let answer = async {
                match path.as_str() {
                    "/v1/chat/completions" => {
                        chat::respond(&generator, stores.as_ref(), &rid, &call, &bytes).await
                    }
                    "/v1/completions" => {
                        completions::respond(&generator, &rid, &call, &bytes).await
                    }
                    "/v1/embeddings" => embeddings::respond(&generator, &call, &bytes).await,
                    p => match p.strip_prefix("/ai/run/") {
                        Some(model) => workers_ai::respond(&generator, model, &call, &bytes).await,
                        None => Err(ApiError::RouteNotFound {
                            method: "POST".into(),
                            path: p.to_string(),
                        }),
                    },
                }
            };
            let response = match AssertUnwindSafe(answer).catch_unwind().await {
                Ok(answer) => answer.unwrap_or_else(IntoResponse::into_response),
                Err(_) => {
                    return outcome(&ApiError::Internal("the request handler panicked".into()))
                }
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
