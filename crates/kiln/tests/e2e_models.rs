//! Several catalogue models behind one `kiln serve`, over HTTP: lazy loading, `@cf/`
//! aliases, `x-kiln-warm`, least-recently-used unloading under `--models-memory` with
//! reloads that answer as before, a pinned model that is never unloaded, and 404 for an
//! unknown model.
//!
//! Memory: SmolLM2 is ~98 MB of weights and Gemma 3 ~253 MB; with 16 MiB of KV cache
//! each, a 300 MB budget holds either one but not both.

mod support;

use std::collections::HashMap;

use serde_json::{json, Value};
use support::*;

const GEMMA: &str = "gemma3-270m";
const BUDGET: &str = "300MB";

fn start_two(extra: &[&str]) -> kiln_testkit::server::ServerProcess {
    kiln_testkit::model_dir(GEMMA);
    let mut args = vec![
        "--model",
        MODEL,
        "--model",
        GEMMA,
        "--models-memory",
        BUDGET,
        "--kv-cache-memory",
        "16MiB",
        "--max-model-len",
        "256",
        "--max-num-seqs",
        "4",
    ];
    args.extend_from_slice(extra);
    start(&args)
}

/// A greedy completion: (status, x-kiln-warm, text or error body).
async fn complete(base: &str, model: &str, stream: bool) -> (u16, Option<String>, Value) {
    let body = json!({"model": model, "prompt": "The capital of France is", "max_tokens": 4,
        "temperature": 0, "stream": stream});
    let resp = client()
        .post(format!("{base}/v1/completions"))
        .json(&body)
        .send()
        .await
        .unwrap_or_else(|e| panic!("POST /v1/completions: {e}"));
    let status = resp.status().as_u16();
    let warm = resp
        .headers()
        .get("x-kiln-warm")
        .and_then(|v| v.to_str().ok())
        .map(String::from);
    if status != 200 {
        let err = resp.json().await.unwrap_or(Value::Null);
        return (status, warm, err);
    }
    if !stream {
        let v: Value = resp.json().await.unwrap_or(Value::Null);
        return (status, warm, v["choices"][0]["text"].clone());
    }
    let mut body = Box::pin(resp.bytes_stream());
    let mut buf = Vec::new();
    let events = read_events(&mut body, &mut buf, usize::MAX).await;
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"));
    let text: String = events
        .iter()
        .filter_map(|e| serde_json::from_str::<Value>(e).ok())
        .filter_map(|v| v["choices"][0]["text"].as_str().map(String::from))
        .collect();
    (status, warm, Value::String(text))
}

/// `name{model_name="model"}` for every model.
async fn per_model(base: &str, name: &str) -> HashMap<String, f64> {
    let text = metrics_text(base).await;
    let prefix = format!("{name}{{model_name=\"");
    text.lines()
        .filter_map(|l| l.strip_prefix(&prefix))
        .filter_map(|rest| {
            let (model, value) = rest.split_once("\"} ")?;
            Some((model.to_string(), value.trim().parse().ok()?))
        })
        .collect()
}

