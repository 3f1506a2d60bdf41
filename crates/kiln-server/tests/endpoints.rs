//! The endpoints' successful answers, field by field, on the real model.

mod support;

use axum::http::StatusCode;
use serde_json::{json, Value};
use support::*;

#[tokio::test]
async fn chat_completion_has_openai_fields() {
    let s = state();
    let body = json!({"model": MODEL, "messages": [{"role": "user", "content": "Say hello."}],
        "max_tokens": 5, "temperature": 0, "ignore_eos": true});
    let r = post(&s, "/v1/chat/completions", &body.to_string()).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    let v = r.json();
    assert!(
        v["id"]
            .as_str()
            .is_some_and(|id| id.starts_with("chatcmpl-")),
        "{v}"
    );
    assert_eq!(v["object"], "chat.completion");
    assert_eq!(v["model"], MODEL);
    assert!(v["created"].as_u64().is_some_and(|c| c > 1_600_000_000));
    assert!(v["system_fingerprint"]
        .as_str()
        .is_some_and(|f| f.starts_with("fp_")));
    let c = &v["choices"][0];
    assert_eq!(c["index"], 0);
    assert_eq!(c["message"]["role"], "assistant");
    assert!(c["message"]["content"]
        .as_str()
        .is_some_and(|t| !t.is_empty()));
    assert_eq!(c["finish_reason"], "length");
    assert!(c["logprobs"].is_null());
    let u = &v["usage"];
    assert_eq!(u["completion_tokens"], 5);
    let p = u["prompt_tokens"].as_u64().expect("prompt_tokens");
    assert_eq!(u["total_tokens"].as_u64(), Some(p + 5));
    assert!(u["prompt_tokens_details"]["cached_tokens"].is_u64());
    assert!(r.headers.get("x-request-id").is_some());
}

#[tokio::test]
async fn chat_stream_is_openai_sse_with_usage() {
    let s = state();
    let body = json!({"messages": [{"role": "user", "content": "Count to three."}], "max_tokens": 6,
        "temperature": 0, "ignore_eos": true, "stream": true, "stream_options": {"include_usage": true}, "n": 2});
    let r = post(&s, "/v1/chat/completions", &body.to_string()).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(
        r.headers.get("content-type").and_then(|v| v.to_str().ok()),
        Some("text/event-stream")
    );
    let events = sse_events(&r.text());
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"));
    let chunks: Vec<Value> = events[..events.len() - 1]
        .iter()
        .map(|e| serde_json::from_str(e).expect("chunk JSON"))
        .collect();
    for (i, ch) in chunks.iter().take(2).enumerate() {
        assert_eq!(ch["choices"][0]["index"], i);
        assert_eq!(ch["choices"][0]["delta"]["role"], "assistant");
    }
    assert!(chunks
        .iter()
        .all(|c| c["object"] == "chat.completion.chunk" && c["id"] == chunks[0]["id"]));
    let (usage_chunk, rest) = chunks.split_last().expect("chunks");
    assert_eq!(usage_chunk["choices"], json!([]));
    assert_eq!(usage_chunk["usage"]["completion_tokens"], 12);
    assert!(rest
        .iter()
        .all(|c| c["usage"].is_null() && c.as_object().is_some_and(|o| o.contains_key("usage"))));
    let finished: Vec<&Value> = rest
        .iter()
        .filter(|c| !c["choices"][0]["finish_reason"].is_null())
        .collect();
    assert_eq!(finished.len(), 2);
    assert!(finished
        .iter()
        .all(|c| c["choices"][0]["finish_reason"] == "length"
            && c["choices"][0]["delta"] == json!({})));
}

#[tokio::test]
async fn stream_without_include_usage_has_no_usage_field() {
    let s = state();
    let body = json!({"prompt": "Hello", "max_tokens": 3, "stream": true});
    let events = sse_events(&post(&s, "/v1/completions", &body.to_string()).await.text());
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"));
    for e in &events[..events.len() - 1] {
        let v: Value = serde_json::from_str(e).expect("chunk");
        assert_eq!(v["object"], "text_completion");
        assert!(v.get("usage").is_none(), "{v}");
    }
}

