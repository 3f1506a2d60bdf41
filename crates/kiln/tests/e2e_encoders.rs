//! Encoder models served over HTTP beside text models: one `kiln serve` with two text
//! models, the all-MiniLM-L6-v2 embedder and the NanoGuard classifier. Chat works on both
//! text models; `/v1/embeddings` (float and base64) gives sentence-transformers' vectors
//! from the committed fixture; `dimensions`, over-long inputs, token ids and empty
//! inputs are 400s naming the field, and truncation makes over-long inputs 200s;
//! Workers AI embeddings and classification have their shapes and the fixtures' results;
//! a request to a model of the wrong task is a 400 that loads nothing; unknown models
//! are 404s; `/admin/usage`, `/metrics` and `/v1/models` account for the encoder
//! requests.

mod support;

use std::collections::HashMap;
use std::path::Path;

use serde_json::{json, Value};
use support::*;

const QWEN: &str = "qwen2.5-coder-0.5b-instruct";
const MINILM: &str = "all-minilm-l6-v2";
const NANOGUARD: &str = "nanoguard-prompt-injection";
const DIM: usize = 384;
const MAX_TOKENS: u64 = 256;

/// A fixture of kiln-encoder's reference tests (made by sentence-transformers and the
/// NanoGuard package; see `scripts/fixtures/`).
fn fixture(name: &str) -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../kiln-encoder/tests/fixtures")
        .join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// (text, token count, reference vector) of the MiniLM fixture's cases.
fn minilm_cases() -> Vec<(String, u64, Vec<f32>)> {
    fixture("minilm_reference.json")["cases"]
        .as_array()
        .expect("cases")
        .iter()
        .map(|c| {
            (
                c["text"].as_str().expect("text").to_string(),
                c["n_tokens"].as_u64().expect("n_tokens"),
                floats(&c["embedding"]),
            )
        })
        .collect()
}

fn floats(v: &Value) -> Vec<f32> {
    v.as_array()
        .unwrap_or_else(|| panic!("not an array: {v}"))
        .iter()
        .map(|x| x.as_f64().unwrap_or_else(|| panic!("not a number: {x}")) as f32)
        .collect()
}

fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let dot: f64 = a
        .iter()
        .zip(b)
        .map(|(&x, &y)| f64::from(x) * f64::from(y))
        .sum();
    let norm = |v: &[f32]| v.iter().map(|&x| f64::from(x).powi(2)).sum::<f64>().sqrt();
    dot / (norm(a) * norm(b))
}

/// Standard base64 (with padding), decoded here rather than by the server's crate.
fn base64_decode(s: &str) -> Vec<u8> {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let value = |c: u8| {
        ALPHABET
            .iter()
            .position(|&a| a == c)
            .unwrap_or_else(|| panic!("not base64: {c:?}")) as u32
    };
    let bytes = s.trim_end_matches('=').as_bytes();
    let mut out = Vec::with_capacity(bytes.len() * 3 / 4);
    for chunk in bytes.chunks(4) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |acc, (i, &c)| acc | (value(c) << (18 - 6 * i)));
        out.extend_from_slice(&n.to_be_bytes()[1..chunk.len()]);
    }
    out
}

