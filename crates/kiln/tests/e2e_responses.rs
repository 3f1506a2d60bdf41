//! The Responses API end to end:
//!
//! - the official `openai` SDK (`python/responses_checks.py`) on qwen2.5-coder-0.5b-instruct:
//!   chains, streaming events, function tools, JSON schema output, store and delete,
//!   per-key scoping, background runs and cancel, remote MCP tools against the official
//!   `mcp` SDK's server (`python/mcp_server.py`), approvals, an unreachable server, errors,
//!   and re-streaming (`GET /v1/responses/{id}?stream=true&starting_after=n`), which
//!   also runs alone on the small test model;
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

/// The re-streaming checks alone, on the small test model: a foreground response is not
/// re-streamed (400), a background run followed from the middle to its end and then
/// re-streamed whole and from after event k, a bad `starting_after`, another key's
/// response; a background response created streamed, left, and re-streamed to its end.
#[test]
fn python_restream_checks_pass() {
    let data = tempfile::tempdir().expect("tempdir");
    let dir = data.path().to_string_lossy().to_string();
    let server = start(&[
        "--kv-cache-memory",
        "128MiB",
        "--api-key",
        "sk-first",
        "--api-key",
        "sk-second",
        "--data-dir",
        &dir,
    ]);
    let out = run_script_with(
        "responses_checks.py",
        &server.base_url(),
        MODEL,
        // No MCP server: these checks do not call one.
        &["http://127.0.0.1:9/mcp", "sk-first", "sk-second"]
            .into_iter()
            .chain([
                "restream stored",
                "restream background",
                "background stream",
            ])
            .collect::<Vec<_>>(),
        Duration::from_secs(600),
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success()
            && stdout.lines().last() == Some("selected responses checks passed")
            && stdout.matches("ok: restream").count() == 2
            && stdout.contains("ok: background stream"),
        "{stdout}\n{}\n--- server\n{}",
        String::from_utf8_lossy(&out.stderr),
        server.log_tail()
    );
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

        // A client that saw the cut run's first events and resumes after them gets the
        // new run whole, from its `response.created`: never another run's tail.
        let sse = client()
            .get(format!(
                "{base}/v1/responses/{rid}?stream=true&starting_after=5"
            ))
            .send()
            .await
            .expect("re-stream")
            .text()
            .await
            .expect("events");
        let first: serde_json::Value = sse
            .lines()
            .find_map(|l| l.strip_prefix("data: "))
            .and_then(|d| serde_json::from_str(d).ok())
            .unwrap_or_else(|| panic!("no event: {sse}"));
        assert_eq!(first["type"], "response.created", "{first}");
        assert_eq!(first["sequence_number"], 1u64 << 32, "{first}");

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

/// Prompt and completion tokens metered so far (`/admin/usage` totals), once they have
/// stopped moving and differ from `before`, or stay at `before` for `settle`.
async fn metered(base: &str, before: (u64, u64), settle: Duration) -> (u64, u64) {
    let read = || async {
        let (status, u) = get(base, "/admin/usage").await;
        assert_eq!(status, 200, "{u}");
        let n = |k: &str| u["totals"][k].as_u64().unwrap_or(0);
        (n("prompt_tokens"), n("completion_tokens"))
    };
    let deadline = Instant::now() + settle;
    let mut last = read().await;
    loop {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let now = read().await;
        if (now != before && now == last) || Instant::now() > deadline {
            return now;
        }
        last = now;
    }
}

/// The stored response `id` once it has ended.
async fn ended(base: &str, id: &str) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        // A streamed response is stored whole when it ends: 404 until then.
        let (status, r) = get(base, &format!("/v1/responses/{id}")).await;
        assert!(status == 200 || status == 404, "{status}: {r}");
        if status == 200 && !matches!(r["status"].as_str(), Some("queued" | "in_progress")) {
            return r;
        }
        assert!(Instant::now() < deadline, "never ended: {r}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn stored_usage(r: &serde_json::Value) -> (u64, u64) {
    let n = |k: &str| r["usage"][k].as_u64().unwrap_or(0);
    (n("input_tokens"), n("output_tokens"))
}

#[test]
fn stored_usage_equals_metered_usage_however_a_response_ends() {
    let data = tempfile::tempdir().expect("tempdir");
    let server = serve_on(data.path());
    let base = server.base_url();
    let long = "Write a long story about a lighthouse keeper and her cat.";
    block_on(async {
        let mut before = metered(&base, (u64::MAX, 0), Duration::from_secs(1)).await;
        let check = |label: &str, r: &serde_json::Value, before: &mut (u64, u64), now| {
            let (now, then): ((u64, u64), (u64, u64)) = (now, *before);
            let delta = (now.0 - then.0, now.1 - then.1);
            assert_eq!(
                stored_usage(r),
                delta,
                "{label}: stored against metered: {r}"
            );
            *before = now;
        };

        // Completed.
        let (status, r) = post(
            &base,
            "/v1/responses",
            &json!({"input": "Say hello.", "max_output_tokens": 12, "temperature": 0}),
        )
        .await;
        assert_eq!(status, 200, "{r}");
        assert!(stored_usage(&r).1 > 0, "{r}");
        let now = metered(&base, before, Duration::from_secs(30)).await;
        check("completed", &r, &mut before, now);

        // A stream the client cuts after a few words.
        let mut resp = fresh_client()
            .post(format!("{base}/v1/responses"))
            .json(
                &json!({"input": long, "max_output_tokens": 400, "stream": true,
                          "temperature": 0}),
            )
            .send()
            .await
            .expect("stream");
        let mut sse = String::new();
        while sse.matches("response.output_text.delta").count() < 4 {
            let chunk = resp.chunk().await.expect("chunk").expect("more events");
            sse.push_str(&String::from_utf8_lossy(&chunk));
        }
        drop(resp);
        let id = sse
            .split("\"id\":\"")
            .nth(1)
            .and_then(|s| s.split('"').next())
            .expect("response id")
            .to_string();
        let cut = ended(&base, &id).await;
        assert_eq!(cut["status"], "cancelled", "{cut}");
        assert_eq!(cut["output"][0]["status"], "incomplete", "{cut}");
        assert!(stored_usage(&cut).1 >= 3, "{cut}");
        let now = metered(&base, before, Duration::from_secs(30)).await;
        check("cut stream", &cut, &mut before, now);

        // A background run cancelled mid-answer.
        let (status, bg) = post(
            &base,
            "/v1/responses",
            &json!({"input": long, "max_output_tokens": 400, "background": true,
                    "temperature": 0}),
        )
        .await;
        assert_eq!(status, 200, "{bg}");
        let id = bg["id"].as_str().expect("id").to_string();
        tokio::time::sleep(Duration::from_millis(800)).await;
        let (status, c) = post(&base, &format!("/v1/responses/{id}/cancel"), &json!({})).await;
        assert_eq!(status, 200, "{c}");
        let cancelled = ended(&base, &id).await;
        assert_eq!(cancelled["status"], "cancelled", "{cancelled}");
        let now = metered(&base, before, Duration::from_secs(30)).await;
        check("cancelled", &cancelled, &mut before, now);

        // Failed before the model ran: nothing stored, nothing metered.
        let (status, failed) = post(
            &base,
            "/v1/responses",
            &json!({"input": "hi", "tools": [{"type": "mcp", "server_label": "x",
                    "server_url": "http://127.0.0.1:9/mcp", "require_approval": "never"}]}),
        )
        .await;
        assert_eq!(status, 200, "{failed}");
        assert_eq!(failed["status"], "failed", "{failed}");
        let now = metered(&base, before, Duration::from_secs(2)).await;
        check("failed", &failed, &mut before, now);
    });
}
