//! Async work end to end:
//!
//! - the official `openai` SDK (`python/batch_checks.py`) on smollm2 and all-minilm:
//!   files, batches on chat completions, completions and embeddings with outputs matched
//!   by `custom_id`, malformed lines, validation failures, cancel, per-key isolation, and
//!   Workers AI `queueRequest` round trips;
//! - a crash (SIGKILL) in the middle of a batch: the restarted server resumes it and
//!   the output holds every line exactly once; the lines are metered as batch usage;
//! - `kiln batch` submits a file, follows it and writes the results (a line with a
//!   malformed or over-long `custom_id` failing alone).

mod support;

use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

use kiln_testkit::server::ServerProcess;
use serde_json::{json, Value};
use support::python::{assert_checks_passed, run_script_with};
use support::*;

const MINILM: &str = "all-minilm-l6-v2";
const KEY: &str = "sk-batch";

#[test]
fn python_batch_checks_pass() {
    kiln_testkit::model_dir(MINILM);
    let server = start(&[
        "--model",
        MODEL,
        "--model",
        MINILM,
        "--kv-cache-memory",
        "128MiB",
        "--api-key",
        KEY,
        "--api-key",
        "sk-other",
        "--batch-concurrency",
        "8",
    ]);
    let out = run_script_with(
        "batch_checks.py",
        &server.base_url(),
        MODEL,
        &[MINILM, KEY, "sk-other"],
        Duration::from_secs(1200),
    );
    assert_checks_passed(&out, "batch", &server.log_tail());
}

fn serve_on(data: &Path, usage: &Path) -> ServerProcess {
    let (dir, usage) = (data.to_string_lossy(), usage.to_string_lossy());
    start(&[
        "--data-dir",
        &dir,
        "--usage-db",
        &usage,
        "--kv-cache-memory",
        "128MiB",
        "--api-key",
        KEY,
        "--admin-key",
        "sk-admin",
        "--batch-concurrency",
        "4",
    ])
}

/// A JSONL batch of `n` short chat requests, `line-<i>` each.
fn chat_lines(n: usize, max_tokens: u32) -> String {
    (0..n)
        .map(|i| {
            let line = json!({
                "custom_id": format!("line-{i}"),
                "method": "POST",
                "url": "/v1/chat/completions",
                "body": {"messages": [{"role": "user", "content": format!("Count to {i}.")}],
                         "max_tokens": max_tokens, "temperature": 0},
            });
            format!("{line}\n")
        })
        .collect()
}

async fn upload(base: &str, content: String) -> String {
    upload_file(base, KEY, "lines.jsonl", "batch", content).await
}

async fn batch(base: &str, id: &str) -> Value {
    let (status, b) = call(
        base,
        reqwest::Method::GET,
        &format!("/v1/batches/{id}"),
        Some(KEY),
        None,
    )
    .await;
    assert_eq!(status, 200, "{b}");
    b
}

