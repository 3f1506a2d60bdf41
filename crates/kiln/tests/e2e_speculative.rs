//! Speculative decoding end to end on qwen2.5-coder-0.5b-instruct: a code edit (a file
//! of Kiln's own source with a small change asked for) comes back the same with
//! speculation on and with `"speculative": false`, streamed or not; `usage` and
//! `/metrics` report the drafts; tool calls and JSON-schema output are the same on and
//! off; `kiln serve --speculative off` drafts nothing; a bad `speculative` is a 400.

mod support;

use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use serde_json::{json, Value};
use support::*;

const QWEN: &str = "qwen2.5-coder-0.5b-instruct";
const SERVE_ARGS: &[&str] = &["--kv-cache-memory", "256MiB", "--max-model-len", "4096"];
/// A file to edit: 116 lines of Kiln's own source.
const SOURCE: &str = include_str!("../../kiln-engine/src/stop.rs");

fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

fn code_edit(extra: Value) -> Value {
    let prompt = format!(
        "Here is a Rust source file:\n\n```rust\n{SOURCE}```\n\nRename the type `StopMatcher` \
         to `StopScanner` everywhere. Reply with the whole updated file in one ```rust code \
         block and nothing else."
    );
    let mut body = json!({
        "model": QWEN,
        "messages": [{"role": "user", "content": prompt}],
        "temperature": 0,
        "max_tokens": 400,
    });
    merge(&mut body, extra);
    body
}

fn merge(body: &mut Value, extra: Value) {
    if let (Some(b), Value::Object(e)) = (body.as_object_mut(), extra) {
        b.extend(e);
    }
}

async fn chat(base: &str, body: &Value) -> Value {
    let (status, v) = post(base, "/v1/chat/completions", body).await;
    assert_eq!(status, 200, "{v}");
    v
}

fn content(v: &Value) -> &str {
    v["choices"][0]["message"]["content"].as_str().unwrap_or("")
}

/// The streamed text of a chat request.
async fn streamed(base: &str, body: &Value) -> String {
    let mut body = body.clone();
    merge(&mut body, json!({"stream": true}));
    let resp = client()
        .post(format!("{base}/v1/chat/completions"))
        .json(&body)
        .send()
        .await
        .unwrap_or_else(|e| panic!("stream: {e}"));
    assert_eq!(resp.status(), 200);
    let text = resp.text().await.unwrap_or_default();
    text.lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter(|d| *d != "[DONE]")
        .filter_map(|d| serde_json::from_str::<Value>(d).ok())
        .filter_map(|c| {
            c["choices"][0]["delta"]["content"]
                .as_str()
                .map(String::from)
        })
        .collect()
}

#[test]
fn a_code_edit_is_the_same_with_speculation_on_and_off_and_reports_its_drafts() {
    let _serial = serial();
    let server = start_model(QWEN, SERVE_ARGS);
    let base = server.base_url();
    block_on(async {
        let off = chat(&base, &code_edit(json!({"speculative": false}))).await;
        assert!(off["usage"].get("speculative").is_none(), "{off}");
        let on = chat(&base, &code_edit(json!({}))).await;
        assert!(
            content(&off).contains("StopScanner"),
            "the edit was made: {off}"
        );
        assert_eq!(content(&on), content(&off), "greedy output must not change");
        let spec = &on["usage"]["speculative"];
        let (drafted, accepted) = (
            spec["draft_tokens"].as_u64().unwrap_or(0),
            spec["accepted_tokens"].as_u64().unwrap_or(0),
        );
        assert!(drafted > 0 && accepted > 0, "{}", on["usage"]);
        let rate = spec["acceptance_rate"].as_f64().unwrap_or(-1.0);
        assert!((rate - accepted as f64 / drafted as f64).abs() < 1e-9);
        assert_eq!(streamed(&base, &code_edit(json!({}))).await, content(&off));

        let text = metrics_text(&base).await;
        let series = |name: &str| {
            series_value(&text, &format!("{name}{{model_name=\"{QWEN}\"}} ")).unwrap_or(-1.0)
        };
        assert!(series("kiln:spec_decode_num_drafts_total") > 0.0, "{text}");
        assert!(series("kiln:spec_decode_num_draft_tokens_total") >= drafted as f64);
        assert!(series("kiln:spec_decode_num_accepted_tokens_total") >= accepted as f64);
        let first = format!(
            "kiln:spec_decode_num_accepted_tokens_per_pos_total{{model_name=\"{QWEN}\",position=\"0\"}} "
        );
        assert!(series_value(&text, &first).unwrap_or(0.0) > 0.0, "{text}");
        wait_until_idle_model(&base).await;
    });
}

