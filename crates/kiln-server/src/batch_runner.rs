//! Batch lines run on the generator: `kiln-batch`'s [`BatchRunner`] calls the same
//! mapping the routes use (body → typed request → generator → the endpoint's JSON), so
//! a line gets exactly the checks, errors, metering and answer of the same request sent
//! over HTTP, firewall included. Its calls carry the batch's caller and
//! [`RequestClass::Batch`], which lowers their engine priority and meters them as
//! batch usage.

use kiln_http::TransportError;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use axum::body::to_bytes;
use axum::response::IntoResponse;
use futures_util::future::BoxFuture;
use futures_util::FutureExt;
use kiln_api::Caller;
use kiln_batch::{BatchRunner, LineOutcome};
use kiln_generate::{Call, Generator, RequestClass};
use kiln_http::OpenAiError;
use kiln_rag::VectorStores;
use serde_json::Value;

use crate::gate::firewall::screen_line;
use crate::gate::Gates;
use crate::middleware::RequestId;
use crate::routes::{chat, completions, embeddings, workers_ai};

/// Runs batch lines on the generator, behind the gates' firewall.
pub struct BatchLines {
    pub generator: Arc<Generator>,
    /// For chat's `file_search` tool.
    pub stores: Option<VectorStores>,
    pub gates: Arc<Gates>,
}

impl BatchRunner for BatchLines {
    fn run(&self, caller: &Caller, path: &str, body: Value) -> BoxFuture<'static, LineOutcome> {
        let (generator, stores, gates) = (
            self.generator.clone(),
            self.stores.clone(),
            self.gates.clone(),
        );
        let (caller, path) = (caller.clone(), path.to_string());
        Box::pin(async move {
            if generator.host().is_shutting_down() {
                return outcome(&TransportError::ShuttingDown);
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
                        None => Err(TransportError::RouteNotFound {
                            method: "POST".into(),
                            path: p.to_string(),
                        }
                        .into()),
                    },
                }
            };
            let response = match AssertUnwindSafe(answer).catch_unwind().await {
                Ok(answer) => answer.unwrap_or_else(IntoResponse::into_response),
                Err(_) => {
                    return outcome(&TransportError::Internal(
                        "the request handler panicked".into(),
                    ))
                }
            };
            let status = response.status().as_u16();
            let body = match to_bytes(response.into_body(), usize::MAX).await {
                Ok(bytes) => serde_json::from_slice(&bytes).unwrap_or_else(|_| {
                    Value::String(String::from_utf8_lossy(&bytes).into_owned())
                }),
                Err(e) => {
                    return outcome(&TransportError::Internal(format!(
                        "reading the answer: {e}"
                    )))
                }
            };
            LineOutcome { status, body }
        })
    }
}

/// The outcome a line gets for `e`: its status and OpenAI error body.
fn outcome(e: &impl OpenAiError) -> LineOutcome {
    LineOutcome {
        status: e.status().as_u16(),
        body: serde_json::to_value(e.body()).unwrap_or_default(),
    }
}
