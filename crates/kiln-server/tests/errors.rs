//! Every error a client can cause gets the right status and OpenAI's error body, on the
//! real model behind a real engine.

mod support;

use axum::http::StatusCode;
use kiln_server::ServerConfig;
use support::*;

const CHAT: &str = "/v1/chat/completions";

#[tokio::test]
async fn invalid_json_is_400_with_the_error_shape() {
    let s = state();
    let r = post(
        &s,
        CHAT,
        r#"{"model": "smollm2-135m-instruct", "messages": ["#,
    )
    .await;
    let e = assert_error(&r, StatusCode::BAD_REQUEST, None);
    assert_eq!(e["type"], "invalid_request_error");
    assert_eq!(e["code"], "invalid_json");
    let r = post(&s, CHAT, "").await;
    assert_error(&r, StatusCode::BAD_REQUEST, None);
    let r = post(&s, CHAT, "[]").await;
    assert_error(&r, StatusCode::BAD_REQUEST, None);
}

#[tokio::test]
async fn wrong_types_name_the_field() {
    let s = state();
    let r = post(
        &s,
        CHAT,
        r#"{"messages": [{"role": "user", "content": "hi"}], "temperature": "hot"}"#,
    )
    .await;
    let e = assert_error(&r, StatusCode::BAD_REQUEST, Some("temperature"));
    assert!(
        e["message"]
            .as_str()
            .is_some_and(|m| m.contains("temperature")),
        "{e}"
    );
    let r = post(
        &s,
        CHAT,
        r#"{"messages": [{"role": "wizard", "content": "hi"}]}"#,
    )
    .await;
    assert_error(&r, StatusCode::BAD_REQUEST, Some("messages[0].role"));
    let r = post(
        &s,
        CHAT,
        r#"{"messages": [{"role": "user", "content": "hi"}], "stop": 7}"#,
    )
    .await;
    assert_error(&r, StatusCode::BAD_REQUEST, Some("stop"));
    let r = post(&s, CHAT, r#"{"model": "smollm2-135m-instruct"}"#).await;
    assert_error(&r, StatusCode::BAD_REQUEST, Some("messages"));
    let r = post(&s, "/v1/completions", r#"{"prompt": [1, -2]}"#).await;
    assert_error(&r, StatusCode::BAD_REQUEST, Some("prompt"));
}

#[tokio::test]
async fn out_of_range_values_name_the_field() {
    let s = state();
    let msg = r#""messages": [{"role": "user", "content": "hi"}]"#;
    for (extra, param) in [
        (r#""n": 0"#, "n"),
        (r#""n": 17"#, "n"),
        (r#""temperature": -1"#, "temperature"),
        (r#""top_p": 1.5"#, "top_p"),
        (r#""max_tokens": 0"#, "max_tokens"),
        (r#""max_completion_tokens": 0"#, "max_completion_tokens"),
        (r#""logprobs": true, "top_logprobs": 21"#, "top_logprobs"),
        (r#""top_logprobs": 2"#, "top_logprobs"),
        (r#""stop": ["a", "b", "c", "d", "e"]"#, "stop"),
        (r#""logit_bias": {"999999": 1}"#, "logit_bias"),
        (r#""logit_bias": {"abc": 1}"#, "logit_bias"),
        (r#""presence_penalty": 3"#, "presence_penalty"),
        (
            r#""response_format": {"type": "xml"}"#,
            "response_format.type",
        ),
        (
            r#""response_format": {"type": "json_schema"}"#,
            "response_format.json_schema",
        ),
        (
            r#""response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "nonsense"}}}"#,
            "response_format.json_schema.schema",
        ),
        (r#""guided_regex": "(unclosed""#, "guided_regex"),
        (
            r#""guided_choice": ["a"], "guided_regex": "b""#,
            "guided_choice",
        ),
        (r#""tool_choice": "auto""#, "tool_choice"),
        (
            r#""tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": "bogus""#,
            "tool_choice",
        ),
        (
            r#""tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": {"type": "function", "function": {"name": "g"}}"#,
            "tool_choice.function.name",
        ),
        (
            r#""tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "nonsense"}}}]"#,
            "tools",
        ),
        (
            r#""tools": [{"type": "retrieval", "function": {"name": "f"}}]"#,
            "tools[0].type",
        ),
    ] {
        let r = post(&s, CHAT, &format!("{{{msg}, {extra}}}")).await;
        assert_error(&r, StatusCode::BAD_REQUEST, Some(param));
    }
    let r = post(&s, CHAT, r#"{"messages": []}"#).await;
    assert_error(&r, StatusCode::BAD_REQUEST, Some("messages"));
    let r = post(&s, "/v1/completions", r#"{"prompt": "hi", "logprobs": 21}"#).await;
    assert_error(&r, StatusCode::BAD_REQUEST, Some("logprobs"));
    let r = post(&s, "/v1/completions", r#"{"prompt": [1, 99999999]}"#).await;
    assert_error(&r, StatusCode::BAD_REQUEST, Some("prompt"));
    let r = post(&s, "/v1/completions", r#"{"prompt": []}"#).await;
    assert_error(&r, StatusCode::BAD_REQUEST, Some("prompt"));
    let image = r#"{"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]}"#;
    assert_error(
        &post(&s, CHAT, image).await,
        StatusCode::BAD_REQUEST,
        Some("messages[0].content[0]"),
    );
}

#[tokio::test]
async fn prompt_plus_max_tokens_over_the_context_names_both_numbers() {
    let s = state();
    let tokens = post(&s, "/tokenize", r#"{"prompt": "Hello there"}"#)
        .await
        .json();
    let n = tokens["count"].as_u64().expect("count") as usize;
    let body = format!(r#"{{"prompt": "Hello there", "max_tokens": {MAX_MODEL_LEN}}}"#);
    let r = post(&s, "/v1/completions", &body).await;
    let e = assert_error(&r, StatusCode::BAD_REQUEST, Some("max_tokens"));
    let m = e["message"].as_str().unwrap_or_default();
    assert!(
        m.contains(&format!("{n} tokens"))
            && m.contains(&format!("{MAX_MODEL_LEN} for the completion")),
        "{m}"
    );
    assert!(
        m.contains(&format!("maximum context length is {MAX_MODEL_LEN}")),
        "{m}"
    );
    assert_eq!(e["code"], "context_length_exceeded");
    // A prompt that alone fills the context.
    let ids = vec!["42"; MAX_MODEL_LEN].join(",");
    let r = post(&s, "/v1/completions", &format!(r#"{{"prompt": [{ids}]}}"#)).await;
    let e = assert_error(&r, StatusCode::BAD_REQUEST, Some("prompt"));
    assert!(
        e["message"]
            .as_str()
            .is_some_and(|m| m.contains(&format!("{MAX_MODEL_LEN} tokens were requested"))),
        "{e}"
    );
}

#[tokio::test]
async fn unknown_model_and_route_are_404() {
    let s = state();
    let r = post(
        &s,
        CHAT,
        r#"{"model": "gpt-17", "messages": [{"role": "user", "content": "hi"}]}"#,
    )
    .await;
    let e = assert_error(&r, StatusCode::NOT_FOUND, Some("model"));
    assert_eq!(e["code"], "model_not_found");
    assert!(
        e["message"]
            .as_str()
            .is_some_and(|m| m.contains("gpt-17") && m.contains(MODEL)),
        "{e}"
    );
    let r = post(&s, "/ai/run/@kiln/nope", r#"{"prompt": "hi"}"#).await;
    assert_error(&r, StatusCode::NOT_FOUND, Some("model"));
    let r = send(&s, "GET", "/v1/nothing", None, &[]).await;
    assert_error(&r, StatusCode::NOT_FOUND, None);
    let r = send(&s, "GET", CHAT, None, &[]).await;
    assert_error(&r, StatusCode::METHOD_NOT_ALLOWED, None);
}

#[tokio::test]
async fn api_keys_are_required_when_configured() {
    let config = ServerConfig {
        api_keys: vec!["sk-right".into()],
        ..ServerConfig::default()
    };
    let s = state_with(config, model());
    let body = r#"{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}"#;
    let ct = ("content-type", "application/json");
    let r = send(&s, "POST", CHAT, Some(body), &[ct]).await;
    let e = assert_error(&r, StatusCode::UNAUTHORIZED, None);
    assert_eq!(e["type"], "authentication_error");
    assert!(r.headers.contains_key("www-authenticate"));
    let r = send(
        &s,
        "POST",
        CHAT,
        Some(body),
        &[ct, ("authorization", "Bearer sk-wrong")],
    )
    .await;
    assert_error(&r, StatusCode::UNAUTHORIZED, None);
    let r = send(
        &s,
        "GET",
        "/v1/models",
        None,
        &[("authorization", "Basic c2stcmlnaHQ=")],
    )
    .await;
    assert_error(&r, StatusCode::UNAUTHORIZED, None);
    let r = send(
        &s,
        "POST",
        CHAT,
        Some(body),
        &[ct, ("authorization", "Bearer sk-right")],
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    // Auth before routing: without a key no path is a 404 or 405, so none can be probed.
    for (method, path) in [
        ("GET", "/v1/nothing"),
        ("GET", "/v1/agents/a/x"),
        ("GET", CHAT),
    ] {
        let r = send(&s, method, path, None, &[]).await;
        assert_error(&r, StatusCode::UNAUTHORIZED, None);
    }
    let key = [("authorization", "Bearer sk-right")];
    let r = send(&s, "GET", "/v1/nothing", None, &key).await;
    assert_error(&r, StatusCode::NOT_FOUND, None);
    let r = send(&s, "GET", CHAT, None, &key).await;
    assert_error(&r, StatusCode::METHOD_NOT_ALLOWED, None);
    // Probes and metrics stay open.
    assert_eq!(
        send(&s, "GET", "/health", None, &[]).await.status,
        StatusCode::OK
    );
    assert_eq!(
        send(&s, "GET", "/metrics", None, &[]).await.status,
        StatusCode::OK
    );
}

#[tokio::test]
async fn oversized_body_is_413() {
    let config = ServerConfig {
        body_limit: 1024,
        ..ServerConfig::default()
    };
    let s = state_with(config, model());
    let big = format!(
        r#"{{"messages": [{{"role": "user", "content": "{}"}}]}}"#,
        "x".repeat(4096)
    );
    let r = post(&s, CHAT, &big).await;
    let e = assert_error(&r, StatusCode::PAYLOAD_TOO_LARGE, None);
    assert!(
        e["message"].as_str().is_some_and(|m| m.contains("1024")),
        "{e}"
    );
}

/// A streamed request that keeps running while its response is held unread.
const LONG: &str =
    r#"{"prompt": "Count:", "max_tokens": 1500, "ignore_eos": true, "stream": true}"#;

#[tokio::test]
async fn full_queue_is_429_with_retry_after_and_frees_on_completion() {
    let config = ServerConfig {
        max_queued: 1,
        ..ServerConfig::default()
    };
    let s = state_with(config, single_seq_model());
    let ct = [("content-type", "application/json")];
    let running = send_raw(&s, "POST", "/v1/completions", Some(LONG), &ct).await;
    assert_eq!(running.status(), StatusCode::OK);
    let queued = send_raw(&s, "POST", "/v1/completions", Some(LONG), &ct).await;
    assert_eq!(queued.status(), StatusCode::OK);
    let r = post(
        &s,
        "/v1/completions",
        r#"{"prompt": "hi", "max_tokens": 1}"#,
    )
    .await;
    let e = assert_error(&r, StatusCode::TOO_MANY_REQUESTS, None);
    assert_eq!(e["code"], "queue_full");
    assert!(r
        .headers
        .get("retry-after")
        .is_some_and(|v| v.to_str().is_ok_and(|s| s.parse::<u64>().is_ok())));
    // Dropping the held responses aborts both requests and frees their places.
    drop((running, queued));
    let r = post(
        &s,
        "/v1/completions",
        r#"{"prompt": "hi", "max_tokens": 1}"#,
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    let metrics = send(&s, "GET", "/metrics", None, &[]).await.text();
    assert!(metrics.contains(r#"kiln:requests_rejected_total{model_name="smollm2-135m-instruct",reason="queue_full"} 1"#), "{metrics}");
}

#[tokio::test]
async fn reject_if_busy_fails_fast_instead_of_queueing() {
    let s = state_with(ServerConfig::default(), single_seq_model());
    let ct = [("content-type", "application/json")];
    let running = send_raw(&s, "POST", "/v1/completions", Some(LONG), &ct).await;
    assert_eq!(running.status(), StatusCode::OK);
    let busy = r#"{"prompt": "hi", "max_tokens": 1, "reject_if_busy": true}"#;
    let r = post(&s, "/v1/completions", busy).await;
    let e = assert_error(&r, StatusCode::TOO_MANY_REQUESTS, None);
    assert_eq!(e["code"], "model_busy");
    assert!(r.headers.contains_key("retry-after"));
    let r = post(
        &s,
        "/ai/run/smollm2-135m-instruct",
        r#"{"prompt": "hi", "reject_if_busy": true}"#,
    )
    .await;
    assert_error(&r, StatusCode::TOO_MANY_REQUESTS, None);
    drop(running);
    let r = post(&s, "/v1/completions", busy).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
}

#[tokio::test]
async fn draining_server_answers_503_but_stays_alive() {
    let s = state();
    s.begin_shutdown();
    let r = post(
        &s,
        CHAT,
        r#"{"messages": [{"role": "user", "content": "hi"}]}"#,
    )
    .await;
    let e = assert_error(&r, StatusCode::SERVICE_UNAVAILABLE, None);
    assert_eq!(e["code"], "shutting_down");
    assert_eq!(
        send(&s, "GET", "/health", None, &[]).await.status,
        StatusCode::OK
    );
    let ready = send(&s, "GET", "/ready", None, &[]).await;
    assert_eq!(ready.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(ready.json()["status"], "shutting_down");
}

#[tokio::test]
async fn prompt_and_messages_are_exclusive_and_one_is_required() {
    let s = state();
    for path in ["/tokenize", "/ai/run/smollm2-135m-instruct"] {
        let both = r#"{"prompt": "hi", "messages": [{"role": "user", "content": "hi"}]}"#;
        let e = assert_error(
            &post(&s, path, both).await,
            StatusCode::BAD_REQUEST,
            Some("prompt"),
        );
        assert!(
            e["message"]
                .as_str()
                .is_some_and(|m| m.contains("not both")),
            "{path}: {e}"
        );
        let e = assert_error(
            &post(&s, path, "{}").await,
            StatusCode::BAD_REQUEST,
            Some("prompt"),
        );
        assert!(
            e["message"]
                .as_str()
                .is_some_and(|m| m.contains("required")),
            "{path}: {e}"
        );
    }
}