#[tokio::test]
async fn completions_batch_echo_and_logprobs() {
    let s = state();
    let body = json!({"prompt": ["One two", "Red green"], "n": 2, "max_tokens": 3, "temperature": 0,
        "ignore_eos": true, "echo": true, "logprobs": 2});
    let r = post(&s, "/v1/completions", &body.to_string()).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    let v = r.json();
    assert!(v["id"].as_str().is_some_and(|id| id.starts_with("cmpl-")));
    assert_eq!(v["object"], "text_completion");
    let choices = v["choices"].as_array().expect("choices");
    assert_eq!(choices.len(), 4);
    for (i, c) in choices.iter().enumerate() {
        assert_eq!(c["index"], i);
        let prefix = if i < 2 { "One two" } else { "Red green" };
        assert!(
            c["text"]
                .as_str()
                .is_some_and(|t| t.starts_with(prefix) && t.len() > prefix.len()),
            "{c}"
        );
        // Echo with logprobs: the prompt's tokens first (the first has no logprob),
        // then the 3 generated ones.
        let lp = &c["logprobs"];
        let tokens: Vec<&str> = lp["tokens"]
            .as_array()
            .expect("tokens")
            .iter()
            .filter_map(Value::as_str)
            .collect();
        let p = tokens.len() - 3;
        assert!(p >= 2, "{lp}");
        assert_eq!(tokens[..p].concat(), prefix, "{lp}");
        assert_eq!(lp["token_logprobs"].as_array().map(Vec::len), Some(p + 3));
        assert!(lp["token_logprobs"][0].is_null() && lp["top_logprobs"][0].is_null());
        for t in 1..p + 3 {
            assert!(
                lp["token_logprobs"][t].as_f64().is_some_and(|l| l <= 0.0),
                "{lp}"
            );
            assert!(lp["top_logprobs"][t]
                .as_object()
                .is_some_and(|m| !m.is_empty() && m.len() <= 2));
        }
        assert_eq!(lp["text_offset"][0], 0);
        assert!(
            lp["text_offset"][p]
                .as_u64()
                .is_some_and(|o| o as usize >= prefix.len()),
            "{lp}"
        );
    }
    // Greedy: both completions of one prompt agree.
    assert_eq!(choices[0]["text"], choices[1]["text"]);
    assert_eq!(v["usage"]["completion_tokens"], 12);
}

#[tokio::test]
async fn streamed_echo_carries_the_prompts_logprobs_once_each() {
    let s = state();
    let body = json!({"prompt": "Red green blue", "max_tokens": 2, "temperature": 0,
        "ignore_eos": true, "echo": true, "logprobs": 1, "stream": true});
    let plain = {
        let mut b = body.clone();
        b["stream"] = json!(false);
        post(&s, "/v1/completions", &b.to_string()).await.json()
    };
    let r = post(&s, "/v1/completions", &body.to_string()).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    let events = sse_events(&r.text());
    // Merge every chunk's logprobs in order: prompt tokens, then generated ones.
    let (mut tokens, mut logprobs, mut offsets) = (vec![], vec![], vec![]);
    for e in &events[..events.len() - 1] {
        let c: Value = serde_json::from_str(e).expect("chunk JSON");
        let lp = &c["choices"][0]["logprobs"];
        if lp.is_null() {
            continue;
        }
        for i in 0..lp["tokens"].as_array().map_or(0, Vec::len) {
            tokens.push(lp["tokens"][i].clone());
            logprobs.push(lp["token_logprobs"][i].clone());
            offsets.push(lp["text_offset"][i].clone());
        }
    }
    let want = &plain["choices"][0]["logprobs"];
    assert_eq!(
        json!(tokens),
        want["tokens"],
        "streamed tokens equal the plain response's"
    );
    assert_eq!(
        json!(offsets[..tokens.len() - 2]),
        json!(want["text_offset"]
            .as_array()
            .map(|a| a[..a.len() - 2].to_vec()))
    );
    assert!(logprobs[0].is_null());
    for (got, want) in logprobs
        .iter()
        .zip(want["token_logprobs"].as_array().expect("list"))
    {
        if let (Some(g), Some(w)) = (got.as_f64(), want.as_f64()) {
            assert!((g - w).abs() < 1e-4, "{g} vs {w}");
        }
    }
}

