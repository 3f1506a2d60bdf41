//! Shared set-up for the in-process API tests: the real default model behind a real
//! engine, and small helpers to send requests through the router.

#![allow(dead_code)]

use std::sync::{Arc, OnceLock};

use axum::body::{to_bytes, Body, Bytes};
use axum::http::{HeaderMap, Request, StatusCode};
use kiln_generate::{ServingModel, ServingOptions};
use kiln_server::{app, AppState, ServerConfig};
use serde_json::Value;
use tower::ServiceExt;

pub const MODEL: &str = "smollm2-135m-instruct";
pub const MAX_MODEL_LEN: usize = 2048;

fn load(max_num_seqs: usize) -> Arc<ServingModel> {
    let path = kiln_testkit::model_file(MODEL, "SmolLM2-135M-Instruct.Q4_1.gguf");
    let mut opts = ServingOptions::detect();
    opts.kv_cache_bytes = Some(96 << 20);
    opts.max_model_len = Some(MAX_MODEL_LEN);
    opts.max_num_seqs = max_num_seqs;
    Arc::new(
        ServingModel::load(MODEL, &path, &opts)
            .unwrap_or_else(|e| panic!("cannot load {MODEL}: {e}")),
    )
}

/// The model most tests share (loaded once per test binary).
pub fn model() -> Arc<ServingModel> {
    static M: OnceLock<Arc<ServingModel>> = OnceLock::new();
    M.get_or_init(|| load(8)).clone()
}

/// A fresh engine of its own that runs one sequence at a time, for backpressure tests
/// (not shared, so tests running in parallel don't queue behind each other).
pub fn single_seq_model() -> Arc<ServingModel> {
    load(1)
}

pub fn state_with(config: ServerConfig, model: Arc<ServingModel>) -> AppState {
    AppState::with_model(config, MODEL, "text-generation", model)
        .unwrap_or_else(|e| panic!("state: {e}"))
}

pub fn state() -> AppState {
    state_with(ServerConfig::default(), model())
}

pub struct Reply {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Reply {
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&self.body)))
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// Sends one request through the router and reads the whole response.
pub async fn send(
    state: &AppState,
    method: &str,
    path: &str,
    body: Option<&str>,
    headers: &[(&str, &str)],
) -> Reply {
    let resp = send_raw(state, method, path, body, headers).await;
    let status = resp.status();
    let headers = resp.headers().clone();
    let body = to_bytes(resp.into_body(), usize::MAX)
        .await
        .unwrap_or_else(|e| panic!("body: {e}"));
    Reply {
        status,
        headers,
        body,
    }
}

/// Sends one request and returns the response without reading its body (a stream held
/// open keeps its request running).
pub async fn send_raw(
    state: &AppState,
    method: &str,
    path: &str,
    body: Option<&str>,
    headers: &[(&str, &str)],
) -> axum::response::Response {
    let mut req = Request::builder().method(method).uri(path);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let req = req
        .body(body.map_or_else(Body::empty, |b| Body::from(b.to_string())))
        .unwrap_or_else(|e| panic!("request: {e}"));
    match app(state.clone()).oneshot(req).await {
        Ok(r) => r,
        Err(e) => match e {},
    }
}

pub async fn post(state: &AppState, path: &str, body: &str) -> Reply {
    send(
        state,
        "POST",
        path,
        Some(body),
        &[("content-type", "application/json")],
    )
    .await
}

/// Asserts OpenAI's error shape and returns the error object.
pub fn assert_error(r: &Reply, status: StatusCode, param: Option<&str>) -> Value {
    assert_eq!(r.status, status, "body: {}", r.text());
    let v = r.json();
    let e = &v["error"];
    assert!(e["message"].as_str().is_some_and(|m| !m.is_empty()), "{v}");
    assert!(e["type"].is_string(), "{v}");
    assert!(
        e.as_object()
            .is_some_and(|o| o.contains_key("param") && o.contains_key("code")),
        "{v}"
    );
    assert_eq!(e["param"].as_str(), param, "{v}");
    e.clone()
}

/// The `data:` payloads of an SSE body, checking the framing on the way.
pub fn sse_events(body: &str) -> Vec<String> {
    assert!(
        body.ends_with("\n\n"),
        "SSE body must end with a blank line: {body:?}"
    );
    body.strip_suffix("\n\n")
        .unwrap_or(body)
        .split("\n\n")
        .map(|ev| {
            ev.strip_prefix("data: ")
                .unwrap_or_else(|| panic!("event without `data: `: {ev:?}"))
                .to_string()
        })
        .inspect(|data| assert!(!data.contains('\n'), "one line per event: {data:?}"))
        .collect()
}
