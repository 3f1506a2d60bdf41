//! LoRA adapters over HTTP on the real SmolLM2, with adapters this test writes:
//! - `steer`: random pairs on every projection of three layers. Served on `base` it
//!   answers as `merged`, the same adapter merged into the weights (as llama.cpp's
//!   converter lays out a merged model), served as a second model;
//! - `zero`: `B = 0` (how PEFT initialises an adapter), which changes nothing;
//! - `wide`: made for a model with a hidden size of 896 → 400;
//! - `corrupt`: a weights file of garbage → 400, while everything else keeps serving.
//!
//! Requests for different adapters and none share batches; the prefix cache never hands
//! one adapter's KV to another; `--max-loras 1` reloads an evicted adapter.

mod support;

use std::path::Path;

use kiln_testkit::lora::{
    config_json, random_pairs, write_adapter, MergedFixture, Pair, ALL_MODULES,
};
use serde_json::{json, Value};
use support::*;

/// Writes the models and adapters; returns the `kiln serve` arguments.
fn fixtures(dir: &Path) -> Vec<String> {
    let src = kiln_testkit::gguf(MODEL);
    let steer = random_pairs(&src, &[0, 14, 29], &ALL_MODULES, 8, 0.3, 1);
    let adapters = dir.join("adapters");
    write_adapter(
        &adapters.join("steer"),
        &config_json(8, 16.0, MODEL, &steer),
        &steer,
    );
    let mut zero = random_pairs(&src, &[2, 9], &ALL_MODULES, 4, 0.05, 2);
    zero.iter_mut()
        .for_each(|p| p.b.iter_mut().for_each(|b| *b = 0.0));
    write_adapter(
        &adapters.join("zero"),
        &config_json(4, 8.0, MODEL, &zero),
        &zero,
    );
    let wide = vec![Pair {
        layer: 0,
        module: "self_attn.q_proj",
        rank: 4,
        inputs: 896,
        outputs: 896,
        a: vec![0.01; 4 * 896],
        b: vec![0.01; 896 * 4],
    }];
    write_adapter(
        &adapters.join("wide"),
        &config_json(4, 8.0, "Qwen/Qwen2.5-0.5B", &wide),
        &wide,
    );
    write_adapter(
        &adapters.join("corrupt"),
        &config_json(8, 16.0, MODEL, &steer[..1]),
        &steer[..1],
    );
    std::fs::write(
        adapters.join("corrupt/adapter_model.safetensors"),
        b"not a safetensors file",
    )
    .expect("corrupt the weights");
    let fixture = MergedFixture::write(&src, dir, &steer, 16.0 / 8.0);
    [
        "--model",
        &fixture.base.display().to_string(),
        "--model",
        &fixture.merged.display().to_string(),
        "--lora-dir",
        &adapters.display().to_string(),
        "--max-loras",
        "1",
        // f32 K/V: the comparison with the merged weights isn't blurred by f16 roundings.
        "--kv-cache-dtype",
        "f32",
        "--kv-cache-memory",
        "32MiB",
        "--max-model-len",
        "512",
        "--max-num-seqs",
        "8",
    ]
    .map(String::from)
    .to_vec()
}