async fn wait_until_idle_model(base: &str) {
    for _ in 0..100 {
        let kv = model_metric(base, QWEN, "kiln:kv_cache_usage_perc").await;
        if kv == 0.0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("KV blocks still held after the requests ended");
}

#[test]
fn tool_calls_and_json_schema_output_are_the_same_on_and_off() {
    let _serial = serial();
    let server = start_model(QWEN, SERVE_ARGS);
    let base = server.base_url();
    let tools = json!([{"type": "function", "function": {"name": "write_file",
        "description": "Write a file",
        "parameters": {"type": "object", "properties": {
            "path": {"type": "string"}, "text": {"type": "string"}},
            "required": ["path", "text"], "additionalProperties": false}}}]);
    let record =
        "{\"name\": \"kiln\", \"version\": \"0.1.0\", \"tags\": [\"engine\", \"edge\", \"rust\"]}";
    let requests = [
        json!({"model": QWEN, "temperature": 0, "max_tokens": 200, "tools": tools,
            "tool_choice": "required",
            "messages": [{"role": "user", "content":
                "Save this exact text to notes/todo.txt: `- write the tests\n- run the tests\n- ship it`"}]}),
        json!({"model": QWEN, "temperature": 0, "max_tokens": 200,
            "response_format": {"type": "json_schema", "json_schema": {"name": "pkg", "schema": {
                "type": "object", "properties": {"name": {"type": "string"},
                "version": {"type": "string"}, "tags": {"type": "array", "items": {"type": "string"}}},
                "required": ["name", "version", "tags"], "additionalProperties": false}}},
            "messages": [{"role": "user", "content": format!("Repeat this JSON exactly: {record}")}]}),
    ];
    block_on(async {
        let mut drafted = 0;
        for req in requests {
            let mut off_req = req.clone();
            merge(&mut off_req, json!({"speculative": false}));
            let off = chat(&base, &off_req).await;
            let on = chat(&base, &req).await;
            assert_eq!(without_ids(&on), without_ids(&off));
            drafted += on["usage"]["speculative"]["draft_tokens"]
                .as_u64()
                .unwrap_or(0);
            let msg = &on["choices"][0]["message"];
            match msg["tool_calls"][0]["function"]["arguments"].as_str() {
                Some(args) => {
                    let args: Value = serde_json::from_str(args).expect("arguments are JSON");
                    assert!(args["path"].is_string(), "{msg}");
                }
                None => {
                    let v: Value = serde_json::from_str(content(&on)).expect("JSON output");
                    assert!(v["tags"].is_array(), "{v}");
                }
            }
        }
        assert!(drafted > 0, "constrained output was drafted too");
    });
}

/// The reply's message with the tool calls' random ids removed.
fn without_ids(v: &Value) -> Value {
    let mut msg = v["choices"][0]["message"].clone();
    if let Some(calls) = msg["tool_calls"].as_array_mut() {
        calls.iter_mut().for_each(|c| c["id"] = Value::Null);
    }
    msg
}

#[test]
fn speculative_off_drafts_nothing_and_a_bad_field_is_a_400() {
    let _serial = serial();
    let args = [SERVE_ARGS, &["--speculative", "off"]].concat();
    let server = start_model(QWEN, &args);
    let base = server.base_url();
    block_on(async {
        let v = chat(&base, &code_edit(json!({"max_tokens": 64}))).await;
        assert!(v["usage"].get("speculative").is_none(), "{v}");
        assert_eq!(
            model_metric(&base, QWEN, "kiln:spec_decode_num_drafts_total").await,
            0.0
        );
        let (status, body) = post(
            &base,
            "/v1/chat/completions",
            &code_edit(json!({"speculative": "sometimes"})),
        )
        .await;
        assert_eq!(status, 400, "{body}");
        assert_eq!(body["error"]["type"], "invalid_request_error", "{body}");
    });
}
