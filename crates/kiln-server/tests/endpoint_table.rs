//! The node serves exactly the endpoint table's routes: every (method, path) the table
//! lists reaches a handler (whatever the handler then answers), every other method on
//! a table path is a 405, and `app.rs` routes no path the table lacks.

mod support;

use std::collections::BTreeSet;
use std::time::Duration;

use kiln_api::endpoints::{Endpoint, Method, Pin, ENDPOINTS};
use serde_json::Value;
use support::*;

/// The node's operations endpoints, outside the API table.
const OPS: &[&str] = &[
    "/admin/usage",
    "/ready",
    "/metrics",
    "/health",
    "/dashboard",
    "/dashboard/app.js",
    "/dashboard/style.css",
];

/// A table path with its parameters filled in.
fn concrete(pattern: &str) -> String {
    pattern
        .split('/')
        .map(|s| match s {
            s if s.starts_with('{') => format!("{}_1", s.trim_matches(['{', '}', '*'])),
            s => s.to_string(),
        })
        .collect::<Vec<_>>()
        .join("/")
}

/// The routing error a request got, if it got one (`None`: a handler answered).
async fn routing_error(state: &kiln_server::AppState, method: &str, path: &str) -> Option<u16> {
    let body = (method != "GET" && method != "DELETE").then_some("{}");
    // A handler that streams (an agent's events) is served; don't wait for its end.
    let sent = tokio::time::timeout(
        Duration::from_secs(30),
        send(state, method, path, body, &[]),
    );
    let r = sent.await.ok()?;
    let code = r.status.as_u16();
    let v: Value = serde_json::from_slice(&r.body).unwrap_or(Value::Null);
    let message = v["error"]["message"].as_str().unwrap_or_default();
    let routing = (code == 404 && message == format!("no route for {method} {path}"))
        || (code == 405 && v["error"]["code"] == "method_not_allowed");
    routing.then_some(code)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_node_serves_the_endpoint_table_and_nothing_else() {
    let s = state();
    // The router's own routes are the router's alone: a node answers them 404.
    let (node_routes, router_only): (Vec<&Endpoint>, Vec<&Endpoint>) =
        ENDPOINTS.iter().partition(|e| e.pin != Pin::RouterOnly);
    for e in router_only {
        let (method, path) = (e.method.as_str(), concrete(e.path));
        let got = routing_error(&s, method, &path).await;
        assert_eq!(got, Some(404), "{method} {path} is the router's only");
    }
    for e in &node_routes {
        let (method, path) = (e.method.as_str(), concrete(e.path));
        let got = routing_error(&s, method, &path).await;
        assert_eq!(got, None, "{method} {path} is in the table but not served");
    }
    for e in node_routes {
        for m in [Method::Get, Method::Post, Method::Put, Method::Delete] {
            if ENDPOINTS.iter().any(|o| o.path == e.path && o.method == m) {
                continue;
            }
            let path = concrete(e.path);
            let got = routing_error(&s, m.as_str(), &path).await;
            assert_eq!(
                got,
                Some(405),
                "{} {path} is served but not in the table",
                m.as_str()
            );
        }
    }
}

/// Every path `app.rs` routes (nested routers under their prefix) is the table's or an
/// operations endpoint.
#[test]
fn app_rs_routes_only_table_paths() {
    let src = include_str!("../src/app.rs");
    let table: BTreeSet<&str> = ENDPOINTS
        .iter()
        .map(|e| e.path)
        .chain(OPS.iter().copied())
        .collect();
    // `.nest("/prefix", fn_name())` → the prefix of `fn fn_name`'s routes.
    let mut prefixes: Vec<(String, String)> = vec![];
    for part in src.split(".nest(\"").skip(1) {
        let (prefix, rest) = part.split_once('"').expect("a nest prefix");
        let func: String = rest
            .trim_start_matches([',', ' '])
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        prefixes.push((format!("fn {func}("), prefix.to_string()));
    }
    let mut routed = vec![];
    for (i, part) in src.split(".route(").enumerate().skip(1) {
        let Some(path) = part
            .trim_start()
            .strip_prefix('"')
            .and_then(|p| p.split('"').next())
        else {
            continue;
        };
        // The nearest `fn` before this route says whether it is nested.
        let before: String = src
            .split(".route(")
            .take(i)
            .collect::<Vec<_>>()
            .join(".route(");
        let func = before
            .rfind("\nfn ")
            .or(before.rfind("pub fn "))
            .map(|at| &before[at..]);
        let prefix = prefixes
            .iter()
            .find(|(f, _)| func.is_some_and(|b| b.contains(f.as_str())))
            .map_or("", |(_, p)| p.as_str());
        let full = match (prefix, path) {
            (p, "/") if !p.is_empty() => p.to_string(),
            (p, path) => format!("{p}{path}"),
        };
        routed.push(full);
    }
    assert!(routed.len() > 50, "routes found in app.rs: {routed:?}");
    for path in &routed {
        assert!(
            table.contains(path.as_str()),
            "app.rs routes {path}, which the endpoint table lacks"
        );
    }
    let node_paths = ENDPOINTS.iter().filter(|e| e.pin != Pin::RouterOnly);
    for path in node_paths.map(|e| e.path) {
        assert!(
            routed.iter().any(|r| r == path),
            "the table lists {path}, which app.rs does not route"
        );
    }
}
