//! What the Vectorize end-to-end suites share: the server they start, the documents they
//! index, and calls in Cloudflare's envelope.

#![allow(dead_code)]

use std::path::Path;

use kiln_testkit::server::ServerProcess;
use serde_json::{json, Value};

use crate::support::*;

pub const MINILM: &str = "all-minilm-l6-v2";
pub const KEY: &str = "sk-vectors";
pub const BASE: &str = "/vectorize/v2/indexes";

pub const DOCS: &[(&str, &str, &str)] = &[
    (
        "cat",
        "animals",
        "Cats are small furry pets that purr and chase mice.",
    ),
    (
        "dog",
        "animals",
        "Dogs are loyal pets that love walks and playing fetch.",
    ),
    (
        "parrot",
        "animals",
        "Parrots are colourful birds that can mimic human speech.",
    ),
    (
        "pizza",
        "food",
        "Pizza is a baked flatbread topped with tomato and cheese.",
    ),
    (
        "sushi",
        "food",
        "Sushi is vinegared rice served with raw fish.",
    ),
    (
        "bread",
        "food",
        "Bread is baked from flour, water and yeast.",
    ),
    (
        "rust",
        "code",
        "Rust is a systems programming language focused on memory safety.",
    ),
    (
        "sql",
        "code",
        "SQL is a language for querying relational databases.",
    ),
];

pub fn serve(data: &Path) -> ServerProcess {
    let dir = data.to_string_lossy();
    start_model(
        MINILM,
        &[
            "--data-dir",
            &dir,
            "--api-key",
            KEY,
            "--api-key",
            "sk-other",
        ],
    )
}

pub async fn call(
    base: &str,
    key: &str,
    method: &str,
    path: &str,
    body: Option<String>,
) -> (u16, Value) {
    let url = format!("{base}{BASE}{path}");
    let c = reqwest::Client::new();
    let req = match method {
        "GET" => c.get(url),
        "DELETE" => c.delete(url),
        _ => c.post(url),
    };
    let req = match body {
        Some(b) if path.ends_with("/insert") || path.ends_with("/upsert") => {
            req.header("content-type", "application/x-ndjson").body(b)
        }
        Some(b) => req.header("content-type", "application/json").body(b),
        None => req,
    };
    let resp = req.bearer_auth(key).send().await.expect("request");
    let status = resp.status().as_u16();
    let v: Value = resp.json().await.expect("a JSON body");
    (status, v)
}

pub async fn ok(base: &str, method: &str, path: &str, body: Option<String>) -> Value {
    let (s, v) = call(base, KEY, method, path, body).await;
    assert_eq!(s, 200, "{method} {path}: {v}");
    assert_eq!(v["success"], true, "{v}");
    assert_eq!(v["errors"], json!([]), "{v}");
    v["result"].clone()
}

/// A refused call: its status, and the message, after checking both error shapes.
pub async fn refused(
    base: &str,
    key: &str,
    method: &str,
    path: &str,
    body: Option<String>,
) -> (u16, String) {
    let (s, v) = call(base, key, method, path, body).await;
    assert_eq!(v["success"], false, "{v}");
    assert_eq!(v["result"], Value::Null, "{v}");
    let message = v["errors"][0]["message"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert_eq!(v["errors"][0]["code"], s, "{v}");
    assert_eq!(
        v["error"]["message"],
        message.as_str(),
        "OpenAI's error object too: {v}"
    );
    (s, message)
}

pub async fn embed(base: &str, texts: &[&str]) -> Vec<Vec<f32>> {
    let v: Value = reqwest::Client::new()
        .post(format!("{base}/v1/embeddings"))
        .bearer_auth(KEY)
        .json(&json!({"model": MINILM, "input": texts}))
        .send()
        .await
        .expect("embed")
        .json()
        .await
        .expect("json");
    v["data"]
        .as_array()
        .expect("data")
        .iter()
        .map(|d| serde_json::from_value(d["embedding"].clone()).expect("floats"))
        .collect()
}

pub fn ndjson(lines: &[Value]) -> String {
    lines.iter().map(|l| format!("{l}\n")).collect()
}

pub async fn query(base: &str, vector: &[f32], extra: Value) -> Vec<Value> {
    let mut body = json!({"vector": vector, "topK": 3, "returnMetadata": "all"});
    body.as_object_mut()
        .expect("object")
        .extend(extra.as_object().expect("object").clone());
    let r = ok(base, "POST", "/docs/query", Some(body.to_string())).await;
    assert_eq!(r["count"], r["matches"].as_array().map_or(0, Vec::len));
    r["matches"].as_array().expect("matches").clone()
}

pub fn ids(matches: &[Value]) -> Vec<&str> {
    matches
        .iter()
        .map(|m| m["id"].as_str().unwrap_or(""))
        .collect()
}

pub fn j(v: Value) -> Option<String> {
    Some(v.to_string())
}
