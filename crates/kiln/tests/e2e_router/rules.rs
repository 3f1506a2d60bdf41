//! Routing by rule: the config file's `[[rules]]` send a long prompt central and leave
//! a short one at the edge, each decision in its event (the rule, the tier, the
//! fallback reason `rule`); a rewritten file takes effect without a restart; a file
//! whose rules fail their checks keeps the rules in force; and a `central` rule
//! without an upstream stops the router at start.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde_json::{json, Value};

use crate::harness::*;

/// "hello " 200 times: 1,200 bytes, estimated at 300 prompt tokens.
fn long_prompt() -> String {
    "hello ".repeat(200)
}

/// Writes the router's config file whole (a rename), as an operator's tooling should:
/// the router never reads a half-written file.
fn write_config(path: &Path, text: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).expect("write config");
    std::fs::rename(&tmp, path).expect("rename config");
}

/// The names of the rules in force, from `/nodes`.
async fn rules_in_force(router: &Router) -> Vec<String> {
    let nodes = router.nodes().await;
    nodes["rules"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| r["name"].as_str().map(str::to_string))
        .collect()
}

/// A completion (or a chat turn, `chat`) of `prompt`; returns who answered and the
/// request's event.
async fn ask(router: &Router, prompt: &str, chat: bool) -> (String, Value) {
    let (path, body) = if chat {
        let messages = json!([{"role": "user", "content": prompt}]);
        (
            "/v1/chat/completions",
            json!({"model": SMOLLM2, "messages": messages, "max_tokens": 2}),
        )
    } else {
        (
            "/v1/completions",
            json!({"model": SMOLLM2, "prompt": prompt, "max_tokens": 2}),
        )
    };
    let before = router.events().await.len();
    let r = post(&format!("{}{path}", router.url()), &body, &[], |_, _| {}).await;
    assert_eq!(r.status, 200, "{:?}", r.events);
    let after = router.events().await;
    assert_eq!(after.len(), before + 1, "one event per request: {after:#?}");
    (r.node, after[before].clone())
}

