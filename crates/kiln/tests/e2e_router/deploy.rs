//! The Kubernetes manifests in `deploy/k8s/` run: `kiln serve` with the node
//! Deployment's arguments and `kiln route` with the router Deployment's arguments and
//! the ConfigMap's `router.toml` start and serve a request, so a renamed flag or
//! setting fails here rather than in a cluster; the inference gateway's picker finds
//! its metrics on that node. (Their schema is checked with `kubernetes-validate`, see
//! docs/DEPLOY.md, and the InferencePool's by `tests/k8s_gateway.rs`.)

use std::path::Path;

use serde_json::json;

use crate::harness::*;

fn manifest(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../deploy/k8s")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The YAML list items (`- x`) right after the line `marker` (trimmed), comments
/// skipped.
fn list_after(yaml: &str, marker: &str) -> Vec<String> {
    let mut lines = yaml.lines().skip_while(|l| l.trim() != marker);
    let Some(first) = lines.next() else {
        panic!("no line {marker:?}")
    };
    let indent = first.len() - first.trim_start().len();
    lines
        .filter(|l| !l.trim_start().starts_with('#'))
        .take_while(|l| {
            l.len() - l.trim_start().len() == indent && l.trim_start().starts_with("- ")
        })
        .map(|l| l.trim_start()[2..].trim().to_string())
        .collect()
}

/// The literal block of `key: |`.
fn block(yaml: &str, key: &str) -> String {
    let mut lines = yaml.lines().skip_while(|l| l.trim() != format!("{key}: |"));
    lines.next();
    let body: Vec<&str> = lines
        .take_while(|l| l.trim().is_empty() || l.starts_with("    "))
        .collect();
    body.iter()
        .map(|l| l.get(4..).unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Drops `--host`/`--port` (the test picks its own) from a container's arguments.
fn without_listen(args: &[String]) -> Vec<String> {
    args.iter()
        .filter(|a| !a.starts_with("--host") && !a.starts_with("--port"))
        .cloned()
        .collect()
}

#[test]
fn the_kubernetes_manifests_run() {
    serially(async {
        let nodes = manifest("nodes.yaml");
        let serve = list_after(&nodes, "- serve");
        let models: Vec<String> = serve
            .iter()
            .filter_map(|a| a.strip_prefix("--model=").map(str::to_string))
            .collect();
        assert!(models.len() >= 2, "{serve:?}");
        // The init container fetches exactly the models the server serves.
        let pull = nodes
            .lines()
            .find(|l| l.contains("\"pull\""))
            .expect("the init container's kiln pull");
        for m in &models {
            assert!(
                pull.contains(&format!("\"{m}\"")),
                "{m} is served but not pulled: {pull}"
            );
        }
        let mut serve_args = vec!["serve".to_string()];
        serve_args.extend(without_listen(&serve));
        // ServerProcess adds `serve --host --port` itself.
        let args: Vec<&str> = serve_args[1..].iter().map(String::as_str).collect();
        let model_refs: Vec<&str> = models.iter().map(String::as_str).collect();
        let node = node_with_args(&model_refs, &args);

        // The inference gateway's picker reads metrics under the names its flags give:
        // each is a gauge this node exports (the LoRA info with vLLM's labels).
        let pool = manifest("gateway/inference-pool.yaml");
        let metrics = client()
            .get(format!("http://127.0.0.1:{}/metrics", node.port()))
            .send()
            .await
            .expect("GET /metrics")
            .text()
            .await
            .expect("metrics body");
        let names: Vec<&str> = pool
            .lines()
            .filter_map(|l| l.trim().strip_prefix("- --"))
            .filter(|f| f.split('=').next().is_some_and(|f| f.ends_with("-metric")))
            .filter_map(|f| f.split_once('=').map(|(_, name)| name))
            .collect();
        assert_eq!(names.len(), 4, "{names:?}");
        for name in names {
            assert!(
                metrics.contains(&format!("# TYPE {name} gauge\n")),
                "{name} is not a gauge of kiln serve"
            );
        }
        assert!(
            metrics.contains(&format!(
                "kiln:lora_requests_info{{model_name=\"{SMOLLM2}\",max_lora=\"8\",\
                 running_lora_adapters=\"\",waiting_lora_adapters=\"\"}}"
            )),
            "{metrics}"
        );

        let router_yaml = manifest("router.yaml");
        let dir = tempfile::tempdir().expect("tempdir");
        let toml = dir.path().join("router.toml");
        std::fs::write(&toml, block(&router_yaml, "router.toml")).expect("write router.toml");
        let route = list_after(&router_yaml, "- route");
        let mut args: Vec<String> = without_listen(&route)
            .into_iter()
            .map(|a| match a.strip_prefix("--config=") {
                Some(_) => format!("--config={}", toml.display()),
                None => a,
            })
            .collect();
        // The headless Service's name does not resolve here (the router keeps going
        // without it); `localhost` does, to the node: discovery through real DNS.
        args.extend([
            "--dns".into(),
            format!("localhost:{}@colo=local", node.port()),
        ]);
        let router = Router::start(&args).await;
        let r = post(
            &format!("{}/v1/chat/completions", router.url()),
            &json!({"model": SMOLLM2, "max_tokens": 2,
                "messages": [{"role": "user", "content": "Hi"}]}),
            &[],
            |_, _| {},
        )
        .await;
        assert_eq!(r.status, 200, "{:?}", r.events);
        let view = router.nodes().await;
        let found = view["nodes"]
            .as_array()
            .and_then(|n| {
                n.iter()
                    .find(|n| n["id"] == format!("127.0.0.1:{}", node.port()))
                    .cloned()
            })
            .unwrap_or_else(|| panic!("the node was not discovered through DNS: {view}"));
        assert_eq!(
            (found["colo"].as_str(), found["health"].as_str()),
            (Some("local"), Some("up"))
        );
        // qwen's `replicas = 3` from the ConfigMap is in force (one node: shard of 1).
        let qwen = view["models"]
            .as_array()
            .and_then(|m| m.iter().find(|m| m["model"] == QWEN).cloned())
            .expect("qwen placed");
        assert_eq!(qwen["replicas"], 3, "{view}");
    })
}
