//! The shipped Grafana dashboard, Prometheus alerting rules and the node's own
//! `/dashboard` query only metrics that a real node and a real router export (names
//! read from their `/metrics`).

use std::collections::BTreeSet;
use std::path::Path;

use serde_json::{json, Value};

use crate::harness::*;

/// Every metric name in Prometheus text: samples, and each `# TYPE`'s family with the
/// suffixes its kind has (so an empty histogram's buckets count).
fn exported(text: &str, out: &mut BTreeSet<String>) {
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let mut parts = rest.split_whitespace();
            let (Some(name), Some(kind)) = (parts.next(), parts.next()) else {
                continue;
            };
            out.insert(name.to_string());
            let suffixes: &[&str] = match kind {
                "histogram" => &["_bucket", "_sum", "_count"],
                "summary" => &["_sum", "_count"],
                _ => &[],
            };
            out.extend(suffixes.iter().map(|s| format!("{name}{s}")));
        } else if !line.starts_with('#') {
            let end = line.find(['{', ' ']).unwrap_or(line.len());
            out.insert(line[..end].to_string());
        }
    }
}

/// The Kiln metric names (`kiln:...`, `kiln_router:...`) an expression names.
fn named(expr: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = expr;
    while let Some(i) = rest.find("kiln") {
        let tail = &rest[i..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
            .unwrap_or(tail.len());
        let name = &tail[..end];
        if name.contains(':') {
            out.push(name.to_string());
        }
        rest = &tail[end.max(1)..];
    }
    out
}

fn repo_file(path: &str) -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(path);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

#[test]
fn grafana_and_alert_rules_query_only_exported_metrics() {
    serially(async {
        let n = node(&[SMOLLM2], &["--colo", "ams", "--firewall", "log"]);
        let args = vec![
            "--node".to_string(),
            format!("{}@name=a1,colo=ams", n.base_url()),
        ];
        let router = Router::start(&args).await;
        let body = json!({"model": SMOLLM2, "prompt": "Hi", "max_tokens": 2});
        let r = post(
            &format!("{}/v1/completions", router.url()),
            &body,
            &[],
            |_, _| {},
        )
        .await;
        assert_eq!(r.status, 200, "{:?}", r.events);
        let mut names = BTreeSet::new();
        exported(&router.metrics().await, &mut names);
        let node_metrics = client()
            .get(format!("{}/metrics", n.base_url()))
            .send()
            .await
            .expect("node /metrics")
            .text()
            .await
            .expect("body");
        exported(&node_metrics, &mut names);

        let dashboard: Value =
            serde_json::from_str(&repo_file("deploy/grafana/kiln-dashboard.json")).expect("JSON");
        let mut exprs: Vec<String> = Vec::new();
        for panel in dashboard["panels"].as_array().expect("panels") {
            for t in panel["targets"].as_array().into_iter().flatten() {
                exprs.push(t["expr"].as_str().expect("expr").to_string());
            }
        }
        assert!(exprs.len() >= 15, "{exprs:?}");
        let rules = repo_file("deploy/prometheus/kiln-alerts.yml");
        let rule_exprs: Vec<String> = rules.split("expr:").skip(1).map(str::to_string).collect();
        assert_eq!(rule_exprs.len(), 4, "{rules}");
        // The node's own page reads its numbers from /metrics by name too.
        let page = repo_file("crates/kiln-server/src/routes/dashboard/app.js");
        assert!(named(&page).len() >= 15, "{:?}", named(&page));
        exprs.push(page);
        for expr in exprs.iter().chain(&rule_exprs) {
            let found = named(expr);
            assert!(!found.is_empty(), "no Kiln metric in {expr}");
            for name in found {
                assert!(
                    names.contains(&name),
                    "{name} (in {expr}) is not exported; exported: {names:?}"
                );
            }
        }
    })
}

#[test]
fn metric_names_are_read_from_expressions() {
    assert_eq!(
        named("sum(rate(kiln_router:colo_events_total[5m])) / kiln:x_bucket{a=\"kiln\"}"),
        ["kiln_router:colo_events_total", "kiln:x_bucket"]
    );
}
