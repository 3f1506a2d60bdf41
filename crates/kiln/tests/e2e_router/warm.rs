//! Placement keeps models warm where random routing over the same nodes does not.

use serde_json::json;

use crate::harness::*;

#[test]
fn placement_keeps_models_warm_where_random_routing_does_not() {
    serially(async {
        // Each node has room for one of the two models at a time (400 MiB budget; each
        // model takes its file plus the 64 MiB KV cache), so a node asked for the other
        // model must unload one and load the other.
        let models = [SMOLLM2, GEMMA3];
        let fleet: Vec<_> = (0..3)
            .map(|_| {
                node(
                    &models,
                    &["--models-memory", "400MiB", "--max-num-seqs", "2"],
                )
            })
            .collect();
        let cards = get_json(&format!("{}/v1/models", fleet[0].base_url())).await;
        let sizes: Vec<u64> = cards["data"]
            .as_array()
            .expect("data")
            .iter()
            .filter_map(|c| c["memory_bytes"].as_u64())
            .collect();
        assert!(
            sizes.len() == 2
                && sizes.iter().all(|&s| s <= 400 << 20)
                && sizes.iter().sum::<u64>() > 400 << 20,
            "the test needs each model to fit the budget alone but not together: {sizes:?}"
        );
        // One replica per model and no load slack: each model gets its own node.
        let mut args: Vec<String> = vec![
            "--replicas".into(),
            "1".into(),
            "--load-factor".into(),
            "1.0".into(),
        ];
        for (i, n) in fleet.iter().enumerate() {
            args.extend(["--node".into(), format!("{}@name=n{}", n.base_url(), i + 1)]);
        }
        let router = Router::start(&args).await;

        let ask = |base: String, model: &str, i: usize| {
            let body = json!({"model": model, "prompt": format!("Item {i}"), "max_tokens": 1});
            async move { post(&format!("{base}/v1/completions"), &body, &[], |_, _| {}).await }
        };
        // Warm-up: each model's first request loads it on its node.
        for m in models {
            let r = ask(router.url(), m, 0).await;
            assert_eq!(r.status, 200, "{:?}", r.events);
        }
        let mut rng = Rng::new(7);
        const STEADY: usize = 60;
        let mut warm = 0;
        for i in 0..STEADY {
            let r = ask(router.url(), models[rng.below(2)], i).await;
            assert_eq!(r.status, 200, "{:?}", r.events);
            warm += usize::from(r.warm.expect("x-kiln-warm on every response"));
        }
        let router_rate = warm as f64 / STEADY as f64;

        // Baseline: the same kind of traffic to a uniformly random node.
        const BASELINE: usize = 30;
        let mut warm = 0;
        for i in 0..BASELINE {
            let n = &fleet[rng.below(fleet.len())];
            let r = ask(n.base_url(), models[rng.below(2)], i).await;
            assert_eq!(r.status, 200, "{:?}", r.events);
            warm += usize::from(r.warm.expect("x-kiln-warm"));
        }
        let random_rate = warm as f64 / BASELINE as f64;
        eprintln!("warm rate: router {router_rate:.3} over {STEADY}, random routing {random_rate:.3} over {BASELINE}");
        assert!(router_rate >= 0.99, "router warm rate {router_rate}");
        assert!(
            random_rate <= 0.8,
            "random routing stayed warm ({random_rate}): the test premise failed"
        );
        // The router counted the same: the two warm-up loads were its only cold responses.
        let text = router.metrics().await;
        let total = |name: &str| -> f64 {
            (1..=3)
                .map(|i| metric(&text, &format!("{name}{{node=\"n{i}\",colo=\"default\"}}")))
                .sum()
        };
        assert_eq!(total("kiln_router:cold_requests_total"), 2.0, "{text}");
        assert_eq!(
            total("kiln_router:warm_requests_total"),
            STEADY as f64,
            "{text}"
        );
    })
}
