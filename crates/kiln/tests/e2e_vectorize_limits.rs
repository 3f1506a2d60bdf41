//! Vectorize writes take what Cloudflare documents, not the default body limit: a
//! 5,000-vector, 64-dimension NDJSON upsert (over 4 MiB) is accepted whole, and a body
//! over 100 MB is a 413 in OpenAI's error shape naming the limit.

mod support;

use serde_json::{json, Value};
use support::*;

const BASE: &str = "/vectorize/v2/indexes";

async fn post(base: &str, path: &str, ndjson: bool, body: Vec<u8>) -> (u16, Value) {
    let content_type = if ndjson {
        "application/x-ndjson"
    } else {
        "application/json"
    };
    let r = client()
        .post(format!("{base}{BASE}{path}"))
        .header("content-type", content_type)
        .body(body)
        .send()
        .await
        .expect("request");
    let status = r.status().as_u16();
    (status, r.json().await.expect("a JSON body"))
}

#[test]
fn a_5000_vector_upsert_is_accepted_and_over_100_mb_is_a_413() {
    let data = tempfile::tempdir().expect("tempdir");
    let server = start(&["--data-dir", &data.path().to_string_lossy()]);
    let base = server.base_url();
    block_on(async {
        let index = json!({"name": "wide", "config": {"dimensions": 64, "metric": "cosine"}});
        let (s, v) = post(&base, "", false, index.to_string().into_bytes()).await;
        assert_eq!(s, 200, "{v}");

        let mut body = String::new();
        for i in 0..5000u32 {
            let values: Vec<f64> = (0..64u32)
                .map(|d| f64::from(i * 64 + d + 1) / 987_654.321)
                .collect();
            let line = json!({"id": format!("v{i}"), "values": values, "metadata": {"n": i}});
            body.push_str(&line.to_string());
            body.push('\n');
        }
        assert!(
            body.len() > 4 << 20,
            "over the 4 MiB default: {}",
            body.len()
        );
        let (s, v) = post(&base, "/wide/upsert", true, body.into_bytes()).await;
        assert_eq!(s, 200, "{v}");
        assert_eq!(v["success"], true, "{v}");
        let ids = json!({"ids": ["v0", "v4999"]}).to_string().into_bytes();
        let (s, v) = post(&base, "/wide/get_by_ids", false, ids).await;
        assert_eq!(s, 200, "{v}");
        let got = v["result"].as_array().expect("vectors");
        assert_eq!(got.len(), 2, "{v}");
        assert_eq!(got[1]["values"].as_array().map(Vec::len), Some(64));

        // Over Cloudflare's 100 MB: refused whole, in OpenAI's shape too.
        let (s, v) = post(&base, "/wide/insert", true, vec![b'\n'; 100_000_001]).await;
        assert_eq!(s, 413, "{v}");
        assert_eq!(v["error"]["code"], "request_too_large", "{v}");
        assert_eq!(v["error"]["type"], "invalid_request_error", "{v}");
        let message = v["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains("limit of 100000000 bytes"), "{v}");

        // Other routes keep the 4 MiB default.
        let big = json!({"vector": vec![0.5; 64], "pad": "x".repeat(5 << 20)});
        let (s, v) = post(&base, "/wide/query", false, big.to_string().into_bytes()).await;
        assert_eq!(s, 413, "{v}");
        let message = v["error"]["message"].as_str().unwrap_or_default();
        assert!(
            message.contains(&format!("limit of {} bytes", 4 << 20)),
            "{v}"
        );
    });
}
