//! Hosted models in process, on the real default model served under two names: lazy loads
//! shared by concurrent first requests, `x-kiln-warm`, least-recently-used unloading
//! under a memory budget that never touches a busy or pinned model, and usage metering.

mod support;

use std::sync::Arc;

use axum::http::StatusCode;
use kiln_server::{AppState, HostedModel, ModelSource, ServerConfig, ServingOptions};
use kiln_usage::{Meter, UsageStore};
use serde_json::json;
use support::*;

/// Two names for the same file, so each test loads only the small model.
const A: &str = "model-a";
const B: &str = "model-b";
/// 16 MiB of KV cache each; with ~98 MB of weights one model fits in 150 MB, two don't.
const KV: usize = 16 << 20;
const ONE_FITS: u64 = 150_000_000;

fn source(name: &str, pin: bool) -> ModelSource {
    let mut options = ServingOptions::detect();
    options.kv_cache_bytes = Some(KV);
    options.max_model_len = Some(512);
    options.max_num_seqs = 4;
    ModelSource {
        name: name.into(),
        aliases: vec![format!("@cf/test/{name}")],
        task: "text-generation".into(),
        path: kiln_testkit::model_file(MODEL, "SmolLM2-135M-Instruct.Q4_1.gguf"),
        options,
        pin,
    }
}

fn pool_state(
    budget: Option<u64>,
    sources: Vec<ModelSource>,
    meter: Option<Arc<Meter>>,
) -> AppState {
    let config = ServerConfig {
        models_memory: budget,
        ..ServerConfig::default()
    };
    let hosted_models = sources
        .into_iter()
        .map(|s| HostedModel::from_source(s, config.max_queued))
        .collect();
    AppState::with_meter(config, hosted_models, meter).unwrap_or_else(|e| panic!("state: {e}"))
}

fn completion(model: &str) -> String {
    json!({"model": model, "prompt": "The capital of France is", "max_tokens": 4,
        "temperature": 0})
    .to_string()
}

fn warm(r: &Reply) -> Option<&str> {
    r.headers.get("x-kiln-warm").and_then(|v| v.to_str().ok())
}