#[test]
fn rules_route_by_size_and_reload_without_a_restart() {
    serially(async {
        let edge = node(&[SMOLLM2], &["--colo", "ams"]);
        let central = node(&[SMOLLM2], &["--colo", "central"]);
        let dir = tempfile::tempdir().expect("tempdir");
        let config = dir.path().join("router.toml");
        let upstream = format!("[upstream]\nurl = \"{}\"\n", central.base_url());
        write_config(
            &config,
            &format!(
                "{upstream}
                [[rules]]
                name = \"long-prompts\"
                min_prompt_tokens = 200
                route = \"central\"
                "
            ),
        );
        let args: Vec<String> = vec![
            "--config".into(),
            config.to_string_lossy().into(),
            "--node".into(),
            format!("{}@name=e1,colo=ams", edge.base_url()),
        ];
        let router = Router::start(&args).await;
        assert_eq!(rules_in_force(&router).await, ["long-prompts"]);

        // A long chat prompt goes central by rule, a short completion to the edge.
        let (by, e) = ask(&router, &long_prompt(), true).await;
        assert_eq!(by, "upstream", "{e:#}");
        assert_eq!(e["rule"], "long-prompts", "{e:#}");
        assert_eq!(e["tier"], "central", "{e:#}");
        assert_eq!(e["colo"], "central", "{e:#}");
        assert_eq!(e["fallback"]["reason"], "rule", "{e:#}");
        assert!(e["fallback"]["from"].is_null(), "no edge was tried: {e:#}");
        let (by, e) = ask(&router, "Hi", false).await;
        assert_eq!(by, "e1", "{e:#}");
        assert!(e["rule"].is_null() && e["fallback"].is_null(), "{e:#}");
        assert_eq!(
            (e["tier"].as_str(), e["colo"].as_str()),
            (Some("edge"), Some("ams"))
        );

        // The opposite table: short generation central, everything else at the edge.
        write_config(
            &config,
            &format!(
                "{upstream}
                [[rules]]
                name = \"short-central\"
                task = \"text-generation\"
                max_prompt_tokens = 50
                route = \"central\"
                [[rules]]
                name = \"rest-edge\"
                route = \"edge\"
                "
            ),
        );
        wait_for("the rewritten rules", Duration::from_secs(30), || async {
            (rules_in_force(&router).await == ["short-central", "rest-edge"]).then_some(())
        })
        .await;
        let (by, e) = ask(&router, "Hi", false).await;
        assert_eq!(
            (by.as_str(), &e["rule"]),
            ("upstream", &json!("short-central"))
        );
        assert_eq!(e["fallback"]["reason"], "rule", "{e:#}");
        let (by, e) = ask(&router, &long_prompt(), true).await;
        assert_eq!(
            (by.as_str(), &e["rule"]),
            ("e1", &json!("rest-edge")),
            "{e:#}"
        );
        assert!(e["fallback"].is_null(), "{e:#}");

        // A rewrite whose rules fail their checks: refused, counted, logged; the rules
        // in force still route.
        write_config(
            &config,
            &format!("{upstream}[[rules]]\nname = \"typo\"\ntask = \"classification\"\nroute = \"edge\"\n"),
        );
        let text = wait_for("the refused reload", Duration::from_secs(30), || async {
            let text = router.metrics().await;
            (metric(&text, "kiln_router:config_reload_errors_total") >= 1.0).then_some(text)
        })
        .await;
        assert_eq!(metric(&text, "kiln_router:config_reload_errors_total"), 1.0);
        assert_eq!(metric(&text, "kiln_router:config_reloads_total"), 1.0);
        assert_eq!(metric(&text, "kiln_router:rules"), 2.0);
        assert!(
            router.log_tail().contains("unknown task `classification`"),
            "{}",
            router.log_tail()
        );
        assert_eq!(
            rules_in_force(&router).await,
            ["short-central", "rest-edge"]
        );
        let (by, e) = ask(&router, "Hello", false).await;
        assert_eq!(
            (by.as_str(), &e["rule"]),
            ("upstream", &json!("short-central"))
        );

        let text = router.metrics().await;
        let series = |rule: &str, route: &str| {
            let s = format!("kiln_router:rule_requests_total{{rule=\"{rule}\",route=\"{route}\"}}");
            metric(&text, &s)
        };
        assert_eq!(
            [
                series("long-prompts", "central"),
                series("short-central", "central"),
                series("rest-edge", "edge")
            ],
            [1.0, 2.0, 1.0],
            "{text}"
        );
        assert_eq!(
            metric(
                &text,
                "kiln_router:fallback_requests_total{reason=\"rule\"}"
            ),
            3.0
        );
        // Policy is not failure: the fallback-rate alert's rollups leave rule trips out.
        let rollups = get_json(&format!("{}/v1/observability/rollups", router.url())).await;
        let rows = rollups["data"].as_array().cloned().unwrap_or_default();
        let sum = |field: &str| rows.iter().filter_map(|r| r[field].as_u64()).sum::<u64>();
        assert_eq!((sum("requests"), sum("fallbacks")), (5, 0), "{rollups:#}");
    })
}

#[test]
fn a_central_rule_without_an_upstream_stops_the_router_at_start() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("router.toml");
    write_config(
        &config,
        "[[rules]]\nname = \"all-central\"\nroute = \"central\"\n",
    );
    let out = Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args([
            "route",
            "--host",
            "127.0.0.1",
            "--port",
            "0",
            "--node",
            "http://127.0.0.1:9",
        ])
        .arg("--config")
        .arg(&config)
        .env_remove("KILN_UPSTREAM_API_KEY")
        .output()
        .expect("run kiln route");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("`all-central`") && stderr.contains("no upstream is configured"),
        "{stderr}"
    );
}
