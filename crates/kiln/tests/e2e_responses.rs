//! The Responses API end to end:
//!
//! - the official `openai` SDK (`python/responses_checks.py`) on qwen2.5-coder-0.5b-instruct:
//!   chains, streaming events, function tools, JSON schema output, store and delete,
//!   per-key scoping, background runs and cancel, remote MCP tools against the official
//!   `mcp` SDK's server (`python/mcp_server.py`), approvals, an unreachable server, errors;
//! - a crash and restart: stored responses and a background run in flight survive (the
//!   run is resumed and completes), and a conversation continues from a stored response;
//! - a response store that is not a database stops the server with a message naming it,
//!   and so does a data directory another server holds.

mod support;

use std::path::Path;
use std::time::{Duration, Instant};

use kiln_testkit::server::ServerProcess;
use serde_json::json;
use support::python::{assert_checks_passed, run_script_with, McpFixture};
use support::*;

const QWEN: &str = "qwen2.5-coder-0.5b-instruct";

#[test]
fn python_responses_checks_pass() {
    let mcp = McpFixture::start("mcp-secret");
    let data = tempfile::tempdir().expect("tempdir");
    let dir = data.path().to_string_lossy().to_string();
    let server = start_model(
        QWEN,
        &[
            "--kv-cache-memory",
            "256MiB",
            "--max-model-len",
            "4096",
            "--api-key",
            "sk-first",
            "--api-key",
            "sk-second",
            "--data-dir",
            &dir,
            // The MCP fixture listens on loopback, which is refused by default.
            "--outbound-allow",
            "127.0.0.1",
        ],
    );
    let out = run_script_with(
        "responses_checks.py",
        &server.base_url(),
        QWEN,
        &[&mcp.url, "sk-first", "sk-second"],
        Duration::from_secs(1500),
    );
    assert_checks_passed(&out, "responses", &server.log_tail());
}

fn serve_on(data: &Path) -> ServerProcess {
    let dir = data.to_string_lossy().to_string();
    start(&["--data-dir", &dir, "--kv-cache-memory", "128MiB"])
}

#[test]
fn responses_and_a_background_run_survive_a_crash() {
    let data = tempfile::tempdir().expect("tempdir");
    let server = serve_on(data.path());
    let base = server.base_url();
    let (stored, running) = block_on(async {
        let (status, stored) = post(
            &base,
            "/v1/responses",
            &json!({"input": "My favourite colour is teal.", "max_output_tokens": 16,
                    "temperature": 0}),
        )
        .await;
        assert_eq!(status, 200, "{stored}");
        let (status, running) = post(
            &base,
            "/v1/responses",
            &json!({"input": "Write a long story about a lighthouse keeper.",
                    "max_output_tokens": 300, "background": true, "temperature": 0}),
        )
        .await;
        assert_eq!(status, 200, "{running}");
        assert_eq!(running["status"], "queued", "{running}");
        (stored, running)
    });
    // A crash (SIGKILL) while the background run is in flight.
    drop(server);

    let server = serve_on(data.path());
    let base = server.base_url();
    assert!(
        server.log_tail().contains("resumed=1"),
        "{}",
        server.log_tail()
    );
    block_on(async {
        let id = stored["id"].as_str().expect("id");
        let (status, again) = get(&base, &format!("/v1/responses/{id}")).await;
        assert_eq!(status, 200, "{again}");
        assert_eq!(again["output"], stored["output"]);
        assert_eq!(again["status"], stored["status"]);
        let (status, items) = get(&base, &format!("/v1/responses/{id}/input_items")).await;
        assert_eq!(status, 200, "{items}");
        assert_eq!(
            items["data"][0]["content"][0]["text"],
            "My favourite colour is teal."
        );

        // The background run was resumed at start, and finishes.
        let rid = running["id"].as_str().expect("id");
        let deadline = Instant::now() + Duration::from_secs(600);
        let done = loop {
            let (status, r) = get(&base, &format!("/v1/responses/{rid}")).await;
            assert_eq!(status, 200, "{r}");
            if !matches!(r["status"].as_str(), Some("queued" | "in_progress")) {
                break r;
            }
            assert!(
                Instant::now() < deadline,
                "background run never finished: {r}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        assert!(
            matches!(done["status"].as_str(), Some("completed" | "incomplete")),
            "{done}"
        );
        let text = done["output"][0]["content"][0]["text"]
            .as_str()
            .unwrap_or("");
        assert!(!text.is_empty(), "{done}");
        assert_eq!(done["created_at"], running["created_at"]);

        // The conversation continues from the stored response.
        let (status, next) = post(
            &base,
            "/v1/responses",
            &json!({"input": "What is my favourite colour? One word.",
                    "previous_response_id": id, "max_output_tokens": 8, "temperature": 0}),
        )
        .await;
        assert_eq!(status, 200, "{next}");
        assert_eq!(next["previous_response_id"], id);
        let first = stored["usage"]["input_tokens"].as_u64().expect("tokens");
        let later = next["usage"]["input_tokens"].as_u64().expect("tokens");
        assert!(
            later > first,
            "the chain was not re-rendered: {first} then {later}"
        );
    });
}

/// What a server on data directory `data` says when it refuses to start.
fn refused_on(data: &Path) -> String {
    kiln_testkit::model_dir(MODEL);
    let dir = data.to_string_lossy().to_string();
    ServerProcess::start(
        Path::new(env!("CARGO_BIN_EXE_kiln")),
        &["--model", MODEL, "--data-dir", &dir],
        Duration::from_secs(120),
    )
    .err()
    .expect("the server must refuse to start")
}

#[test]
fn a_response_store_that_is_not_a_database_is_a_clear_error() {
    let data = tempfile::tempdir().expect("tempdir");
    std::fs::write(
        data.path().join("responses.sqlite3"),
        b"this is not an SQLite database, only some text long enough to be read",
    )
    .expect("write");
    let err = refused_on(data.path());
    assert!(err.contains("responses.sqlite3"), "{err}");
    assert!(err.contains("response store"), "{err}");
}

#[test]
fn a_second_server_on_the_same_data_dir_is_refused() {
    let data = tempfile::tempdir().expect("tempdir");
    let _first = serve_on(data.path());
    let err = refused_on(data.path());
    assert!(err.contains("in use by another kiln serve"), "{err}");
}
