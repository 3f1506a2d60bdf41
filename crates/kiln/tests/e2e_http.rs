//! `kiln serve` over real HTTP: exact SSE framing, and every error a client can cause
//! (400, 401, 404, 413, 429 with Retry-After) with OpenAI's error body.

mod support;

use std::time::Duration;

use futures_util::StreamExt;
use serde_json::{json, Value};
use support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sse_framing_is_exactly_openai() {
    let server = start(&["--kv-cache-memory", "64MiB", "--max-model-len", "1024"]);
    let base = server.base_url();
    let body = json!({"model": MODEL, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 5,
        "ignore_eos": true, "stream": true, "stream_options": {"include_usage": true}});
    let resp = client()
        .post(format!("{base}/v1/chat/completions"))
        .json(&body)
        .send()
        .await
        .expect("send");
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-type"], "text/event-stream");
    assert_eq!(resp.headers()["cache-control"], "no-cache");
    let raw = resp.bytes().await.expect("body");
    let text = String::from_utf8(raw.to_vec()).expect("UTF-8");
    // Every event is exactly `data: <one line>\n\n`; the last is `data: [DONE]\n\n`.
    assert!(text.ends_with("\n\ndata: [DONE]\n\n"), "{text:?}");
    let events: Vec<&str> = text
        .strip_suffix("\n\n")
        .unwrap_or(&text)
        .split("\n\n")
        .collect();
    for ev in &events {
        let data = ev
            .strip_prefix("data: ")
            .unwrap_or_else(|| panic!("bad event {ev:?}"));
        assert!(!data.contains('\n') && !data.contains('\r'), "{ev:?}");
        if *ev != "data: [DONE]" {
            let v: Value = serde_json::from_str(data).unwrap_or_else(|e| panic!("{e}: {data}"));
            assert_eq!(v["object"], "chat.completion.chunk");
        }
    }
    let first: Value = serde_json::from_str(&events[0]["data: ".len()..]).expect("first");
    assert_eq!(
        first["choices"][0]["delta"],
        json!({"role": "assistant", "content": ""})
    );
    let usage: Value =
        serde_json::from_str(&events[events.len() - 2]["data: ".len()..]).expect("usage");
    assert_eq!(usage["usage"]["completion_tokens"], 5);
    assert_eq!(usage["choices"], json!([]));
    // A completions stream over the same connection pool, read incrementally.
    let resp = client()
        .post(format!("{base}/v1/completions"))
        .json(&json!({"prompt": "Once upon a time", "max_tokens": 4, "stream": true}))
        .send()
        .await
        .expect("send");
    let mut stream = resp.bytes_stream();
    let mut raw = Vec::new();
    while let Some(chunk) = stream.next().await {
        raw.extend_from_slice(&chunk.expect("chunk"));
    }
    assert!(
        raw.ends_with(b"data: [DONE]\n\n") && raw.starts_with(b"data: {"),
        "{}",
        String::from_utf8_lossy(&raw)
    );
}