/// A greedy completion with top-2 logprobs: (status, body).
async fn complete(base: &str, body: Value) -> (u16, Value) {
    let resp = client()
        .post(format!("{base}/v1/completions"))
        .json(&body)
        .send()
        .await
        .unwrap_or_else(|e| panic!("POST /v1/completions: {e}"));
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

fn greedy(model: &str, prompt: &str) -> Value {
    json!({"model": model, "prompt": prompt, "max_tokens": 12, "temperature": 0,
        "logprobs": 2, "ignore_eos": true})
}

/// (tokens, their logprobs, the gap between the top two at each step).
fn tokens(v: &Value) -> (Vec<String>, Vec<f64>, Vec<f64>) {
    let lp = &v["choices"][0]["logprobs"];
    let toks = lp["tokens"].as_array().expect("tokens");
    let toks: Vec<String> = toks
        .iter()
        .map(|t| t.as_str().unwrap_or("").to_string())
        .collect();
    let lps: Vec<f64> = lp["token_logprobs"]
        .as_array()
        .expect("token_logprobs")
        .iter()
        .map(|x| x.as_f64().unwrap_or(f64::NAN))
        .collect();
    let gaps = lp["top_logprobs"]
        .as_array()
        .expect("top_logprobs")
        .iter()
        .map(|m| {
            let mut v: Vec<f64> = m
                .as_object()
                .map(|o| o.values().filter_map(Value::as_f64).collect())
                .unwrap_or_default();
            v.sort_by(|a, b| b.total_cmp(a));
            v.first()
                .zip(v.get(1))
                .map_or(f64::INFINITY, |(a, b)| a - b)
        })
        .collect();
    (toks, lps, gaps)
}

fn cached(v: &Value) -> u64 {
    v["usage"]["prompt_tokens_details"]["cached_tokens"]
        .as_u64()
        .unwrap_or(0)
}

async fn adapter_loads(base: &str) -> f64 {
    let text = metrics_text(base).await;
    let series = "kiln:lora_adapter_loads_total{model_name=\"base\"} ";
    series_value(&text, series).unwrap_or_else(|| panic!("{series} not in /metrics"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn lora_adapters_over_http() {
    let dir = tempfile::tempdir().expect("tempdir");
    let args = fixtures(dir.path());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let server = start(&args);
    let url = server.base_url();
    let prompt = "The three most important things about baking bread are";

    // The adapter answers as its merge, and differs from the base.
    let (s, adapted) = complete(&url, greedy("base:steer", prompt)).await;
    assert_eq!(s, 200, "{adapted}");
    let (_, merged) = complete(&url, greedy("merged", prompt)).await;
    let (_, plain) = complete(&url, greedy("base", prompt)).await;
    let (ta, la, _) = tokens(&adapted);
    let (tm, lm, gaps) = tokens(&merged);
    let (tp, lp, _) = tokens(&plain);
    assert_ne!(ta, tp, "the adapter changed nothing");
    eprintln!("adapter {ta:?}\nmerged  {tm:?}\nbase    {tp:?}");
    for i in 0..tm.len() {
        assert!(
            (la[i] - lm[i]).abs() < 0.02,
            "step {i}: logprob {} vs merged {}",
            la[i],
            lm[i]
        );
        if gaps[i] < 0.05 {
            break; // a near tie: the paths may part here without either being wrong
        }
        assert_eq!(ta[i], tm[i], "step {i}: adapter {ta:?} vs merged {tm:?}");
    }

    // `lora` is the same as `model: "base:adapter"`.
    let mut by_field = greedy("base", prompt);
    by_field["lora"] = json!("steer");
    let (s, v) = complete(&url, by_field).await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(tokens(&v).0, ta);

    // A zero adapter changes nothing, exactly.
    let (s, zero) = complete(&url, greedy("base:zero", prompt)).await;
    assert_eq!(s, 200, "{zero}");
    assert_eq!(tokens(&zero).0, tp);
    assert_eq!(tokens(&zero).1, lp);

    // Mixed batches: every request gets what it got alone. `--max-loras 1` means the
    // two adapters evict each other; each reload counts.
    let loads_before = adapter_loads(&url).await;
    let mut tasks = Vec::new();
    for model in [
        "base:steer",
        "base",
        "base:steer",
        "base",
        "merged",
        "base:steer",
    ] {
        let url = url.clone();
        tasks.push(tokio::spawn(async move {
            (model, complete(&url, greedy(model, prompt)).await)
        }));
    }
    for t in tasks {
        let (model, (s, v)) = t.await.expect("task");
        assert_eq!(s, 200, "{model}: {v}");
        let want = match model {
            "base:steer" => &ta,
            "merged" => &tm,
            _ => &tp,
        };
        assert_eq!(&tokens(&v).0, want, "{model} in a mixed batch");
    }
    assert!(
        adapter_loads(&url).await > loads_before,
        "steer was evicted by zero, so it reloads"
    );

    // The prefix cache is keyed by the adapter.
    let long = "Explain, step by step and with care, how a sourdough starter is fed, how the \
                dough is folded, proofed overnight in the cold, scored and baked in a hot \
                covered pot until the crust is deep brown.";
    let body =
        |model: &str| json!({"model": model, "prompt": long, "max_tokens": 2, "temperature": 0});
    let (_, v) = complete(&url, body("base")).await;
    assert_eq!(cached(&v), 0, "first sight of the prompt");
    let (_, v) = complete(&url, body("base")).await;
    assert!(cached(&v) >= 16, "base reuses its own KV: {}", v["usage"]);
    let (_, v) = complete(&url, body("base:steer")).await;
    assert_eq!(
        cached(&v),
        0,
        "another adapter must not reuse the base's KV: {}",
        v["usage"]
    );
    let (_, v) = complete(&url, body("base:steer")).await;
    assert!(
        cached(&v) >= 16,
        "the adapter reuses its own KV: {}",
        v["usage"]
    );

    // Bad adapters: clear errors, and serving goes on.
    for (model, status, code, says) in [
        ("base:nope", 404, "adapter_not_found", "steer"),
        ("base:../adapters/steer", 404, "adapter_not_found", "nope"),
        ("base:wide", 400, "adapter_mismatch", "896"),
        ("base:corrupt", 400, "adapter_invalid", "weights"),
    ] {
        let (s, v) = complete(&url, greedy(model, prompt)).await;
        assert_eq!(s, status, "{model}: {v}");
        assert_eq!(v["error"]["code"], code, "{model}: {v}");
        if model != "base:../adapters/steer" {
            assert!(
                v["error"]["message"].as_str().unwrap_or("").contains(says),
                "{model}: {v}"
            );
        }
    }
    let mut conflict = greedy("base:steer", prompt);
    conflict["lora"] = json!("zero");
    let (s, v) = complete(&url, conflict).await;
    assert_eq!(
        (s, v["error"]["param"].as_str()),
        (400, Some("lora")),
        "{v}"
    );
    let (s, v) = complete(&url, greedy("base:steer", prompt)).await;
    assert_eq!(
        (s, tokens(&v).0),
        (200, ta.clone()),
        "steer after the failures"
    );
    let (s, v) = complete(&url, greedy("merged", prompt)).await;
    assert_eq!(
        (s, tokens(&v).0),
        (200, tm.clone()),
        "the other model after the failures"
    );

    // Workers AI's `lora` field.
    let resp = client()
        .post(format!("{url}/ai/run/base"))
        .json(
            &json!({"prompt": prompt, "raw": true, "lora": "steer", "max_tokens": 12,
            "temperature": 0}),
        )
        .send()
        .await
        .expect("POST /ai/run");
    assert_eq!(resp.status().as_u16(), 200);
    for (lora, status) in [
        (json!("steer"), 200),
        (json!(null), 200),
        (json!("zero"), 400),
    ] {
        let resp = client()
            .post(format!("{url}/ai/run/base:steer"))
            .json(&json!({"prompt": prompt, "lora": lora, "max_tokens": 4}))
            .send()
            .await
            .expect("POST /ai/run/base:steer");
        assert_eq!(resp.status().as_u16(), status, "lora {lora}");
    }

    // The card lists the adapters and which are loaded.
    let models: Value = client()
        .get(format!("{url}/v1/models/base"))
        .send()
        .await
        .expect("GET /v1/models/base")
        .json()
        .await
        .expect("card");
    assert_eq!(
        models["adapters"],
        json!(["corrupt", "steer", "wide", "zero"]),
        "{models}"
    );
    assert_eq!(models["adapters_loaded"], json!(["steer"]), "{models}");
    drop(server);
}