async fn metric(s: &AppState, name: &str, model: &str) -> f64 {
    let text = send(s, "GET", "/metrics", None, &[]).await.text();
    let series = format!("{name}{{model_name=\"{model}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&series).and_then(|v| v.trim().parse().ok()))
        .unwrap_or_else(|| panic!("{series} not in /metrics"))
}

async fn status_of(s: &AppState, model: &str) -> String {
    let v = send(s, "GET", &format!("/v1/models/{model}"), None, &[])
        .await
        .json();
    v["status"].as_str().unwrap_or_default().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_first_requests_share_one_load_then_are_warm() {
    let s = pool_state(None, vec![source(A, false)], None);
    assert_eq!(status_of(&s, A).await, "unloaded");
    // Nothing is pinned, so the server is ready before anything loads.
    assert_eq!(
        send(&s, "GET", "/ready", None, &[]).await.status,
        StatusCode::OK
    );

    let body = completion(A);
    let replies = futures_util::future::join_all(
        (0..4).map(|_| async { post(&s, "/v1/completions", &body).await }),
    )
    .await;
    let texts: Vec<String> = replies
        .iter()
        .map(|r| {
            assert_eq!(r.status, StatusCode::OK, "{}", r.text());
            assert_eq!(
                warm(r),
                Some("false"),
                "every first request waited for the load"
            );
            r.json()["choices"][0]["text"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        })
        .collect();
    assert!(
        texts.iter().all(|t| t == &texts[0] && !t.is_empty()),
        "{texts:?}"
    );
    assert_eq!(metric(&s, "kiln:model_load_seconds_count", A).await, 1.0);
    assert_eq!(metric(&s, "kiln:requests_cold_total", A).await, 4.0);

    // Through an alias, now warm; the same greedy answer.
    let r = post(&s, "/v1/completions", &completion(&format!("@cf/test/{A}"))).await;
    assert_eq!(warm(&r), Some("true"));
    assert_eq!(r.json()["choices"][0]["text"], texts[0].as_str());
    assert_eq!(metric(&s, "kiln:requests_warm_total", A).await, 1.0);
    let card = send(&s, "GET", "/v1/models", None, &[]).await.json();
    let card = &card["data"][0];
    assert_eq!(card["status"], "loaded");
    assert_eq!(card["task"], "text-generation");
    // SmolLM2-135M: about 135 million weights.
    let params = card["parameters"].as_u64().unwrap_or(0);
    assert!((120_000_000..150_000_000).contains(&params), "{card}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn busy_model_is_never_unloaded_and_an_idle_one_is() {
    let s = pool_state(
        Some(ONE_FITS),
        vec![source(A, false), source(B, false)],
        None,
    );
    let r = post(&s, "/v1/completions", &completion(A)).await;
    assert_eq!(r.status, StatusCode::OK);
    let answer = r.json()["choices"][0]["text"].clone();

    // A stream held open keeps A in use: B can't be made room for.
    let held = send_raw(
        &s,
        "POST",
        "/v1/completions",
        Some(
            &json!({"model": A, "prompt": "Count:", "max_tokens": 400, "ignore_eos": true,
                "stream": true})
            .to_string(),
        ),
        &[("content-type", "application/json")],
    )
    .await;
    assert_eq!(
        held.headers().get("x-kiln-warm").map(|v| v.as_bytes()),
        Some(&b"true"[..])
    );
    let refused = post(&s, "/v1/completions", &completion(B)).await;
    let err = assert_error(&refused, StatusCode::SERVICE_UNAVAILABLE, Some("model"));
    assert_eq!(err["code"], "model_memory_exhausted");
    assert!(
        err["message"]
            .as_str()
            .is_some_and(|m| m.contains("--models-memory")),
        "{err}"
    );
    assert_eq!(warm(&refused), Some("false"));
    assert!(refused.headers.contains_key("retry-after"));
    assert_eq!(status_of(&s, A).await, "loaded");
    assert_eq!(status_of(&s, B).await, "unloaded");

    // Once the stream is gone, A is idle and is unloaded for B.
    drop(held);
    let r = post(&s, "/v1/completions", &completion(B)).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    assert_eq!(warm(&r), Some("false"));
    assert_eq!(r.json()["choices"][0]["text"], answer);
    assert_eq!(status_of(&s, A).await, "unloaded");
    assert_eq!(metric(&s, "kiln:model_unloads_total", A).await, 1.0);
    assert_eq!(metric(&s, "kiln:model_loaded", A).await, 0.0);
    assert_eq!(metric(&s, "kiln:model_loaded", B).await, 1.0);

    // And back: B is idle now, A reloads and answers the same.
    let r = post(&s, "/v1/completions", &completion(A)).await;
    assert_eq!(warm(&r), Some("false"));
    assert_eq!(r.json()["choices"][0]["text"], answer);
    assert_eq!(metric(&s, "kiln:model_unloads_total", B).await, 1.0);
    assert_eq!(metric(&s, "kiln:model_load_seconds_count", A).await, 2.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pinned_model_is_never_unloaded() {
    let s = pool_state(
        Some(ONE_FITS),
        vec![source(A, true), source(B, false)],
        None,
    );
    // Pinned models are what `/ready` waits for.
    assert_eq!(
        send(&s, "GET", "/ready", None, &[]).await.status,
        StatusCode::SERVICE_UNAVAILABLE
    );
    assert_eq!(
        post(&s, "/v1/completions", &completion(A)).await.status,
        StatusCode::OK
    );
    assert_eq!(
        send(&s, "GET", "/ready", None, &[]).await.status,
        StatusCode::OK
    );
    for _ in 0..2 {
        let r = post(&s, "/v1/completions", &completion(B)).await;
        let err = assert_error(&r, StatusCode::SERVICE_UNAVAILABLE, Some("model"));
        assert_eq!(err["code"], "model_memory_exhausted");
    }
    assert_eq!(status_of(&s, A).await, "loaded");
    assert_eq!(metric(&s, "kiln:model_unloads_total", A).await, 0.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn usage_is_metered_per_model_including_aborted_streams() {
    let meter =
        Arc::new(Meter::start(UsageStore::open_in_memory().expect("store")).expect("meter"));
    let s = pool_state(None, vec![source(A, false)], Some(meter));
    let r = post(
        &s,
        "/v1/completions",
        &json!({"model": A, "prompt": ["One", "Two"],
        "n": 2, "max_tokens": 3, "ignore_eos": true})
        .to_string(),
    )
    .await;
    let usage = r.json()["usage"].clone();
    assert_eq!(usage["completion_tokens"], 12);

    // A stream dropped after its first chunk still counts its prompt and what it made.
    let resp = send_raw(
        &s,
        "POST",
        "/v1/completions",
        Some(
            &json!({"model": A, "prompt": "Count to ten:", "max_tokens": 50,
            "ignore_eos": true, "stream": true})
            .to_string(),
        ),
        &[("content-type", "application/json")],
    )
    .await;
    let mut body = resp.into_body().into_data_stream();
    let first = futures_util::StreamExt::next(&mut body).await;
    assert!(first.is_some_and(|c| c.is_ok()));
    drop(body);

    let v = send(&s, "GET", "/admin/usage", None, &[]).await.json();
    let row = &v["data"][0];
    assert_eq!(row["key_id"], "anonymous");
    assert_eq!(row["model"], A);
    assert_eq!(row["requests"], 2, "{v}");
    let streamed_prompt = {
        let t = post(
            &s,
            "/tokenize",
            &json!({"model": A, "prompt": "Count to ten:"}).to_string(),
        )
        .await
        .json();
        t["count"].as_u64().unwrap_or(0)
    };
    assert_eq!(
        row["prompt_tokens"].as_u64(),
        usage["prompt_tokens"].as_u64().map(|p| p + streamed_prompt)
    );
    let completion = row["completion_tokens"].as_u64().unwrap_or(0);
    assert!((12 + 1..=12 + 50).contains(&completion), "{v}");
    assert!(row["neurons"].as_f64().is_some_and(|n| n > 0.0), "{v}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lazy_model_that_fails_to_load_is_503_and_retried() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut broken = source(A, false);
    broken.path = dir.path().join("missing.gguf");
    let s = pool_state(None, vec![broken, source(B, false)], None);
    for attempt in 1..=2 {
        let r = post(&s, "/v1/completions", &completion(A)).await;
        let err = assert_error(&r, StatusCode::SERVICE_UNAVAILABLE, Some("model"));
        assert_eq!(err["code"], "model_unavailable");
        // The file is named, but not where the server keeps it.
        let dir_text = dir.path().to_string_lossy().into_owned();
        assert!(
            err["message"]
                .as_str()
                .is_some_and(|m| m.contains("missing.gguf") && !m.contains(&dir_text)),
            "{err}"
        );
        assert_eq!(
            metric(&s, "kiln:model_load_failures_total", A).await,
            f64::from(attempt)
        );
    }
    let card = send(&s, "GET", &format!("/v1/models/{A}"), None, &[])
        .await
        .json();
    assert_eq!(card["status"], "failed");
    let dir_text = dir.path().to_string_lossy().into_owned();
    assert!(card["load_error"]
        .as_str()
        .is_some_and(|e| e.contains("missing.gguf") && !e.contains(&dir_text)));
    // The other model is unaffected.
    assert_eq!(
        post(&s, "/v1/completions", &completion(B)).await.status,
        StatusCode::OK
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pinned_model_that_fails_to_load_stops_the_server_with_the_reason() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut broken = source(A, false);
    broken.path = dir.path().join("missing.gguf");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    // The binary pins a lone model, so its failure ends `serve` instead of waiting forever.
    broken.pin = true;
    let state = AppState::new(
        ServerConfig::default(),
        vec![HostedModel::from_source(
            broken,
            ServerConfig::default().max_queued,
        )],
    )
    .expect("state");
    let opts = kiln_server::ServeOptions {
        limits: kiln_server::ConnectionLimits::checked(None, None, None).expect("limits"),
        shutdown_timeout: std::time::Duration::from_secs(5),
    };
    let result = tokio::time::timeout(
        std::time::Duration::from_secs(60),
        kiln_server::serve(listener, state, opts, std::future::pending()),
    )
    .await
    .expect("serve returned");
    let err = result.expect_err("a pinned model that can't load is an error");
    assert!(matches!(err, kiln_server::Error::Load { .. }), "{err}");
    assert!(err.to_string().contains("missing.gguf"), "{err}");
}