/// Polls the batch until `done(batch)`, for at most `limit`.
async fn wait_for(base: &str, id: &str, limit: Duration, done: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + limit;
    loop {
        let b = batch(base, id).await;
        if done(&b) {
            return b;
        }
        assert!(Instant::now() < deadline, "batch stuck: {b}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn content(base: &str, file: &str) -> String {
    reqwest::Client::new()
        .get(format!("{base}/v1/files/{file}/content"))
        .bearer_auth(KEY)
        .send()
        .await
        .expect("download")
        .text()
        .await
        .expect("text")
}

#[test]
fn a_batch_cut_by_a_crash_resumes_with_every_line_exactly_once() {
    const LINES: usize = 80;
    let data = tempfile::tempdir().expect("tempdir");
    let usage = data.path().join("usage.sqlite3");
    let state = data.path().join("state");
    let server = serve_on(&state, &usage);
    let id = block_on(async {
        let base = server.base_url();
        let file = upload(&base, chat_lines(LINES, 12)).await;
        let (status, b) = call(
            &base,
            reqwest::Method::POST,
            "/v1/batches",
            Some(KEY),
            Some(
                &json!({"input_file_id": file, "endpoint": "/v1/chat/completions",
                         "completion_window": "24h"}),
            ),
        )
        .await;
        assert_eq!(status, 200, "{b}");
        let id = b["id"].as_str().expect("id").to_string();
        let b = wait_for(&base, &id, Duration::from_secs(300), |b| {
            b["request_counts"]["completed"].as_u64() >= Some(10)
        })
        .await;
        assert_eq!(b["status"], "in_progress", "{b}");
        id
    });
    // A crash in the middle of the batch.
    drop(server);

    let server = serve_on(&state, &usage);
    assert!(
        server.log_tail().contains("resumed=1"),
        "{}",
        server.log_tail()
    );
    block_on(async {
        let base = server.base_url();
        // Past `finalizing` too: the output file is written between it and `completed`.
        let b = wait_for(&base, &id, Duration::from_secs(600), |b| {
            b["status"] != "in_progress" && b["status"] != "finalizing"
        })
        .await;
        assert_eq!(b["status"], "completed", "{b}");
        assert_eq!(b["request_counts"]["completed"], LINES, "{b}");
        assert_eq!(b["request_counts"]["failed"], 0, "{b}");
        let out = content(&base, b["output_file_id"].as_str().expect("output")).await;
        let mut seen: HashMap<String, usize> = HashMap::new();
        for line in out.lines() {
            let v: Value = serde_json::from_str(line).expect("output line");
            assert_eq!(v["response"]["status_code"], 200, "{v}");
            *seen
                .entry(v["custom_id"].as_str().expect("custom_id").into())
                .or_default() += 1;
        }
        assert_eq!(seen.len(), LINES, "{out}");
        assert!(seen.values().all(|&n| n == 1), "{seen:?}");

        // The lines are metered, apart from interactive use.
        let (status, usage) = call(
            &base,
            reqwest::Method::GET,
            "/admin/usage",
            Some("sk-admin"),
            None,
        )
        .await;
        assert_eq!(status, 200, "{usage}");
        let rows = usage["data"].as_array().expect("rows");
        let batch_rows: Vec<_> = rows.iter().filter(|r| r["batch"] == true).collect();
        assert_eq!(batch_rows.len(), 1, "{usage}");
        assert!(
            batch_rows[0]["requests"].as_u64() >= Some(LINES as u64),
            "{usage}"
        );
        assert!(
            rows.iter().all(|r| r["batch"] == true),
            "no interactive use was made: {usage}"
        );
    });
}

#[test]
fn kiln_batch_submits_follows_and_writes_the_results() {
    let data = tempfile::tempdir().expect("tempdir");
    let server = serve_on(
        &data.path().join("state"),
        &data.path().join("usage.sqlite3"),
    );
    let input = data.path().join("jobs.jsonl");
    let mut lines = chat_lines(5, 4);
    lines.push_str("{\"custom_id\": \"broken\"}\n");
    // An id far past the cap fails its line alone, and is not kept.
    let huge = json!({"custom_id": "x".repeat(100_000), "method": "POST",
                      "url": "/v1/chat/completions", "body": {"messages": []}});
    lines.push_str(&format!("{huge}\n"));
    std::fs::write(&input, lines).expect("write input");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args([
            "batch",
            &input.to_string_lossy(),
            "--server",
            &server.base_url(),
        ])
        .args(["--api-key", KEY, "--poll-interval", "0.2"])
        .output()
        .expect("run kiln batch");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let read = |suffix: &str| {
        let path = data.path().join(format!("jobs.jsonl.{suffix}"));
        std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{}: {e}\n{stderr}", path.display()))
    };
    let answered: Vec<Value> = read("output.jsonl")
        .lines()
        .map(|l| serde_json::from_str(l).expect("json"))
        .collect();
    let ids: Vec<_> = answered
        .iter()
        .map(|v| v["custom_id"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(
        ids,
        ["line-0", "line-1", "line-2", "line-3", "line-4"],
        "{stderr}"
    );
    let failed = read("errors.jsonl");
    assert!(
        failed.contains("\"broken\"") && failed.contains("invalid_method"),
        "{failed}"
    );
    assert!(
        failed.contains("invalid_custom_id")
            && failed.contains("line 7: `custom_id` is 100000 characters long; at most 512")
            && failed.len() < 2000,
        "{failed}"
    );
    assert!(
        stderr.contains("5 answered lines") && stderr.contains("2 failed lines"),
        "{stderr}"
    );
}
