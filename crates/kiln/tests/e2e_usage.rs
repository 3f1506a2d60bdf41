//! Usage metering over HTTP: `/admin/usage` totals per API key equal the sums of the
//! `usage` objects the clients received (plain and streamed chat, `n > 1` completions,
//! Workers AI), an aborted stream counts its prompt and what it produced, the admin
//! endpoint needs the admin key, and the totals survive SIGTERM and a restart on the
//! same `--usage-db`.

mod support;

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::*;

const KEY_A: &str = "sk-usage-team-a";
const KEY_B: &str = "sk-usage-b";
const ADMIN: &str = "sk-usage-admin";

/// Prompt, cached and completion tokens, and requests.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
struct Tally {
    requests: u64,
    prompt: u64,
    cached: u64,
    completion: u64,
}

impl Tally {
    fn add(&mut self, usage: &Value) {
        self.requests += 1;
        self.prompt += usage["prompt_tokens"].as_u64().expect("prompt_tokens");
        self.cached += usage["prompt_tokens_details"]["cached_tokens"]
            .as_u64()
            .unwrap_or(0);
        self.completion += usage["completion_tokens"]
            .as_u64()
            .expect("completion_tokens");
    }

    fn of(row: &Value) -> Self {
        let n = |k: &str| row[k].as_u64().unwrap_or(0);
        Tally {
            requests: n("requests"),
            prompt: n("prompt_tokens"),
            cached: n("cached_tokens"),
            completion: n("completion_tokens"),
        }
    }
}

fn start_metered(dir: &std::path::Path) -> kiln_testkit::server::ServerProcess {
    let config = dir.join("kiln.toml");
    std::fs::write(
        &config,
        format!(
            "api_keys = [{{ key = \"{KEY_A}\", label = \"team-a\" }}, \"{KEY_B}\"]\n\
             admin_keys = [\"{ADMIN}\"]\n"
        ),
    )
    .expect("write config");
    let db = dir.join("usage.sqlite3");
    start(&[
        "--config",
        config.to_str().expect("utf-8 path"),
        "--usage-db",
        db.to_str().expect("utf-8 path"),
        "--kv-cache-memory",
        "32MiB",
        "--max-model-len",
        "512",
    ])
}

async fn post(base: &str, path: &str, key: &str, body: Value) -> reqwest::Response {
    let resp = client()
        .post(format!("{base}{path}"))
        .bearer_auth(key)
        .json(&body)
        .send()
        .await
        .unwrap_or_else(|e| panic!("POST {path}: {e}"));
    assert_eq!(resp.status(), 200, "POST {path}");
    resp
}

/// Every SSE payload of a response, to the end.
async fn events(resp: reqwest::Response) -> Vec<Value> {
    let mut body = Box::pin(resp.bytes_stream());
    let mut buf = Vec::new();
    let all = read_events(&mut body, &mut buf, usize::MAX).await;
    assert_eq!(all.last().map(String::as_str), Some("[DONE]"));
    all.iter()
        .filter_map(|e| serde_json::from_str(e).ok())
        .collect()
}

async fn usage_report(base: &str, key: Option<&str>) -> (u16, Value) {
    let mut req = client().get(format!("{base}/admin/usage"));
    if let Some(k) = key {
        req = req.bearer_auth(k);
    }
    let resp = req.send().await.unwrap_or_else(|e| panic!("GET: {e}"));
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

fn row<'a>(report: &'a Value, label: Option<&str>, key_id_prefix: &str) -> &'a Value {
    report["data"]
        .as_array()
        .and_then(|rows| {
            rows.iter().find(|r| {
                r["model"] == MODEL
                    && r["label"].as_str() == label
                    && r["key_id"]
                        .as_str()
                        .is_some_and(|k| k.starts_with(key_id_prefix))
            })
        })
        .unwrap_or_else(|| panic!("no row for {label:?} in {report}"))
}

