//! The upstream receives exactly the requests no node can serve.

use serde_json::{json, Value};

use crate::harness::*;

fn completion(prompt: &str, max_tokens: u32) -> Value {
    json!({"model": SMOLLM2, "prompt": prompt, "max_tokens": max_tokens})
}

#[test]
fn the_upstream_gets_exactly_what_no_node_can_serve() {
    serially(async {
        // Edges: one sequence each, no queue, a short context. Central: a key, a longer
        // context, and a model the edges lack.
        let edge_args = [
            "--max-num-seqs",
            "1",
            "--max-queued",
            "0",
            "--max-model-len",
            "256",
        ];
        let edges: Vec<_> = (0..2).map(|_| node(&[SMOLLM2], &edge_args)).collect();
        let central = node(&[SMOLLM2, GEMMA3], &["--api-key", "central-secret"]);
        let mut args: Vec<String> = vec![
            "--upstream".into(),
            central.base_url(),
            "--upstream-api-key".into(),
            "central-secret".into(),
        ];
        for (i, n) in edges.iter().enumerate() {
            args.extend([
                "--node".into(),
                format!("{}@name=e{},colo=edge", n.base_url(), i + 1),
            ]);
        }
        let router = Router::start(&args).await;
        let url = |path: &str| format!("{}{path}", router.url());

        // Served at the edge.
        for i in 0..3 {
            let r = post(
                &url("/v1/completions"),
                &completion(&format!("Edge {i}"), 2),
                &[],
                |_, _| {},
            )
            .await;
            assert_eq!(r.status, 200, "{:?}", r.events);
            assert!(r.node.starts_with('e'), "{}", r.node);
        }
        // A model no edge lists.
        let r = post(
            &url("/v1/completions"),
            &json!({"model": "gemma3", "prompt": "Hi", "max_tokens": 2}),
            &[],
            |_, _| {},
        )
        .await;
        assert_eq!(
            (r.status, r.node.as_str()),
            (200, "upstream"),
            "{:?}",
            r.events
        );
        assert_eq!(r.json()["model"], GEMMA3);
        // A prompt over the edges' context.
        let long = "hello ".repeat(300);
        let r = post(
            &url("/v1/completions"),
            &completion(&long, 2),
            &[],
            |_, _| {},
        )
        .await;
        assert_eq!(
            (r.status, r.node.as_str()),
            (200, "upstream"),
            "{:?}",
            r.events
        );
        // Both edges busy: each runs a long stream of its own.
        let hog = json!({"model": SMOLLM2, "prompt": "Count:", "max_tokens": 240, "ignore_eos": true, "stream": true});
        let mut hogs = Vec::new();
        for e in &edges {
            let resp = client()
                .post(format!("{}/v1/completions", e.base_url()))
                .json(&hog)
                .send()
                .await
                .expect("hog");
            assert_eq!(resp.status(), 200);
            let mut body = resp.bytes_stream();
            use futures_util::StreamExt;
            let _ = body.next().await; // the first token: it is running
            hogs.push(body);
        }
        let r = post(
            &url("/v1/completions"),
            &completion("Busy?", 2),
            &[],
            |_, _| {},
        )
        .await;
        assert_eq!(
            (r.status, r.node.as_str()),
            (200, "upstream"),
            "{:?}",
            r.events
        );
        drop(hogs);
        // A model nobody has: the upstream's own 404 comes back.
        let r = post(
            &url("/v1/completions"),
            &json!({"model": "gpt-4o-mini", "prompt": "x"}),
            &[],
            |_, _| {},
        )
        .await;
        assert_eq!(
            (r.status, r.node.as_str()),
            (404, "upstream"),
            "{:?}",
            r.events
        );

        let text = router.metrics().await;
        let fallback = |reason: &str| {
            metric(
                &text,
                &format!("kiln_router:fallback_requests_total{{reason=\"{reason}\"}}"),
            )
        };
        assert_eq!(
            [
                fallback("unknown_model"),
                fallback("context_length"),
                fallback("overloaded"),
                fallback("unavailable")
            ],
            [2.0, 1.0, 1.0, 0.0],
            "{text}"
        );
        assert_eq!(
            metric(
                &text,
                "kiln_router:requests_total{node=\"upstream\",colo=\"upstream\"}"
            ),
            4.0
        );
        // The central node itself counted exactly the requests it was sent: two smollm2
        // (over-context and busy) and one gemma3; none of the edge's.
        let central_text = client()
            .get(format!("{}/metrics", central.base_url()))
            .send()
            .await
            .expect("metrics")
            .text()
            .await
            .expect("text");
        let served = |model: &str| {
            metric(
                &central_text,
                &format!("kiln:e2e_request_latency_seconds_count{{model_name=\"{model}\"}}"),
            )
        };
        assert_eq!(
            (served(SMOLLM2), served(GEMMA3)),
            (2.0, 1.0),
            "{central_text}"
        );
    })
}