#[tokio::test]
async fn chat_logprobs_in_chat_format() {
    let s = state();
    let body = json!({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4, "temperature": 0,
        "ignore_eos": true, "logprobs": true, "top_logprobs": 3});
    let v = post(&s, "/v1/chat/completions", &body.to_string())
        .await
        .json();
    let content = v["choices"][0]["logprobs"]["content"]
        .as_array()
        .expect("content")
        .clone();
    assert_eq!(content.len(), 4);
    for t in content {
        assert!(t["token"].is_string() && t["bytes"].is_array());
        assert!(t["logprob"].as_f64().is_some_and(|l| l <= 0.0));
        assert_eq!(t["top_logprobs"].as_array().map(Vec::len), Some(3));
        assert_eq!(
            t["top_logprobs"][0]["token"], t["token"],
            "greedy picks the top token"
        );
    }
}

#[tokio::test]
async fn workers_ai_run_plain_and_streamed() {
    let s = state();
    let r = post(
        &s,
        "/ai/run/@kiln/smollm2-135m-instruct",
        r#"{"prompt": "Hello", "max_tokens": 4}"#,
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    let v = r.json();
    assert_eq!(v["success"], true);
    assert_eq!(v["errors"], json!([]));
    assert_eq!(v["messages"], json!([]));
    assert!(v["result"]["response"].is_string());
    assert!(v["result"]["usage"]["completion_tokens"]
        .as_u64()
        .is_some_and(|n| (1..=4).contains(&n)));
    let body = json!({"messages": [{"role": "user", "content": "Hello"}], "max_tokens": 4, "stream": true,
        "temperature": 0});
    let events = sse_events(
        &post(&s, "/ai/run/smollm2-135m-instruct", &body.to_string())
            .await
            .text(),
    );
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"));
    let chunks: Vec<Value> = events[..events.len() - 1]
        .iter()
        .map(|e| serde_json::from_str(e).expect("json"))
        .collect();
    assert!(chunks.iter().all(|c| c["response"].is_string()));
    assert!(chunks
        .last()
        .is_some_and(|c| c["usage"]["total_tokens"].is_u64()));
}

#[tokio::test]
async fn tokenize_detokenize_round_trip() {
    let s = state();
    let text = "Hello world, it's Kiln!";
    let v = post(
        &s,
        "/tokenize",
        &json!({"model": MODEL, "prompt": text}).to_string(),
    )
    .await
    .json();
    let tokens = v["tokens"].as_array().expect("tokens").clone();
    assert_eq!(v["count"].as_u64(), Some(tokens.len() as u64));
    assert_eq!(v["max_model_len"], MAX_MODEL_LEN);
    let back = post(&s, "/detokenize", &json!({"tokens": tokens}).to_string())
        .await
        .json();
    assert_eq!(back["prompt"], text);
    let chat = post(
        &s,
        "/tokenize",
        r#"{"messages": [{"role": "user", "content": "Hi"}], "return_token_strs": true}"#,
    )
    .await
    .json();
    let strs = chat["token_strs"].as_array().expect("token_strs");
    assert_eq!(strs.len() as u64, chat["count"].as_u64().unwrap_or(0));
    assert!(strs.iter().any(|s| s == "<|im_start|>"), "{chat}");
    let r = post(&s, "/detokenize", r#"{"tokens": [4294967295]}"#).await;
    assert_error(&r, StatusCode::BAD_REQUEST, Some("tokens"));
}

#[tokio::test]
async fn models_list_and_retrieve() {
    let s = state();
    let v = send(&s, "GET", "/v1/models", None, &[]).await.json();
    assert_eq!(v["object"], "list");
    let m = &v["data"][0];
    assert_eq!(m["id"], MODEL);
    assert_eq!(m["object"], "model");
    assert_eq!(m["owned_by"], "kiln");
    assert_eq!(m["max_model_len"], MAX_MODEL_LEN);
    assert_eq!(m["task"], "text-generation");
    let one = send(&s, "GET", &format!("/v1/models/{MODEL}"), None, &[]).await;
    assert_eq!(one.status, StatusCode::OK);
    assert_eq!(one.json()["id"], MODEL);
    assert_eq!(
        send(&s, "GET", "/ready", None, &[]).await.status,
        StatusCode::OK
    );
}

#[tokio::test]
async fn metrics_are_prometheus_text_with_kiln_names() {
    let s = state();
    let body = json!({"prompt": "Metrics", "max_tokens": 3, "ignore_eos": true});
    assert_eq!(
        post(&s, "/v1/completions", &body.to_string()).await.status,
        StatusCode::OK
    );
    let r = send(&s, "GET", "/metrics", None, &[]).await;
    assert!(r
        .headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|c| c.starts_with("text/plain")));
    let text = r.text();
    let label = format!("{{model_name=\"{MODEL}\"}}");
    for name in [
        "kiln:num_requests_running",
        "kiln:num_requests_waiting",
        "kiln:kv_cache_usage_perc",
        "kiln:prefix_cache_queries_total",
        "kiln:prefix_cache_hits_total",
        "kiln:prompt_tokens_total",
        "kiln:generation_tokens_total",
        "kiln:engine_host_overhead_ratio",
        "kiln:engine_steps_total",
    ] {
        assert!(
            text.contains(&format!("\n{name}{label} ")),
            "{name} missing:\n{text}"
        );
    }
    for h in [
        "kiln:time_to_first_token_seconds",
        "kiln:inter_token_latency_seconds",
        "kiln:e2e_request_latency_seconds",
        "kiln:request_queue_time_seconds",
        "kiln:request_prefill_time_seconds",
        "kiln:request_decode_time_seconds",
    ] {
        assert!(text.contains(&format!("# TYPE {h} histogram\n")), "{h}");
        let count = value(&text, &format!("{h}_count{label}"));
        assert!(count >= 1.0, "{h}_count = {count}");
        let inf = value(
            &text,
            &format!("{h}_bucket{{model_name=\"{MODEL}\",le=\"+Inf\"}}"),
        );
        assert_eq!(inf, count);
    }
    assert!(
        value(
            &text,
            &format!(
                "kiln:request_success_total{{model_name=\"{MODEL}\",finished_reason=\"length\"}}"
            )
        ) >= 1.0
    );
    assert!(value(&text, &format!("kiln:generation_tokens_total{label}")) >= 3.0);
    // The per-step profile: the forward pass ran matmuls and attention.
    for phase in ["matmul", "attention"] {
        let series =
            format!("kiln:engine_phase_seconds_total{{model_name=\"{MODEL}\",phase=\"{phase}\"}}");
        assert!(value(&text, &series) > 0.0, "{series}");
    }
    // Every line is a comment or `name{labels} value`.
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let (series, v) = line
            .rsplit_once(' ')
            .unwrap_or_else(|| panic!("bad line {line:?}"));
        assert!(
            series.starts_with("kiln:") && series.ends_with('}'),
            "{line}"
        );
        assert!(v.parse::<f64>().is_ok(), "{line}");
    }
}

fn value(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series).and_then(|v| v.trim().parse().ok()))
        .unwrap_or_else(|| panic!("{series} not found"))
}
