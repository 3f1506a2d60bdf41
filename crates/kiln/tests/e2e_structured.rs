//! Structured outputs and tool calls end to end, on qwen2.5-coder-0.5b-instruct:
//!
//! - the official `openai` SDK with `jsonschema` (`python/structured_checks.py`): JSON
//!   schemas, pydantic `parse`, vLLM's guided fields, tools (required, named, auto,
//!   none, streamed, a continued conversation), 400s, Workers AI, concurrency; then the
//!   constraint metrics;
//! - raw HTTP: the 400 error shape for bad constraint fields;
//! - determinism: a seeded sampled JSON-schema request gives the same output twice, and
//!   alone or batched with other requests.
//!
//! The Python packages are installed with pip on first run (`support::python`); if they
//! can't be, the test fails: it never skips.

mod support;

use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use serde_json::{json, Value};
use support::python::{assert_checks_passed, run_script, venv_python};
use support::*;

const QWEN: &str = "qwen2.5-coder-0.5b-instruct";
const SERVE_ARGS: &[&str] = &["--kv-cache-memory", "256MiB", "--max-model-len", "4096"];

/// One server at a time: the machine is small, and the determinism test wants the
/// batch it builds, not a neighbour's.
fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

#[test]
fn python_structured_checks_pass() {
    let _serial = serial();
    venv_python();
    let server = start_model(QWEN, SERVE_ARGS);
    let base = server.base_url();
    let out = run_script(
        "structured_checks.py",
        &base,
        QWEN,
        Duration::from_secs(1500),
    );
    // The constrained requests show in the metrics (read first, so a failing script
    // still reports them).
    let (constrained, mask, wait) = block_on(async {
        (
            model_metric(&base, QWEN, "kiln:constrained_sequences_total").await,
            model_metric(&base, QWEN, "kiln:engine_mask_seconds_total").await,
            model_metric(&base, QWEN, "kiln:engine_mask_wait_seconds_total").await,
        )
    });
    eprintln!("constrained sequences {constrained}, mask {mask} s, mask wait {wait} s");
    assert_checks_passed(&out, "structured", &server.log_tail());
    assert!(
        constrained > 0.0,
        "constrained_sequences_total {constrained}"
    );
    assert!(mask > 0.0, "engine_mask_seconds_total {mask}");
    assert!(wait >= 0.0, "engine_mask_wait_seconds_total {wait}");
}

fn tools() -> Value {
    json!([{"type": "function", "function": {"name": "get_weather",
        "description": "Get the current weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
            "required": ["city"], "additionalProperties": false}}}])
}

/// Asserts OpenAI's error shape with `param` starting with `param`.
fn assert_invalid(status: u16, body: &Value, param: &str) {
    assert_eq!(status, 400, "{body}");
    let e = &body["error"];
    assert_eq!(e["type"], "invalid_request_error", "{body}");
    assert!(
        e["message"].as_str().is_some_and(|m| !m.is_empty()),
        "{body}"
    );
    assert!(
        e.as_object().is_some_and(|o| o.contains_key("code")),
        "{body}"
    );
    assert!(
        e["param"].as_str().is_some_and(|p| p.starts_with(param)),
        "param should be {param}: {body}"
    );
}

#[test]
fn bad_constraints_are_openai_400s() {
    let _serial = serial();
    let server = start_model(QWEN, SERVE_ARGS);
    let base = server.base_url();
    let chat = |extra: Value| {
        let mut body = json!({"model": QWEN, "max_tokens": 4,
            "messages": [{"role": "user", "content": "Hi"}]});
        for (k, v) in extra.as_object().expect("object") {
            body[k] = v.clone();
        }
        body
    };
    block_on(async {
        let cases = [
            (
                json!({"tools": tools(), "tool_choice": "bogus"}),
                "tool_choice",
            ),
            (json!({"tool_choice": "required"}), "tool_choice"),
            (
                json!({"tools": tools(), "tool_choice": {"type": "function", "function": {"name": "nope"}}}),
                "tool_choice",
            ),
            (
                json!({"response_format": {"type": "json_schema",
                    "json_schema": {"name": "x", "schema": {"type": "nonsense"}}}}),
                "response_format",
            ),
            (
                json!({"response_format": {"type": "xml"}}),
                "response_format",
            ),
            (json!({"guided_regex": "(unclosed"}), "guided_regex"),
        ];
        for (extra, param) in cases {
            let (status, body) = post(&base, "/v1/chat/completions", &chat(extra.clone())).await;
            eprintln!("{extra} -> {status} {body}");
            assert_invalid(status, &body, param);
        }
        let (status, body) = post(
            &base,
            "/v1/completions",
            &json!({"model": QWEN, "prompt": "Hi", "max_tokens": 4, "guided_regex": "(unclosed"}),
        )
        .await;
        assert_invalid(status, &body, "guided_regex");
    });
}

/// A chat request's first choice: finish reason, content and tool calls (names and
/// arguments only: ids are random).
async fn answer(base: &str, body: &Value) -> Value {
    let (status, v) = post(base, "/v1/chat/completions", body).await;
    assert_eq!(status, 200, "{v}");
    let c = &v["choices"][0];
    let calls: Vec<&Value> = c["message"]["tool_calls"]
        .as_array()
        .map(|a| a.iter().map(|t| &t["function"]).collect())
        .unwrap_or_default();
    json!({"finish_reason": c["finish_reason"], "content": c["message"]["content"], "calls": calls})
}

#[test]
fn seeded_constrained_sampling_is_deterministic_and_batch_invariant() {
    let _serial = serial();
    let server = start_model(QWEN, SERVE_ARGS);
    let base = server.base_url();
    let person = json!({"type": "object", "properties": {
            "name": {"type": "string", "maxLength": 40},
            "age": {"type": "integer", "minimum": 0, "maximum": 120},
            "hobbies": {"type": "array", "items": {"type": "string"}, "maxItems": 3}},
        "required": ["name", "age", "hobbies"], "additionalProperties": false});
    let schema_body = |prompt: &str, seed: u64| {
        json!({"model": QWEN, "max_tokens": 200, "temperature": 0.8, "seed": seed,
            "messages": [{"role": "user", "content": prompt}],
            "response_format": {"type": "json_schema",
                "json_schema": {"name": "person", "schema": person, "strict": true}}})
    };
    let target = schema_body("Give me a person record for a chef, in JSON.", 1234);
    let others = [
        schema_body("Give me a person record for a pilot, in JSON.", 7),
        json!({"model": QWEN, "max_tokens": 120, "temperature": 0.8, "seed": 8,
            "messages": [{"role": "user", "content": "Write a short poem about the sea."}]}),
        json!({"model": QWEN, "max_tokens": 120, "temperature": 0.8, "seed": 9,
            "messages": [{"role": "user", "content": "What's the weather in Rome?"}],
            "tools": tools(), "tool_choice": "required"}),
    ];
    block_on(async {
        let alone = answer(&base, &target).await;
        eprintln!("alone: {alone}");
        assert_eq!(alone["finish_reason"], "stop", "{alone}");
        let content = alone["content"].as_str().expect("content");
        serde_json::from_str::<Value>(content).unwrap_or_else(|e| panic!("{e}: {content}"));
        assert_eq!(
            answer(&base, &target).await,
            alone,
            "same seed, different output"
        );
        let (batched, _, _, _) = tokio::join!(
            answer(&base, &target),
            answer(&base, &others[0]),
            answer(&base, &others[1]),
            answer(&base, &others[2]),
        );
        assert_eq!(
            batched, alone,
            "output changed when batched with other requests"
        );
    });
}