fn chat(content: &str, extra: Value) -> Value {
    let mut body = json!({"model": MODEL, "max_tokens": 5, "ignore_eos": true,
        "messages": [{"role": "system", "content": "You are a terse assistant who answers in one short sentence."},
                     {"role": "user", "content": content}]});
    if let (Some(b), Some(e)) = (body.as_object_mut(), extra.as_object()) {
        b.extend(e.clone());
    }
    body
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_totals_match_what_clients_were_told_and_survive_a_restart() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut server = start_metered(dir.path());
    let base = server.base_url();
    let (mut a, mut b) = (Tally::default(), Tally::default());

    // Key A: plain chat twice (the second reuses the cached prefix), then streamed.
    for _ in 0..2 {
        let v: Value = post(
            &base,
            "/v1/chat/completions",
            KEY_A,
            chat("Name a colour.", json!({})),
        )
        .await
        .json()
        .await
        .expect("json");
        a.add(&v["usage"]);
    }
    assert!(
        a.cached > 0,
        "the repeated prompt hit the prefix cache: {a:?}"
    );
    let streamed = events(
        post(
            &base,
            "/v1/chat/completions",
            KEY_A,
            chat(
                "Name a fruit.",
                json!({"stream": true, "stream_options": {"include_usage": true}}),
            ),
        )
        .await,
    )
    .await;
    let usage = streamed
        .iter()
        .rev()
        .find(|v| v["usage"].is_object())
        .expect("a usage chunk");
    a.add(&usage["usage"]);

    // Key B: two completions of each of two prompts, and a Workers AI run.
    let v: Value = post(
        &base,
        "/v1/completions",
        KEY_B,
        json!({"model": MODEL, "prompt": ["Once upon a time", "In a galaxy"], "n": 2,
            "max_tokens": 3, "ignore_eos": true, "temperature": 0.7, "seed": 1}),
    )
    .await
    .json()
    .await
    .expect("json");
    assert_eq!(v["usage"]["completion_tokens"], 12, "{v}");
    b.add(&v["usage"]);
    let v: Value = post(
        &base,
        &format!("/ai/run/@cf/huggingfacetb/{MODEL}"),
        KEY_B,
        json!({"prompt": "Say hi", "max_tokens": 4}),
    )
    .await
    .json()
    .await
    .expect("json");
    b.add(&v["result"]["usage"]);

    // The admin endpoint: open to the admin key only.
    assert_eq!(usage_report(&base, None).await.0, 401);
    assert_eq!(usage_report(&base, Some(KEY_A)).await.0, 401);
    let (status, report) = usage_report(&base, Some(ADMIN)).await;
    assert_eq!(status, 200, "{report}");
    let row_a = row(&report, Some("team-a"), "key_");
    let row_b = row(&report, None, "key_");
    assert_eq!(Tally::of(row_a), a, "{report}");
    assert_eq!(Tally::of(row_b), b, "{report}");
    assert!(!report.to_string().contains(KEY_A), "raw keys never appear");

    // Neurons follow the documented formula with the model's parameter count.
    let models: Value = client()
        .get(format!("{base}/v1/models"))
        .bearer_auth(KEY_A)
        .send()
        .await
        .expect("models")
        .json()
        .await
        .expect("json");
    let params = models["data"][0]["parameters"]
        .as_f64()
        .expect("parameters");
    for (row, t) in [(row_a, a), (row_b, b)] {
        let want = 2.0 * params * ((t.prompt - t.cached) as f64 + 4.0 * t.completion as f64) / 1e12;
        let got = row["neurons"].as_f64().expect("neurons");
        assert!((got - want).abs() <= want * 1e-9, "neurons {got} vs {want}");
    }

    // An aborted stream: its prompt and the tokens it produced still count.
    let prompt_len = a.prompt / a.requests; // every key-A chat prompt has the same length
    let resp = post(
        &base,
        "/v1/chat/completions",
        KEY_A,
        chat("Name a colour.", json!({"stream": true, "max_tokens": 64})),
    )
    .await;
    let mut body = Box::pin(resp.bytes_stream());
    let mut buf = Vec::new();
    let seen = read_events(&mut body, &mut buf, 4).await; // role chunk + 3 content chunks
    assert_eq!(seen.len(), 4);
    drop(body);
    let deadline = Instant::now() + Duration::from_secs(30);
    let after = loop {
        let (_, report) = usage_report(&base, Some(ADMIN)).await;
        let t = Tally::of(row(&report, Some("team-a"), "key_"));
        if t.requests == a.requests + 1 {
            break t;
        }
        assert!(
            Instant::now() < deadline,
            "the aborted stream was never metered: {report}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(after.prompt, a.prompt + prompt_len);
    let produced = after.completion - a.completion;
    assert!(
        (3..=64).contains(&produced),
        "aborted stream counted {produced} tokens"
    );
    let (_, before_restart) = usage_report(&base, Some(ADMIN)).await;

    // SIGTERM, then a new server on the same database reports the same totals.
    server.terminate().expect("SIGTERM");
    let status = server.wait_exit(Duration::from_secs(60)).expect("exited");
    assert!(status.success(), "{status}");
    // The database (and its journal) holds key ids and labels, never a key.
    for entry in std::fs::read_dir(dir.path()).expect("read dir").flatten() {
        let bytes = std::fs::read(entry.path()).expect("read");
        for key in [KEY_A, KEY_B, ADMIN] {
            assert!(
                !bytes.windows(key.len()).any(|w| w == key.as_bytes())
                    || entry.path().extension().is_some_and(|e| e == "toml"),
                "{key} found in {}",
                entry.path().display()
            );
        }
    }
    let server = start_metered(dir.path());
    let (status, after_restart) = usage_report(&server.base_url(), Some(ADMIN)).await;
    assert_eq!(status, 200);
    assert_eq!(after_restart["data"], before_restart["data"]);
    assert_eq!(after_restart["totals"], before_restart["totals"]);
}
