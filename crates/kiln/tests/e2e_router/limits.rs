//! The router holds each client key's rate limits for every node: two nodes, three
//! requests a minute allowed, and the fourth is refused by the router whichever node
//! would have taken it. Tokens per minute likewise, counted on arrival. A body too large
//! to count is refused, not passed on.

use serde_json::json;

use crate::harness::*;

#[test]
fn the_router_limits_each_key_across_nodes() {
    serially(async {
        let fleet: Vec<_> = (0..2).map(|_| node(&[SMOLLM2], &[])).collect();
        let mut args: Vec<String> = vec![
            "--rate-limit-rpm".into(),
            "3".into(),
            "--api-key".into(),
            "sk-a".into(),
            "--api-key".into(),
            "sk-b".into(),
            "--max-body-size".into(),
            "8KiB".into(),
        ];
        for (i, n) in fleet.iter().enumerate() {
            args.extend(["--node".into(), format!("{}@name=n{}", n.base_url(), i + 1)]);
        }
        let router = Router::start(&args).await;
        let url = format!("{}/v1/completions", router.url());
        let ask = |key: &'static str, i: usize| {
            let url = url.clone();
            async move {
                // Different sessions, so the requests spread over both nodes.
                let body = json!({"model": SMOLLM2, "prompt": format!("Item {i}"), "max_tokens": 1,
                                  "user": format!("user-{i}")});
                let auth = format!("Bearer {key}");
                post(&url, &body, &[("authorization", auth.as_str())], |_, _| {}).await
            }
        };
        for i in 0..3 {
            let r = ask("sk-a", i).await;
            assert_eq!(r.status, 200, "{:?}", r.events);
        }
        let refused = ask("sk-a", 3).await;
        assert_eq!(refused.status, 429, "{:?}", refused.events);
        let e = refused.json();
        assert_eq!(e["error"]["code"], "rate_limit_exceeded", "{e}");
        assert!(
            refused.node.is_empty(),
            "refused by the router, no node: {}",
            refused.node
        );
        // Another key has its own bucket.
        assert_eq!(ask("sk-b", 4).await.status, 200);
        // A body over the router's limit, sent without a length, is refused whole,
        // not forwarded empty.
        let huge = json!({"model": SMOLLM2, "prompt": "x".repeat(16 << 10), "max_tokens": 1});
        let chunks = vec![Ok::<_, std::io::Error>(huge.to_string().into_bytes())];
        let resp = client()
            .post(&url)
            .header("authorization", "Bearer sk-b")
            .header("content-type", "application/json")
            .body(reqwest::Body::wrap_stream(futures_util::stream::iter(
                chunks,
            )))
            .send()
            .await
            .expect("send a chunked body");
        assert_eq!(resp.status(), 413);
        let e: serde_json::Value = resp.json().await.expect("an error body");
        assert_eq!(e["error"]["code"], "request_too_large", "{e}");
        drop(router);

        // Tokens per minute: a request's estimate (its text at four characters a token
        // plus its cap) is taken on arrival, so the second request finds the bucket empty.
        let mut args: Vec<String> = ["--rate-limit-tpm", "100", "--api-key", "sk-c"]
            .map(String::from)
            .into();
        for (i, n) in fleet.iter().enumerate() {
            args.extend(["--node".into(), format!("{}@name=n{}", n.base_url(), i + 1)]);
        }
        let router = Router::start(&args).await;
        let url = format!("{}/v1/completions", router.url());
        let body = json!({"model": SMOLLM2, "prompt": "Count: one two three", "max_tokens": 120});
        let send = || {
            client()
                .post(&url)
                .header("authorization", "Bearer sk-c")
                .json(&body)
                .send()
        };
        let first = send().await.expect("first request");
        assert_eq!(first.status(), 200);
        let header = |r: &reqwest::Response, name: &str| {
            r.headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        assert_eq!(
            header(&first, "x-ratelimit-limit-tokens").as_deref(),
            Some("100")
        );
        let second = send().await.expect("second request");
        assert_eq!(second.status(), 429);
        let retry: u64 = header(&second, "retry-after")
            .and_then(|v| v.parse().ok())
            .expect("a Retry-After in seconds");
        assert!((1..=60).contains(&retry), "Retry-After {retry}");
        let e: serde_json::Value = second.json().await.expect("an error body");
        assert_eq!(e["error"]["code"], "rate_limit_exceeded", "{e}");
        assert!(
            e["error"]["message"]
                .as_str()
                .unwrap_or("")
                .contains("tokens"),
            "the message names the token limit: {e}"
        );
    });
}
