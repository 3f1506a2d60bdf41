//! Load, loopback only and bounded: 200 concurrent streaming requests, a fifth of them
//! dropped midway. No 5xx, every other request completes with `[DONE]`, and the KV
//! cache is empty afterwards.

mod support;

use std::time::Duration;

use serde_json::{json, Value};
use support::*;

const REQUESTS: usize = 200;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_concurrent_streams_with_cancellations() {
    let server = start(&["--kv-cache-memory", "256MiB", "--max-model-len", "1024"]);
    let base = server.base_url();
    let client = client();
    let mut tasks = Vec::with_capacity(REQUESTS);
    for i in 0..REQUESTS {
        let url = format!("{base}/v1/completions");
        let client = if i % 5 == 0 {
            fresh_client()
        } else {
            client.clone()
        };
        tasks.push(tokio::spawn(async move {
            let body = json!({"model": MODEL, "prompt": format!("Item {i}: the number {i} is"), "max_tokens": 8,
                "ignore_eos": true, "temperature": 0.8, "seed": i, "stream": true});
            let resp = client.post(url).json(&body).send().await.expect("send");
            let status = resp.status().as_u16();
            if status != 200 {
                return (i, status, Vec::new());
            }
            let mut stream = Box::pin(resp.bytes_stream());
            let mut buf = Vec::new();
            let want = if i % 5 == 0 { 2 } else { usize::MAX };
            (i, status, read_events(&mut stream, &mut buf, want).await)
        }));
    }
    let all = tokio::time::timeout(
        Duration::from_secs(600),
        futures_util::future::join_all(tasks),
    )
    .await
    .expect("load test finished in time");
    let mut completed = 0;
    for r in all {
        let (i, status, events) = r.expect("task");
        assert!(status < 500, "request {i} got {status}");
        assert_eq!(status, 200, "request {i} was refused ({status})");
        if i % 5 == 0 {
            continue;
        }
        assert_eq!(
            events.last().map(String::as_str),
            Some("[DONE]"),
            "request {i}: {events:?}"
        );
        let finish = events
            .iter()
            .filter_map(|e| serde_json::from_str::<Value>(e).ok())
            .find_map(|v| v["choices"][0]["finish_reason"].as_str().map(String::from));
        assert_eq!(finish.as_deref(), Some("length"), "request {i}");
        completed += 1;
    }
    assert_eq!(completed, REQUESTS - REQUESTS / 5);
    wait_until_idle(&base, Duration::from_secs(60)).await;
    assert_eq!(server.get("/health").map(|r| r.0).ok(), Some(200));
}
