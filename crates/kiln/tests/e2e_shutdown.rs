//! SIGTERM: in-flight streams finish with a finish reason and `[DONE]`, new requests are
//! refused (503 or connection refused), and the process exits 0 within the deadline.

mod support;

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_finishes_in_flight_requests_then_exits_zero() {
    let mut server = start(&[
        "--kv-cache-memory",
        "64MiB",
        "--max-model-len",
        "1024",
        "--shutdown-timeout",
        "90",
    ]);
    let base = server.base_url();
    let mut tasks = Vec::new();
    let (started_tx, mut started_rx) = tokio::sync::mpsc::channel(3);
    for i in 0..3 {
        let url = format!("{base}/v1/chat/completions");
        let started = started_tx.clone();
        tasks.push(tokio::spawn(async move {
            let body = json!({"messages": [{"role": "user", "content": format!("Story {i}")}], "max_tokens": 64,
                "ignore_eos": true, "stream": true});
            let resp = fresh_client().post(url).json(&body).send().await.expect("send");
            assert_eq!(resp.status(), 200);
            let mut stream = Box::pin(resp.bytes_stream());
            let mut buf = Vec::new();
            let mut events = read_events(&mut stream, &mut buf, 2).await;
            let _ = started.send(()).await;
            events.extend(read_events(&mut stream, &mut buf, usize::MAX).await);
            (events, Instant::now())
        }));
    }
    for _ in 0..3 {
        started_rx.recv().await.expect("a stream started");
    }
    let sigterm_at = Instant::now();
    server.terminate().expect("SIGTERM");

    // New work is refused: the listener is closed, or the request gets 503.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let late = fresh_client()
        .post(format!("{base}/v1/chat/completions"))
        .json(&json!({"messages": [{"role": "user", "content": "late"}], "max_tokens": 2}))
        .send()
        .await;
    match late {
        Err(e) => assert!(e.is_connect() || e.is_request(), "unexpected error {e}"),
        Ok(r) => assert_eq!(
            r.status(),
            503,
            "a request after SIGTERM must not be served"
        ),
    }

    for t in tasks {
        let (events, done_at) = t.await.expect("stream task");
        assert!(
            done_at > sigterm_at,
            "the stream had finished before SIGTERM; nothing was in flight"
        );
        assert_eq!(
            events.last().map(String::as_str),
            Some("[DONE]"),
            "{events:?}"
        );
        let finish = events
            .iter()
            .filter_map(|e| serde_json::from_str::<Value>(e).ok())
            .find_map(|v| v["choices"][0]["finish_reason"].as_str().map(String::from));
        assert_eq!(finish.as_deref(), Some("length"), "{events:?}");
    }
    let status = server
        .wait_exit(Duration::from_secs(90))
        .unwrap_or_else(|| panic!("no exit:\n{}", server.log_tail()));
    assert_eq!(status.code(), Some(0), "{}", server.log_tail());
}
