//! A client that disconnects mid-stream aborts its request in the engine at once, and
//! its KV blocks are freed: `/metrics` shows nothing running and no KV in use, long
//! before the request could have finished on its own.

mod support;

use std::time::Duration;

use serde_json::json;
use support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disconnect_aborts_and_frees_kv_blocks() {
    let server = start(&["--kv-cache-memory", "128MiB", "--max-model-len", "4096"]);
    let base = server.base_url();
    // Long enough that finishing on its own would take far longer than the wait below.
    let body = json!({"model": MODEL, "prompt": "Tell me a very long story.", "max_tokens": 4000,
        "ignore_eos": true, "stream": true});
    let resp = fresh_client()
        .post(format!("{base}/v1/completions"))
        .json(&body)
        .send()
        .await
        .expect("send");
    assert_eq!(resp.status(), 200);
    let mut stream = Box::pin(resp.bytes_stream());
    let mut buf = Vec::new();
    let events = read_events(&mut stream, &mut buf, 2).await;
    assert_eq!(events.len(), 2, "two chunks before disconnecting");
    assert_eq!(metric(&base, "kiln:num_requests_running").await, 1.0);
    assert!(metric(&base, "kiln:kv_cache_usage_perc").await > 0.0);
    drop(stream);

    wait_until_idle(&base, Duration::from_secs(15)).await;
    let generated = metric(&base, "kiln:generation_tokens_total").await;
    assert!(
        generated < 4000.0,
        "the request ran to completion ({generated} tokens)"
    );
    let aborted = metric_with(
        &base,
        "kiln:request_success_total",
        "finished_reason=\"abort\"",
    )
    .await;
    assert_eq!(aborted, 1.0);
    // The server is unaffected.
    assert_eq!(server.get("/health").map(|r| r.0).ok(), Some(200));
}

async fn metric_with(base: &str, name: &str, label: &str) -> f64 {
    let text = metrics_text(base).await;
    let series = format!("{name}{{model_name=\"{MODEL}\",{label}}} ");
    series_value(&text, &series).unwrap_or_else(|| panic!("{series} missing"))
}
