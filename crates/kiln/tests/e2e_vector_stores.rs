//! Vector stores and `file_search` end to end, on real server processes with real
//! embeddings (all-minilm-l6-v2) and a real chat model (qwen2.5-coder-0.5b-instruct):
//!
//! - the official `openai` SDK (`python/vector_store_checks.py`): upload, attach and
//!   poll, file batches, search with filters, chunking, paging, attribute updates,
//!   detach and delete, unreadable files, per-key isolation, 400s naming the field,
//!   and `file_search` in a response and in a chat completion;
//! - a crash (SIGKILL) in the middle of a file's ingestion: the restarted server
//!   ingests it again to the same chunks, and what was stored survives.

mod support;

use std::path::Path;
use std::time::{Duration, Instant};

use kiln_testkit::server::ServerProcess;
use serde_json::{json, Value};
use support::python::{assert_checks_passed, run_script_with};
use support::*;

const MINILM: &str = "all-minilm-l6-v2";
const QWEN: &str = "qwen2.5-coder-0.5b-instruct";
const KEY: &str = "sk-stores";

#[test]
fn python_vector_store_checks_pass() {
    kiln_testkit::model_dir(QWEN);
    let data = tempfile::tempdir().expect("tempdir");
    let dir = data.path().to_string_lossy();
    let server = start_model(
        MINILM,
        &[
            "--model",
            QWEN,
            "--data-dir",
            &dir,
            "--kv-cache-memory",
            "256MiB",
            "--api-key",
            KEY,
            "--api-key",
            "sk-other",
        ],
    );
    let out = run_script_with(
        "vector_store_checks.py",
        &server.base_url(),
        QWEN,
        &[KEY, "sk-other"],
        Duration::from_secs(1200),
    );
    assert_checks_passed(&out, "vector store", &server.log_tail());
}

fn serve(data: &Path) -> ServerProcess {
    let dir = data.to_string_lossy();
    start_model(MINILM, &["--data-dir", &dir, "--api-key", KEY])
}

async fn json_call(base: &str, method: reqwest::Method, path: &str, body: Option<Value>) -> Value {
    let (status, v) = call(base, method, path, Some(KEY), body.as_ref()).await;
    assert_eq!(status, 200, "{path}: {v}");
    v
}

async fn upload(base: &str, name: &str, text: String) -> String {
    upload_file(base, KEY, name, "assistants", text).await
}

async fn file_status(base: &str, vs: &str, file: &str) -> Value {
    json_call(
        base,
        reqwest::Method::GET,
        &format!("/v1/vector_stores/{vs}/files/{file}"),
        None,
    )
    .await
}

async fn wait_done(base: &str, vs: &str, file: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let f = file_status(base, vs, file).await;
        if f["status"] != "in_progress" {
            return f;
        }
        assert!(Instant::now() < deadline, "ingestion stuck: {f}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A text long enough that its ingestion takes seconds: numbered facts about kilns.
fn long_text() -> String {
    (0..3000)
        .map(|i| {
            format!(
                "Kiln {i} is fired to {} degrees by crew {}.",
                900 + i,
                i % 17
            )
        })
        .collect::<Vec<_>>()
        .join(" ")
}

async fn search(base: &str, vs: &str, query: &str) -> Vec<Value> {
    let page = json_call(
        base,
        reqwest::Method::POST,
        &format!("/v1/vector_stores/{vs}/search"),
        Some(json!({"query": query, "max_num_results": 50})),
    )
    .await;
    page["data"].as_array().cloned().unwrap_or_default()
}

#[test]
fn ingestion_cut_by_a_crash_resumes_to_the_same_chunks() {
    let data = tempfile::tempdir().expect("tempdir");
    let server = serve(data.path());
    let (vs, file, reference) = block_on(async {
        let base = server.base_url();
        let small = upload(&base, "small.md", "Ember is the salamander mascot.".into()).await;
        let store = json_call(
            &base,
            reqwest::Method::POST,
            "/v1/vector_stores",
            Some(json!({"name": "crash", "file_ids": [small]})),
        )
        .await;
        let vs = store["id"].as_str().expect("id").to_string();
        assert_eq!(wait_done(&base, &vs, &small).await["status"], "completed");
        // The same long file ingested once without a crash, in a store of its own, to
        // compare against.
        let twin = upload(&base, "twin.txt", long_text()).await;
        let other = json_call(
            &base,
            reqwest::Method::POST,
            "/v1/vector_stores",
            Some(json!({"name": "reference", "file_ids": [twin]})),
        )
        .await;
        let other = other["id"].as_str().expect("id").to_string();
        let reference = wait_done(&base, &other, &twin).await;
        assert_eq!(reference["status"], "completed", "{reference}");
        let file = upload(&base, "long.txt", long_text()).await;
        let f = json_call(
            &base,
            reqwest::Method::POST,
            &format!("/v1/vector_stores/{vs}/files"),
            Some(json!({"file_id": file})),
        )
        .await;
        assert_eq!(f["status"], "in_progress", "{f}");
        // Let it get going, then crash while it is still in progress.
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let f = file_status(&base, &vs, &file).await;
        assert_eq!(
            f["status"], "in_progress",
            "ingestion ended too soon to crash: {f}"
        );
        (vs, file, reference)
    });
    drop(server);

    let server = serve(data.path());
    block_on(async {
        let base = server.base_url();
        let f = wait_done(&base, &vs, &file).await;
        assert_eq!(f["status"], "completed", "{f}");
        // The same chunks as the uncut ingestion: its usage counts text and vectors.
        assert_eq!(
            f["usage_bytes"], reference["usage_bytes"],
            "{f} vs {reference}"
        );
        let hits = search(&base, &vs, "Kiln 1234 is fired to 2134 degrees").await;
        let texts: Vec<&str> = hits
            .iter()
            .map(|h| h["content"][0]["text"].as_str().unwrap_or_default())
            .collect();
        let mut unique = texts.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(
            unique.len(),
            texts.len(),
            "a chunk came back twice: {texts:?}"
        );
        assert!(
            hits.iter()
                .all(|h| h["filename"] == "long.txt" || h["filename"] == "small.md"),
            "{hits:?}"
        );
        // What was stored before the crash is still there.
        let hits = search(&base, &vs, "Who is the mascot?").await;
        assert!(hits.iter().any(|h| h["filename"] == "small.md"), "{hits:?}");
        let store = json_call(
            &base,
            reqwest::Method::GET,
            &format!("/v1/vector_stores/{vs}"),
            None,
        )
        .await;
        assert_eq!(store["file_counts"]["completed"], 2, "{store}");
        assert_eq!(store["status"], "completed", "{store}");
    });
}