async fn expect_error(resp: reqwest::Response, status: u16, param: Option<&str>) -> Value {
    assert_eq!(resp.status().as_u16(), status);
    let v: Value = resp.json().await.expect("JSON error body");
    let e = v["error"].clone();
    assert!(e["message"].is_string() && e["type"].is_string(), "{v}");
    assert_eq!(e["param"].as_str(), param, "{v}");
    e
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_client_error_over_http() {
    let server = start(&[
        "--api-key",
        "sk-e2e",
        "--max-body-size",
        "16KiB",
        "--max-num-seqs",
        "1",
        "--max-queued",
        "1",
        "--kv-cache-memory",
        "64MiB",
        "--max-model-len",
        "1024",
    ]);
    let base = server.base_url();
    let c = client();
    let chat = format!("{base}/v1/chat/completions");
    let ok_body = json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1});

    // 401: no key, wrong key.
    expect_error(
        c.post(&chat).json(&ok_body).send().await.expect("send"),
        401,
        None,
    )
    .await;
    expect_error(
        c.post(&chat)
            .bearer_auth("sk-nope")
            .json(&ok_body)
            .send()
            .await
            .expect("send"),
        401,
        None,
    )
    .await;
    let auth = |r: reqwest::RequestBuilder| r.bearer_auth("sk-e2e");
    assert_eq!(
        auth(c.post(&chat))
            .json(&ok_body)
            .send()
            .await
            .expect("send")
            .status(),
        200
    );

    // 400: bad JSON, a wrong type, n = 0, prompt + max_tokens over the context.
    let r = auth(c.post(&chat))
        .header("content-type", "application/json")
        .body("{not json")
        .send()
        .await
        .expect("send");
    assert_eq!(expect_error(r, 400, None).await["code"], "invalid_json");
    let bad_type = json!({"messages": [{"role": "user", "content": "hi"}], "temperature": "warm"});
    expect_error(
        auth(c.post(&chat))
            .json(&bad_type)
            .send()
            .await
            .expect("send"),
        400,
        Some("temperature"),
    )
    .await;
    let n0 = json!({"messages": [{"role": "user", "content": "hi"}], "n": 0});
    expect_error(
        auth(c.post(&chat)).json(&n0).send().await.expect("send"),
        400,
        Some("n"),
    )
    .await;
    let long = json!({"prompt": "hi there", "max_tokens": 1024});
    let r = auth(c.post(format!("{base}/v1/completions")))
        .json(&long)
        .send()
        .await
        .expect("send");
    let e = expect_error(r, 400, Some("max_tokens")).await;
    let m = e["message"].as_str().unwrap_or_default();
    assert!(
        m.contains("1024 for the completion") && m.contains("maximum context length is 1024"),
        "{m}"
    );

    // 404: unknown model.
    let unknown = json!({"model": "nope", "messages": [{"role": "user", "content": "hi"}]});
    let e = expect_error(
        auth(c.post(&chat))
            .json(&unknown)
            .send()
            .await
            .expect("send"),
        404,
        Some("model"),
    )
    .await;
    assert_eq!(e["code"], "model_not_found");

    // 413: body over 16 KiB.
    let huge = json!({"messages": [{"role": "user", "content": "x".repeat(20_000)}]});
    expect_error(
        auth(c.post(&chat)).json(&huge).send().await.expect("send"),
        413,
        None,
    )
    .await;

    // 429: one running + one queued fill the model; reject_if_busy fails fast sooner.
    let long_stream =
        json!({"prompt": "Count:", "max_tokens": 900, "ignore_eos": true, "stream": true});
    let completions = format!("{base}/v1/completions");
    let held1 = auth(fresh_client().post(&completions))
        .json(&long_stream)
        .send()
        .await
        .expect("send");
    assert_eq!(held1.status(), 200);
    let busy = json!({"prompt": "hi", "max_tokens": 1, "reject_if_busy": true});
    let r = auth(c.post(&completions))
        .json(&busy)
        .send()
        .await
        .expect("send");
    assert!(r.headers().contains_key("retry-after"));
    assert_eq!(expect_error(r, 429, None).await["code"], "model_busy");
    let held2 = auth(fresh_client().post(&completions))
        .json(&long_stream)
        .send()
        .await
        .expect("send");
    assert_eq!(held2.status(), 200);
    let r = auth(c.post(&completions))
        .json(&json!({"prompt": "hi", "max_tokens": 1}))
        .send()
        .await
        .expect("send");
    let retry = r
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    assert!(retry.is_some_and(|s| s >= 1), "Retry-After missing");
    assert_eq!(expect_error(r, 429, None).await["code"], "queue_full");
    drop((held1, held2));
    wait_until_idle(&base, Duration::from_secs(30)).await;
    let r = auth(c.post(&completions))
        .json(&json!({"prompt": "hi", "max_tokens": 1}))
        .send()
        .await
        .expect("send");
    assert_eq!(
        r.status(),
        200,
        "capacity comes back once the held requests are gone"
    );
}