fn le_f32s(bytes: &[u8]) -> Vec<f32> {
    assert_eq!(bytes.len() % 4, 0);
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

async fn post(base: &str, path: &str, body: Value) -> (u16, Value) {
    let resp = client()
        .post(format!("{base}{path}"))
        .json(&body)
        .send()
        .await
        .unwrap_or_else(|e| panic!("POST {path}: {e}"));
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

async fn get(base: &str, path: &str) -> Value {
    client()
        .get(format!("{base}{path}"))
        .send()
        .await
        .unwrap_or_else(|e| panic!("GET {path}: {e}"))
        .json()
        .await
        .unwrap_or(Value::Null)
}

async fn cards(base: &str) -> HashMap<String, Value> {
    get(base, "/v1/models").await["data"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .map(|c| (c["id"].as_str().unwrap_or_default().to_string(), c))
        .collect()
}

/// Asserts a 400 (or `status`) on `param` and returns the message.
fn error(status: u16, body: &Value, want_status: u16, param: &str) -> String {
    assert_eq!(status, want_status, "{body}");
    assert_eq!(body["error"]["param"], param, "{body}");
    body["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// The vectors of an embeddings response, decoding base64 ones.
fn vectors(body: &Value) -> Vec<Vec<f32>> {
    body["data"]
        .as_array()
        .unwrap_or_else(|| panic!("no data: {body}"))
        .iter()
        .enumerate()
        .map(|(i, d)| {
            assert_eq!(d["object"], "embedding");
            assert_eq!(d["index"], i);
            match &d["embedding"] {
                Value::String(s) => le_f32s(&base64_decode(s)),
                v => floats(v),
            }
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn encoders_serve_beside_text_models() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("usage.sqlite3");
    for m in [QWEN, MINILM, NANOGUARD] {
        kiln_testkit::model_dir(m);
    }
    let server = start(&[
        "--model",
        MODEL,
        "--model",
        QWEN,
        "--model",
        MINILM,
        "--model",
        NANOGUARD,
        "--kv-cache-memory",
        "16MiB",
        "--max-model-len",
        "256",
        "--max-num-seqs",
        "4",
        "--usage-db",
        db.to_str().expect("utf-8 path"),
    ]);
    let base = server.base_url();
    let c = cards(&base).await;
    for (m, task) in [
        (MODEL, "text-generation"),
        (QWEN, "text-generation"),
        (MINILM, "embeddings"),
        (NANOGUARD, "text-classification"),
    ] {
        assert_eq!(c[m]["task"], task, "{c:?}");
        assert_eq!(c[m]["status"], "unloaded", "{c:?}");
    }

    // A request for the wrong task is refused before anything loads.
    let chat = |model: &str| {
        json!({"model": model, "max_tokens": 4, "temperature": 0,
            "messages": [{"role": "user", "content": "Say hello."}]})
    };
    let (s, body) = post(&base, "/v1/chat/completions", chat(NANOGUARD)).await;
    let msg = error(s, &body, 400, "model");
    assert!(
        msg.contains("is a text-classification model") && msg.contains("/ai/run/"),
        "{msg}"
    );
    let (s, body) = post(&base, "/v1/chat/completions", chat(MINILM)).await;
    let msg = error(s, &body, 400, "model");
    assert!(
        msg.contains("is an embeddings model") && msg.contains("POST /v1/embeddings"),
        "{msg}"
    );
    let (s, body) = post(
        &base,
        "/v1/embeddings",
        json!({"model": MODEL, "input": "hi"}),
    )
    .await;
    let msg = error(s, &body, 400, "model");
    assert!(
        msg.contains("is a text-generation model") && msg.contains("/v1/chat/completions"),
        "{msg}"
    );
    let (s, body) = post(
        &base,
        "/v1/embeddings",
        json!({"model": NANOGUARD, "input": "hi"}),
    )
    .await;
    error(s, &body, 400, "model");
    let (s, body) = post(
        &base,
        "/v1/completions",
        json!({"model": MINILM, "prompt": "x"}),
    )
    .await;
    error(s, &body, 400, "model");
    let c = cards(&base).await;
    assert!(
        [MINILM, NANOGUARD]
            .iter()
            .all(|m| c[*m]["status"] == "unloaded"),
        "{c:?}"
    );

    // Unknown models are 404s on the encoder endpoints too.
    let (s, body) = post(
        &base,
        "/v1/embeddings",
        json!({"model": "nope", "input": "hi"}),
    )
    .await;
    error(s, &body, 404, "model");
    let (s, body) = post(&base, "/ai/run/@cf/nope/nope", json!({"text": "hi"})).await;
    error(s, &body, 404, "model");

    // Both text models chat.
    for m in [MODEL, QWEN] {
        let (s, body) = post(&base, "/v1/chat/completions", chat(m)).await;
        assert_eq!(s, 200, "{m}: {body}");
        let text = body["choices"][0]["message"]["content"]
            .as_str()
            .unwrap_or_default();
        assert!(!text.is_empty(), "{m}: {body}");
    }

    // Embeddings: sentence-transformers' vectors, in float and in base64, bit for bit
    // the same. The model name may be a Workers AI alias.
    let cases = minilm_cases();
    let picked: Vec<&(String, u64, Vec<f32>)> =
        [0, 6, 13, 14, 22].iter().map(|&i| &cases[i]).collect();
    let texts: Vec<&str> = picked.iter().map(|c| c.0.as_str()).collect();
    let tokens: u64 = picked.iter().map(|c| c.1).sum();
    let mut embed_tokens = 0u64;
    let mut embed_requests = 0u64;
    let (s, float_body) = post(
        &base,
        "/v1/embeddings",
        json!({"model": "@cf/sentence-transformers/all-minilm-l6-v2", "input": texts,
            "user": "someone", "dimensions": DIM}),
    )
    .await;
    assert_eq!(s, 200, "{float_body}");
    assert_eq!(float_body["object"], "list");
    assert_eq!(float_body["model"], MINILM);
    assert_eq!(
        float_body["usage"],
        json!({"prompt_tokens": tokens, "total_tokens": tokens})
    );
    (embed_tokens, embed_requests) = (embed_tokens + tokens, embed_requests + 1);
    let floats_out = vectors(&float_body);
    assert_eq!(floats_out.len(), picked.len());
    for ((text, _, want), got) in picked.iter().zip(&floats_out) {
        assert_eq!(got.len(), DIM);
        let cos = cosine(got, want);
        assert!(cos >= 0.9999, "cosine {cos} for {text:?}");
    }
    let (s, b64_body) = post(
        &base,
        "/v1/embeddings",
        json!({"model": MINILM, "input": texts, "encoding_format": "base64"}),
    )
    .await;
    assert_eq!(s, 200, "{b64_body}");
    assert!(b64_body["data"][0]["embedding"].is_string(), "{b64_body}");
    (embed_tokens, embed_requests) = (embed_tokens + tokens, embed_requests + 1);
    assert_eq!(vectors(&b64_body), floats_out);

    // Fixed size: any other `dimensions` is refused.
    let (s, body) = post(
        &base,
        "/v1/embeddings",
        json!({"model": MINILM, "input": "x", "dimensions": 128}),
    )
    .await;
    let msg = error(s, &body, 400, "dimensions");
    assert!(msg.contains("384"), "{msg}");

    // Over the model's 256 tokens: a 400 with both numbers, unless truncation is asked.
    let (long, long_tokens, long_want) = &cases[23];
    assert!(*long_tokens > MAX_TOKENS);
    let (s, body) = post(
        &base,
        "/v1/embeddings",
        json!({"model": MINILM, "input": ["short", long]}),
    )
    .await;
    let msg = error(s, &body, 400, "input");
    assert!(
        msg.contains(&format!("`input[1]` has {long_tokens} tokens"))
            && msg.contains("maximum of 256")
            && msg.contains("truncate"),
        "{msg}"
    );
    for extra in [
        json!({"truncate": true}),
        json!({"truncate_prompt_tokens": -1}),
    ] {
        let mut req = json!({"model": MINILM, "input": long});
        req.as_object_mut()
            .expect("object")
            .extend(extra.as_object().cloned().unwrap_or_default());
        let (s, body) = post(&base, "/v1/embeddings", req).await;
        assert_eq!(s, 200, "{body}");
        assert_eq!(body["usage"]["prompt_tokens"], MAX_TOKENS, "{body}");
        (embed_tokens, embed_requests) = (embed_tokens + MAX_TOKENS, embed_requests + 1);
        // sentence-transformers truncates the same way.
        let cos = cosine(&vectors(&body)[0], long_want);
        assert!(cos >= 0.9999, "truncated: cosine {cos}");
    }
    let (s, body) = post(
        &base,
        "/v1/embeddings",
        json!({"model": MINILM, "input": long, "truncate_prompt_tokens": 10}),
    )
    .await;
    error(s, &body, 400, "truncate_prompt_tokens");

    // Token ids and empty lists are refused; with no model named, the embedder is used.
    for input in [json!([101, 2023, 102]), json!([[101, 102]]), json!([])] {
        let (s, body) = post(
            &base,
            "/v1/embeddings",
            json!({"model": MINILM, "input": input}),
        )
        .await;
        error(s, &body, 400, "input");
    }
    let (s, body) = post(&base, "/v1/embeddings", json!({"input": texts[0]})).await;
    assert_eq!(s, 200, "{body}");
    assert_eq!(body["model"], MINILM);
    assert_eq!(vectors(&body)[0], floats_out[0]);
    (embed_tokens, embed_requests) = (embed_tokens + picked[0].1, embed_requests + 1);

    // Workers AI embeddings: `{shape, data}` with the same vectors.
    let (s, body) = post(
        &base,
        "/ai/run/@cf/sentence-transformers/all-minilm-l6-v2",
        json!({"text": texts[..2]}),
    )
    .await;
    assert_eq!(s, 200, "{body}");
    assert_eq!(body["success"], true, "{body}");
    assert_eq!(body["errors"], json!([]));
    assert_eq!(body["result"]["shape"], json!([2, DIM]), "{body}");
    let data: Vec<Vec<f32>> = body["result"]["data"]
        .as_array()
        .expect("data")
        .iter()
        .map(floats)
        .collect();
    for (got, want) in data.iter().zip(&floats_out) {
        assert!(cosine(got, want) >= 0.99999);
    }
    (embed_tokens, embed_requests) = (embed_tokens + picked[0].1 + picked[1].1, embed_requests + 1);
    let (s, body) = post(&base, &format!("/ai/run/{MINILM}"), json!({"text": long})).await;
    error(s, &body, 400, "text");
    let (s, body) = post(
        &base,
        &format!("/ai/run/{MINILM}"),
        json!({"text": long, "truncate_inputs": true}),
    )
    .await;
    assert_eq!(s, 200, "{body}");
    assert_eq!(body["result"]["shape"], json!([1, DIM]), "{body}");
    (embed_tokens, embed_requests) = (embed_tokens + MAX_TOKENS, embed_requests + 1);

    // Workers AI classification: the package's label for an injection and a benign text.
    let fx = fixture("nanoguard_reference.json");
    let nano_cases = fx["cases"].as_array().expect("cases");
    let mut classify_tokens = 0u64;
    for i in [28, 0] {
        let case = &nano_cases[i];
        let (s, body) = post(
            &base,
            "/ai/run/@kiln/nanoguard",
            json!({"text": case["text"]}),
        )
        .await;
        assert_eq!(s, 200, "{body}");
        assert_eq!(body["success"], true, "{body}");
        let scores = body["result"].as_array().expect("a list of scores");
        assert_eq!(scores.len(), 2, "{body}");
        assert_eq!(scores[0]["label"], case["label"], "{body}");
        assert!(
            scores[0]["score"].as_f64() >= scores[1]["score"].as_f64(),
            "{body}"
        );
        let injection = scores
            .iter()
            .find(|s| s["label"] == "injection")
            .and_then(|s| s["score"].as_f64())
            .expect("injection score");
        let want = case["injection_score"].as_f64().expect("score");
        assert!((injection - want).abs() <= 1e-4, "{injection} vs {want}");
        classify_tokens += case["n_tokens"].as_u64().expect("n_tokens");
    }
    let (s, body) = post(
        &base,
        &format!("/ai/run/{NANOGUARD}"),
        json!({"text": ["a", "b"]}),
    )
    .await;
    error(s, &body, 400, "text");
    let (s, body) = post(
        &base,
        &format!("/ai/run/{NANOGUARD}"),
        json!({"prompt": "hi"}),
    )
    .await;
    error(s, &body, 400, "text");

    // Usage: the encoder requests, their tokens as prompt tokens, nothing generated.
    let usage = get(&base, "/admin/usage").await;
    let row = |model: &str| {
        usage["data"]
            .as_array()
            .and_then(|rows| rows.iter().find(|r| r["model"] == model))
            .cloned()
            .unwrap_or_else(|| panic!("no usage row for {model}: {usage}"))
    };
    let minilm = row(MINILM);
    assert_eq!(
        (
            &minilm["requests"],
            &minilm["prompt_tokens"],
            &minilm["completion_tokens"]
        ),
        (&json!(embed_requests), &json!(embed_tokens), &json!(0)),
        "{usage}"
    );
    let nano = row(NANOGUARD);
    assert_eq!(
        (&nano["requests"], &nano["prompt_tokens"]),
        (&json!(2), &json!(classify_tokens)),
        "{usage}"
    );
    let c = cards(&base).await;
    let params = c[MINILM]["parameters"].as_f64().expect("parameters");
    let want = 2.0 * params * embed_tokens as f64 / 1e12;
    let neurons = minilm["neurons"].as_f64().expect("neurons");
    assert!((neurons - want).abs() <= want * 1e-9, "{neurons} vs {want}");
    let total = usage["totals"]["prompt_tokens"].as_u64().expect("total");
    assert!(total >= embed_tokens + classify_tokens, "{usage}");

    // The cards: loaded, their limits, the float weights of the files as parameters and
    // four bytes each as memory.
    for (m, max, params) in [(MINILM, 256, 22_713_216u64), (NANOGUARD, 512, 16_779_274)] {
        assert_eq!(c[m]["status"], "loaded", "{c:?}");
        assert_eq!(c[m]["max_model_len"], max, "{c:?}");
        assert_eq!(c[m]["parameters"], params, "{c:?}");
        assert_eq!(c[m]["memory_bytes"], 4 * params, "{c:?}");
    }
    let series = |name: &str, model: &str| format!("{name}{{model_name=\"{model}\"}} ");
    let text = metrics_text(&base).await;
    let value = |name: &str, model: &str| -> f64 {
        let s = series(name, model);
        series_value(&text, &s).unwrap_or_else(|| panic!("{s} not in /metrics"))
    };
    assert_eq!(
        value("kiln:prompt_tokens_total", MINILM),
        embed_tokens as f64
    );
    assert_eq!(value("kiln:requests_cold_total", NANOGUARD), 1.0);
    assert_eq!(value("kiln:model_loaded", MINILM), 1.0);
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for entry in std::fs::read_dir(from).expect("read dir").flatten() {
        let target = to.join(entry.file_name());
        if entry.path().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).expect("copy");
        }
    }
}

/// `kiln pull` converts NanoGuard's PyTorch files at once (once), so that serving never
/// has to write into the cache.
#[test]
fn pull_converts_nanoguard_once() {
    let home = tempfile::tempdir().expect("tempdir");
    let dir = home.path().join("models").join(NANOGUARD);
    copy_dir(&kiln_testkit::model_dir(NANOGUARD), &dir);
    let outputs = ["model.safetensors", "tokenizer.json", "config.json"];
    for f in outputs {
        let _ = std::fs::remove_file(dir.join(f));
    }
    let pull = || {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_kiln"))
            .arg("--kiln-home")
            .arg(home.path())
            .args(["pull", "@kiln/nanoguard"])
            .output()
            .expect("run kiln pull");
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    // The copies are adopted (rehashed, not fetched: their mtimes are new), then converted.
    let first = pull();
    assert!(first.contains("converted to safetensors"), "{first}");
    assert!(outputs.iter().all(|f| dir.join(f).is_file()), "{first}");
    let second = pull();
    assert!(
        second.contains("already cached") && !second.contains("converted"),
        "{second}"
    );
}
