//! Agents' end-to-end helpers: a server with two keys on a data directory, an agent
//! on the default model, and its history.

use std::path::Path;

use kiln_testkit::server::ServerProcess;
use reqwest::Method;
use serde_json::{json, Value};

use super::{call, start, MODEL};

pub const KEY: &str = "sk-agents";
pub const OTHER: &str = "sk-other";

pub fn serve_on(data: &Path) -> ServerProcess {
    let dir = data.to_string_lossy().to_string();
    start(&[
        "--data-dir",
        &dir,
        "--kv-cache-memory",
        "128MiB",
        "--api-key",
        KEY,
        "--api-key",
        OTHER,
    ])
}

pub async fn put_agent(base: &str, name: &str) {
    let (status, agent) = call(
        base,
        Method::PUT,
        &format!("/v1/agents/{name}"),
        Some(KEY),
        Some(
            &json!({"model": MODEL, "instructions": "You are a terse assistant.",
                    "max_output_tokens": 16}),
        ),
    )
    .await;
    assert_eq!(status, 200, "{agent}");
    assert_eq!(agent["id"], name);
    assert_eq!(agent["model"], MODEL);
}

pub async fn history(base: &str, name: &str) -> Vec<Value> {
    let (status, h) = call(
        base,
        Method::GET,
        &format!("/v1/agents/{name}/responses"),
        Some(KEY),
        None,
    )
    .await;
    assert_eq!(status, 200, "{h}");
    h["data"].as_array().cloned().unwrap_or_default()
}
