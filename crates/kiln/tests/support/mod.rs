//! Shared helpers for the end-to-end tests: start the real `kiln serve` binary on the
//! real default model, and read its metrics.

#![allow(dead_code)]

pub mod agents;
pub mod python;

use std::path::Path;
use std::time::{Duration, Instant};

use kiln_testkit::server::ServerProcess;

pub const MODEL: &str = "smollm2-135m-instruct";

/// Starts `kiln serve <args>` on a free loopback port and waits until it is ready.
pub fn start(args: &[&str]) -> ServerProcess {
    // Fetch the model up front (a no-op when cached) so the server starts at once.
    kiln_testkit::model_dir(MODEL);
    spawn(args)
}

/// Starts `kiln serve --model <model> <args>` like [`start`], fetching `model` first.
pub fn start_model(model: &str, args: &[&str]) -> ServerProcess {
    kiln_testkit::model_dir(model);
    spawn(&[&["--model", model], args].concat())
}

fn spawn(args: &[&str]) -> ServerProcess {
    ServerProcess::start(
        Path::new(env!("CARGO_BIN_EXE_kiln")),
        args,
        Duration::from_secs(120),
    )
    .unwrap_or_else(|e| panic!("{e}"))
}

/// Runs `f` on a two-thread runtime (the tests' HTTP clients are async).
pub fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime")
        .block_on(f)
}

/// `method base+path` with `key` as bearer token and `body` as JSON, if given: the
/// status and the JSON body (`null` when the body is not JSON).
pub async fn call(
    base: &str,
    method: reqwest::Method,
    path: &str,
    key: Option<&str>,
    body: Option<&serde_json::Value>,
) -> (u16, serde_json::Value) {
    let mut req = client().request(method.clone(), format!("{base}{path}"));
    if let Some(k) = key {
        req = req.bearer_auth(k);
    }
    if let Some(b) = body {
        req = req.json(b);
    }
    let resp = req
        .send()
        .await
        .unwrap_or_else(|e| panic!("{method} {path}: {e}"));
    let status = resp.status().as_u16();
    let text = resp.text().await.expect("body");
    (
        status,
        serde_json::from_str(&text).unwrap_or(serde_json::Value::Null),
    )
}

/// Uploads `content` as `name` to `/v1/files` with `purpose` under `key`; the file's id.
pub async fn upload_file(
    base: &str,
    key: &str,
    name: &str,
    purpose: &str,
    content: String,
) -> String {
    let part = reqwest::multipart::Part::text(content).file_name(name.to_string());
    let form = reqwest::multipart::Form::new()
        .text("purpose", purpose.to_string())
        .part("file", part);
    let resp = client()
        .post(format!("{base}/v1/files"))
        .bearer_auth(key)
        .multipart(form)
        .send()
        .await
        .expect("upload");
    let status = resp.status();
    let body: serde_json::Value = resp.json().await.expect("json");
    assert_eq!(status, 200, "{body}");
    body["id"].as_str().expect("file id").to_string()
}

/// `POST base+path` with a JSON body and no key.
pub async fn post(base: &str, path: &str, body: &serde_json::Value) -> (u16, serde_json::Value) {
    call(base, reqwest::Method::POST, path, None, Some(body)).await
}

/// `GET base+path` with no key.
pub async fn get(base: &str, path: &str) -> (u16, serde_json::Value) {
    call(base, reqwest::Method::GET, path, None, None).await
}

pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(300))
        .build()
        .unwrap_or_else(|e| panic!("http client: {e}"))
}

/// A client whose connections are never reused, so dropping a response closes its socket.
pub fn fresh_client() -> reqwest::Client {
    reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .timeout(Duration::from_secs(300))
        .build()
        .unwrap_or_else(|e| panic!("http client: {e}"))
}

/// `name{model_name="<MODEL>"}` from `/metrics`.
pub async fn metric(base: &str, name: &str) -> f64 {
    model_metric(base, MODEL, name).await
}

/// `name{model_name="<model>"}` from `/metrics`.
pub async fn model_metric(base: &str, model: &str, name: &str) -> f64 {
    let text = metrics_text(base).await;
    let series = format!("{name}{{model_name=\"{model}\"}} ");
    series_value(&text, &series).unwrap_or_else(|| panic!("{series} not in /metrics:\n{text}"))
}

/// The whole `/metrics` page; panics if it can't be read.
pub async fn metrics_text(base: &str) -> String {
    client()
        .get(format!("{base}/metrics"))
        .send()
        .await
        .and_then(|r| r.error_for_status())
        .unwrap_or_else(|e| panic!("GET /metrics: {e}"))
        .text()
        .await
        .unwrap_or_else(|e| panic!("metrics body: {e}"))
}

/// The value of the line of `text` that starts with `series` (its name, labels and the
/// space before the value).
pub fn series_value(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series).and_then(|v| v.trim().parse().ok()))
}

/// Polls `/metrics` until no sequence runs or waits and no KV block is held; panics
/// after `limit` with the last values.
pub async fn wait_until_idle(base: &str, limit: Duration) {
    let start = Instant::now();
    loop {
        let running = metric(base, "kiln:num_requests_running").await;
        let waiting = metric(base, "kiln:num_requests_waiting").await;
        let kv = metric(base, "kiln:kv_cache_usage_perc").await;
        if running == 0.0 && waiting == 0.0 && kv == 0.0 {
            return;
        }
        assert!(
            start.elapsed() < limit,
            "engine not idle after {limit:?}: running {running}, waiting {waiting}, kv usage {kv}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Reads SSE `data:` payloads from a streaming response until `count` have arrived (or
/// the stream ends); returns them and the stream, still open.
pub async fn read_events<B: AsRef<[u8]>>(
    stream: &mut (impl futures_util::Stream<Item = reqwest::Result<B>> + Unpin),
    buf: &mut Vec<u8>,
    count: usize,
) -> Vec<String> {
    use futures_util::StreamExt;
    let mut out = Vec::new();
    while out.len() < count {
        if let Some(i) = buf.windows(2).position(|w| w == b"\n\n") {
            let ev: Vec<u8> = buf.drain(..i + 2).collect();
            let ev = String::from_utf8_lossy(&ev);
            out.push(ev.trim_end().trim_start_matches("data: ").to_string());
            continue;
        }
        match stream.next().await {
            Some(Ok(b)) => buf.extend_from_slice(b.as_ref()),
            Some(Err(e)) => panic!("stream error: {e}"),
            None => break,
        }
    }
    out
}
