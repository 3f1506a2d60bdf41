//! State that lives on one node: each agent is placed by its name on the ring and
//! every request for it reaches that node, and a key's stored responses (with their
//! chains), files, batches, vector indexes and vector stores stay on one node.

use std::collections::BTreeSet;

use serde_json::{json, Value};

use crate::harness::*;

async fn send(method: reqwest::Method, url: &str, body: Option<Value>) -> (u16, String, Value) {
    let mut req = client().request(method, url);
    if let Some(b) = body {
        req = req.json(&b);
    }
    let resp = req.send().await.unwrap_or_else(|e| panic!("{url}: {e}"));
    let status = resp.status().as_u16();
    let node = resp
        .headers()
        .get("x-kiln-node")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let text = resp.text().await.expect("body");
    (
        status,
        node,
        serde_json::from_str(&text).unwrap_or(Value::Null),
    )
}

#[test]
fn each_agent_lives_on_one_node_and_response_chains_hold() {
    serially(async {
        let data: Vec<_> = (0..3)
            .map(|_| tempfile::tempdir().expect("tempdir"))
            .collect();
        let fleet: Vec<_> = data
            .iter()
            .map(|d| {
                let dir = d.path().to_string_lossy().to_string();
                node(&[SMOLLM2], &["--data-dir", &dir])
            })
            .collect();
        let mut args = vec!["--health-interval".to_string(), "0.5".into()];
        for (i, n) in fleet.iter().enumerate() {
            args.extend(["--node".into(), format!("{}@name=n{}", n.base_url(), i + 1)]);
        }
        let router = Router::start(&args).await;
        let base = router.url();
        let mut homes = BTreeSet::new();
        for i in 0..8 {
            let name = format!("agent-{i}");
            let url = format!("{base}/v1/agents/{name}");
            let (status, home, body) = send(
                reqwest::Method::PUT,
                &url,
                Some(json!({"model": SMOLLM2, "max_output_tokens": 4})),
            )
            .await;
            assert_eq!(status, 200, "{body}");
            for _ in 0..2 {
                let (status, node, body) = send(
                    reqwest::Method::PUT,
                    &format!("{url}/state"),
                    Some(json!({"i": i})),
                )
                .await;
                assert_eq!((status, node.as_str()), (200, home.as_str()), "{body}");
                let (status, node, body) = send(reqwest::Method::GET, &url, None).await;
                assert_eq!((status, node.as_str()), (200, home.as_str()), "{body}");
            }
            // Only its home node has it.
            let idx: usize = home.trim_start_matches('n').parse::<usize>().expect("node") - 1;
            for (j, n) in fleet.iter().enumerate() {
                let (status, _, _) = send(
                    reqwest::Method::GET,
                    &format!("{}/v1/agents/{name}", n.base_url()),
                    None,
                )
                .await;
                assert_eq!(
                    status,
                    if j == idx { 200 } else { 404 },
                    "{name} on n{}",
                    j + 1
                );
            }
            homes.insert(home);
        }
        assert!(homes.len() > 1, "8 agents all on one node: {homes:?}");

        // A conversation by previous_response_id works through the router.
        let url = format!("{base}/v1/responses");
        let (status, n1, first) = send(
            reqwest::Method::POST,
            &url,
            Some(json!({"input": "Hello.", "max_output_tokens": 4})),
        )
        .await;
        assert_eq!(status, 200, "{first}");
        let (status, n2, next) = send(
            reqwest::Method::POST,
            &url,
            Some(json!({"input": "Again.", "max_output_tokens": 4,
                        "previous_response_id": first["id"]})),
        )
        .await;
        assert_eq!((status, &n2), (200, &n1), "{next}");
        let (status, _, got) = send(
            reqwest::Method::GET,
            &format!("{url}/{}", first["id"].as_str().unwrap_or("")),
            None,
        )
        .await;
        assert_eq!(status, 200, "{got}");

        // A file and the batch that reads it land on the key's node, with its responses.
        let line = json!({"custom_id": "a", "method": "POST", "url": "/v1/chat/completions",
                          "body": {"messages": [{"role": "user", "content": "Hi"}],
                                   "max_tokens": 2}});
        let form = reqwest::multipart::Form::new()
            .text("purpose", "batch")
            .part(
                "file",
                reqwest::multipart::Part::text(format!("{line}\n")).file_name("a.jsonl"),
            );
        let resp = client()
            .post(format!("{base}/v1/files"))
            .multipart(form)
            .send()
            .await
            .expect("upload");
        let node = resp.headers().get("x-kiln-node").cloned();
        let file: Value = resp.json().await.expect("file");
        assert_eq!(
            node.as_ref().and_then(|v| v.to_str().ok()),
            Some(n1.as_str()),
            "{file}"
        );
        let (status, node, batch) = send(
            reqwest::Method::POST,
            &format!("{base}/v1/batches"),
            Some(
                json!({"input_file_id": file["id"], "endpoint": "/v1/chat/completions",
                        "completion_window": "24h"}),
            ),
        )
        .await;
        assert_eq!((status, node.as_str()), (200, n1.as_str()), "{batch}");
        let url = format!("{base}/v1/batches/{}", batch["id"].as_str().unwrap_or(""));
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
        loop {
            let (status, node, b) = send(reqwest::Method::GET, &url, None).await;
            assert_eq!((status, node.as_str()), (200, n1.as_str()), "{b}");
            if b["status"] == "completed" {
                assert_eq!(b["request_counts"]["completed"], 1, "{b}");
                break;
            }
            assert!(std::time::Instant::now() < deadline, "{b}");
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        // The key's vector indexes live on the same node: every call lands there.
        let v = format!("{base}/vectorize/v2/indexes");
        let calls = [
            (
                reqwest::Method::POST,
                v.clone(),
                Some(json!({"name": "docs", "config": {"dimensions": 2, "metric": "euclidean"}})),
            ),
            (
                reqwest::Method::POST,
                format!("{v}/docs/upsert"),
                Some(json!({"id": "a", "values": [1.0, 2.0]})),
            ),
            (
                reqwest::Method::GET,
                format!("{base}/v1/vector_stores"),
                None,
            ),
            (
                reqwest::Method::POST,
                format!("{v}/docs/query"),
                Some(json!({"vector": [1.0, 2.0], "topK": 1})),
            ),
        ];
        let mut last = Value::Null;
        for (method, url, body) in calls {
            let (status, node, b) = send(method, &url, body).await;
            assert_eq!((status, node.as_str()), (200, n1.as_str()), "{url}: {b}");
            last = b;
        }
        assert_eq!(last["result"]["matches"][0]["id"], "a", "{last}");
    });
}