async fn cards(base: &str) -> HashMap<String, Value> {
    let v: Value = client()
        .get(format!("{base}/v1/models"))
        .send()
        .await
        .unwrap_or_else(|e| panic!("GET /v1/models: {e}"))
        .json()
        .await
        .unwrap_or(Value::Null);
    v["data"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .map(|c| (c["id"].as_str().unwrap_or_default().to_string(), c))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_models_take_turns_in_a_budget_that_fits_one() {
    let server = start_two(&[]);
    let base = server.base_url();
    let c = cards(&base).await;
    for m in [MODEL, GEMMA] {
        assert_eq!(c[m]["task"], "text-generation", "{c:?}");
        assert_eq!(c[m]["status"], "unloaded", "{c:?}");
        assert_eq!(c[m]["pinned"], false, "{c:?}");
    }

    // Workers AI style `@cf/` names resolve to the catalogue models.
    let (s, warm, smol) = complete(&base, "@cf/huggingfacetb/smollm2-135m-instruct", false).await;
    assert_eq!((s, warm.as_deref()), (200, Some("false")), "{smol}");
    assert!(smol.as_str().is_some_and(|t| !t.is_empty()), "{smol}");
    let (s, warm, again) = complete(&base, MODEL, false).await;
    assert_eq!((s, warm.as_deref()), (200, Some("true")));
    assert_eq!(again, smol);

    // Gemma needs SmolLM2's memory: it is unloaded (streamed response, cold).
    let (s, warm, gemma) = complete(&base, "@cf/google/gemma-3-270m", true).await;
    assert_eq!((s, warm.as_deref()), (200, Some("false")), "{gemma}");
    assert!(gemma.as_str().is_some_and(|t| !t.is_empty()), "{gemma}");
    let c = cards(&base).await;
    assert_eq!(
        (c[MODEL]["status"].as_str(), c[GEMMA]["status"].as_str()),
        (Some("unloaded"), Some("loaded"))
    );

    // Back and forth: each reload answers exactly as before.
    let (s, warm, smol2) = complete(&base, MODEL, true).await;
    assert_eq!((s, warm.as_deref(), &smol2), (200, Some("false"), &smol));
    let (s, warm, gemma2) = complete(&base, GEMMA, false).await;
    assert_eq!((s, warm.as_deref(), &gemma2), (200, Some("false"), &gemma));

    let unloads = per_model(&base, "kiln:model_unloads_total").await;
    assert_eq!((unloads[MODEL], unloads[GEMMA]), (2.0, 1.0), "{unloads:?}");
    let cold = per_model(&base, "kiln:requests_cold_total").await;
    let warm = per_model(&base, "kiln:requests_warm_total").await;
    assert_eq!((cold[MODEL], warm[MODEL]), (2.0, 1.0));
    assert_eq!((cold[GEMMA], warm[GEMMA]), (2.0, 0.0));
    let loads = per_model(&base, "kiln:model_load_seconds_count").await;
    assert_eq!((loads[MODEL], loads[GEMMA]), (2.0, 2.0));
    let loaded = per_model(&base, "kiln:model_loaded").await;
    assert_eq!((loaded[MODEL], loaded[GEMMA]), (0.0, 1.0));

    // An unknown model: 404 in OpenAI's error shape, naming what is served.
    let resp = client()
        .post(format!("{base}/v1/chat/completions"))
        .json(&json!({"model": "no-such-model", "messages": [{"role": "user", "content": "hi"}]}))
        .send()
        .await
        .unwrap_or_else(|e| panic!("POST: {e}"));
    assert_eq!(resp.status(), 404);
    assert!(resp.headers().get("x-kiln-warm").is_none());
    let err: Value = resp.json().await.unwrap_or(Value::Null);
    assert_eq!(err["error"]["code"], "model_not_found", "{err}");
    assert_eq!(err["error"]["type"], "not_found_error", "{err}");
    assert_eq!(err["error"]["param"], "model", "{err}");
    assert!(
        err["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains(MODEL) && m.contains(GEMMA)),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pinned_model_is_loaded_at_start_and_never_unloaded() {
    // `start` waits for /ready, which now means the pinned model is loaded.
    let server = start_two(&["--pin", MODEL]);
    let base = server.base_url();
    let c = cards(&base).await;
    assert_eq!(c[MODEL]["status"], "loaded");
    assert_eq!(c[MODEL]["pinned"], true);
    assert_eq!(c[GEMMA]["status"], "unloaded");

    let (s, warm, smol) = complete(&base, MODEL, false).await;
    assert_eq!((s, warm.as_deref()), (200, Some("true")), "{smol}");
    // Gemma can't fit beside the pinned model: 503 with the reason, not an unload.
    for stream in [false, true] {
        let (s, warm, err) = complete(&base, GEMMA, stream).await;
        assert_eq!((s, warm.as_deref()), (503, Some("false")), "{err}");
        assert_eq!(err["error"]["code"], "model_memory_exhausted", "{err}");
        assert!(
            err["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains(GEMMA) && m.contains("--models-memory")),
            "{err}"
        );
    }
    let (s, warm, again) = complete(&base, MODEL, true).await;
    assert_eq!((s, warm.as_deref(), &again), (200, Some("true"), &smol));
    let unloads = per_model(&base, "kiln:model_unloads_total").await;
    assert_eq!((unloads[MODEL], unloads[GEMMA]), (0.0, 0.0));
    assert_eq!(per_model(&base, "kiln:model_loaded").await[MODEL], 1.0);
}
