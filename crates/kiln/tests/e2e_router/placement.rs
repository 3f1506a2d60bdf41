//! Placement is stable when a node leaves and comes back, sessions stick to their
//! node, and the router answers the nodes' API.

use std::collections::BTreeMap;
use std::time::Duration;

use kiln_router::ring::moved_share;
use serde_json::json;

use crate::harness::*;

/// Node args: tiny batches, every model lazily loaded.
const NODE_ARGS: &[&str] = &["--max-num-seqs", "4"];

fn write_nodes(path: &std::path::Path, nodes: &[(String, &str)]) {
    let list: Vec<String> = nodes
        .iter()
        .map(|(url, name)| {
            format!(
                "\"{url}@name={name},colo={}\"",
                if name < &"n3" { "ams" } else { "fra" }
            )
        })
        .collect();
    std::fs::write(path, format!("nodes = [{}]\n", list.join(", "))).expect("write config");
}

#[test]
fn placement_is_stable_sessions_stick_and_the_api_is_the_nodes() {
    serially(async {
        let models = [SMOLLM2, GEMMA3, QWEN];
        let fleet: Vec<_> = (0..4).map(|_| node(&models, NODE_ARGS)).collect();
        let named: Vec<(String, &str)> = fleet
            .iter()
            .zip(["n1", "n2", "n3", "n4"])
            .map(|(n, name)| (n.base_url(), name))
            .collect();
        let dir = tempfile::tempdir().expect("tempdir");
        let config = dir.path().join("router.toml");
        write_nodes(&config, &named);
        let router = Router::start(&[
            "--config".into(),
            config.display().to_string(),
            "--discovery-interval".into(),
            "0.2".into(),
            "--health-interval".into(),
            "0.5".into(),
        ])
        .await;
        let base = router.url();

        // Placement: 3 models x 2 replicas over 4 nodes, under the bounded-load cap.
        let view = router.nodes().await;
        let before = shards(&view);
        assert_eq!(before.len(), 3, "{view}");
        assert!(before.iter().all(|(_, s)| s.len() == 2), "{view}");
        let cap = view["capacity"].as_u64().expect("capacity") as usize;
        for n in view["nodes"].as_array().expect("nodes") {
            assert!(
                n["placements"].as_u64().unwrap_or(99) as usize <= cap,
                "{view}"
            );
        }

        // n4 leaves (the file is edited): only its placements move.
        write_nodes(&config, &named[..3]);
        let fewer = wait_for("n4 to leave", Duration::from_secs(10), || async {
            let v = router.nodes().await;
            (v["nodes"].as_array().map(Vec::len) == Some(3)).then_some(v)
        })
        .await;
        let after = shards(&fewer);
        let moved = moved_share(&before, &after);
        let on_n4 = before
            .iter()
            .map(|(_, s)| s.iter().filter(|n| *n == "n4").count())
            .sum::<usize>() as f64
            / 6.0;
        eprintln!(
            "leave: moved share {moved:.3} (n4 held {on_n4:.3}); before {before:?}, after {after:?}"
        );
        assert!(
            moved <= 1.0 / 4.0 + 0.1,
            "moved {moved}: {before:?} -> {after:?}"
        );
        for ((m, s0), (_, s1)) in before.iter().zip(&after) {
            for n in s0.iter().filter(|n| *n != "n4") {
                assert!(
                    s1.contains(n),
                    "{m} lost {n} though {n} stayed: {s0:?} -> {s1:?}"
                );
            }
        }
        // n4 comes back: once its catalogue is known again, the placement is exactly
        // the original. A rejoining node starts unchecked, and the health loop
        // re-places only after every node's probe of that round, so the original
        // placement is awaited rather than read at once.
        write_nodes(&config, &named);
        wait_for(
            "n4 to rejoin and be checked",
            Duration::from_secs(10),
            || async {
                let v = router.nodes().await;
                let nodes = v["nodes"].as_array().cloned().unwrap_or_default();
                (nodes.len() == 4 && nodes.iter().all(|n| n["models"].is_array())).then_some(())
            },
        )
        .await;
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        loop {
            let back = shards(&router.nodes().await);
            if back == before || std::time::Instant::now() > deadline {
                assert_eq!(back, before, "n4 rejoined but the placement differs");
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }

        // Sessions: header or `user`, each always on one node, within its shard.
        let shard = &before
            .iter()
            .find(|(m, _)| m == SMOLLM2)
            .expect("smollm2 placed")
            .1;
        let mut seen: BTreeMap<String, String> = BTreeMap::new();
        for round in 0..3 {
            for s in 0..4 {
                let key = format!("session-{s}");
                let mut body = json!({"model": "smollm2", "max_tokens": 2,
                    "messages": [{"role": "user", "content": format!("Hi {round}")}]});
                let header: Vec<(&str, &str)> = if s % 2 == 0 {
                    vec![("x-session-affinity", key.as_str())]
                } else {
                    body["user"] = json!(key);
                    vec![]
                };
                let r = post(
                    &format!("{base}/v1/chat/completions"),
                    &body,
                    &header,
                    |_, _| {},
                )
                .await;
                assert_eq!(r.status, 200, "{:?}", r.events);
                assert!(shard.contains(&r.node), "{} not in {shard:?}", r.node);
                assert_eq!(seen.entry(key).or_insert_with(|| r.node.clone()), &r.node);
            }
        }
        let text = router.metrics().await;
        assert_eq!(metric(&text, "kiln_router:affinity_requests_total"), 12.0);
        assert_eq!(metric(&text, "kiln_router:affinity_hit_rate"), 1.0);

        // The nodes' API, through the router.
        let list = get_json(&format!("{base}/v1/models")).await;
        let mut ids: Vec<&str> = list["data"]
            .as_array()
            .expect("data")
            .iter()
            .filter_map(|m| m["id"].as_str())
            .collect();
        ids.sort_unstable();
        assert_eq!(ids, [GEMMA3, QWEN, SMOLLM2]);
        let card = get_json(&format!("{base}/v1/models/@kiln/gemma3")).await;
        assert_eq!(card["id"], GEMMA3);
        let r = post(
            &format!("{base}/ai/run/@kiln/smollm2"),
            &json!({"prompt": "Hi", "max_tokens": 2}),
            &[],
            |_, _| {},
        )
        .await;
        assert_eq!(
            (r.status, r.json()["success"].clone()),
            (200, json!(true)),
            "{:?}",
            r.events
        );
        assert!(shard.contains(&r.node));
        let r = post(
            &format!("{base}/tokenize"),
            &json!({"model": SMOLLM2, "prompt": "hello world"}),
            &[],
            |_, _| {},
        )
        .await;
        assert_eq!(
            (r.status, r.json()["count"].clone()),
            (200, json!(2)),
            "{:?}",
            r.events
        );
        let r = post(
            &format!("{base}/v1/chat/completions"),
            &json!({"model": "gpt-4o", "messages": []}),
            &[],
            |_, _| {},
        )
        .await;
        assert_eq!(r.status, 404);
        let err = &r.json()["error"];
        assert_eq!(
            (
                err["code"].as_str(),
                err["type"].as_str(),
                err["param"].as_str()
            ),
            (
                Some("model_not_found"),
                Some("not_found_error"),
                Some("model")
            ),
            "{err}"
        );
        // A node's own validation error passes through unchanged.
        let r = post(
            &format!("{base}/v1/completions"),
            &json!({"model": SMOLLM2, "prompt": "x", "temperature": -1}),
            &[],
            |_, _| {},
        )
        .await;
        assert_eq!(r.status, 400);
        assert_eq!(r.json()["error"]["param"], "temperature");
        let text = router.metrics().await;
        assert!(
            metric(&text, "kiln_router:colo_requests_total{colo=\"ams\"}")
                + metric(&text, "kiln_router:colo_requests_total{colo=\"fra\"}")
                >= 15.0,
            "{text}"
        );
    })
}
