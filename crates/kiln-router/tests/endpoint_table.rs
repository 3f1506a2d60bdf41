//! `kiln route` serves exactly the endpoint table's routes, over real HTTP against an
//! in-process stand-in node: every route a router places reaches the node, every other
//! method on a table path is the router's 405 and never reaches a node, a node-only
//! route is the router's 404; and the router's rate limits count what the table says
//! runs a model, vector-store search included.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Request, State};
use axum::routing::get;
use axum::{Json, Router};
use common::start_router;
use kiln_api::endpoints::{Method, Pin, ENDPOINTS};
use kiln_guard::RateLimits;
use kiln_router::{NodeSpec, RouterConfig};
use serde_json::{json, Value};
use tokio::net::TcpListener;

/// A node that answers every API request with what it was asked, and counts them.
async fn start_node(hits: Arc<AtomicUsize>) -> String {
    let app = Router::new()
        .route("/health", get(|| async { Json(json!({"status": "ok"})) }))
        .route(
            "/metrics",
            get(|| async { "kiln:num_requests_running{model_name=\"m\"} 0\n" }),
        )
        .route(
            "/v1/models",
            get(|| async {
                Json(json!({"object": "list", "data": [
                    {"id": "m", "object": "model", "task": "text-generation", "ready": true}
                ]}))
            }),
        )
        .fallback(
            |State(hits): State<Arc<AtomicUsize>>, req: Request| async move {
                hits.fetch_add(1, Ordering::SeqCst);
                Json(
                    json!({"node": "a", "method": req.method().as_str(), "path": req.uri().path()}),
                )
            },
        )
        .with_state(hits);
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("test setup"));
    tokio::spawn(async move { axum::serve(listener, app).await });
    url
}

/// The router over the one stand-in node.
async fn router_over(node: &str, rate_limits: RateLimits) -> String {
    start_router(RouterConfig {
        nodes: vec![NodeSpec::parse(&format!("{node}@name=a,colo=test")).expect("test setup")],
        health_interval: Duration::from_millis(200),
        replicas: 1,
        rate_limits,
        ..RouterConfig::default()
    })
    .await
}

/// A table path with its parameters filled in (`{*model}` with the node's model).
fn concrete(pattern: &str) -> String {
    pattern
        .split('/')
        .map(|s| match s {
            "{*model}" => "m".to_string(),
            s if s.starts_with('{') => format!("{}_1", s.trim_matches(['{', '}'])),
            s => s.to_string(),
        })
        .collect::<Vec<_>>()
        .join("/")
}

async fn send(base: &str, method: &str, path: &str) -> (u16, Value) {
    let method = reqwest::Method::from_bytes(method.as_bytes()).expect("a method");
    let r = reqwest::Client::new()
        .request(method, format!("{base}{path}"))
        .json(&json!({"model": "m", "query": "cats", "input": "hi"}))
        .send()
        .await
        .expect("send");
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_router_serves_the_endpoint_table_and_nothing_else() {
    let hits = Arc::new(AtomicUsize::new(0));
    let base = router_over(&start_node(hits.clone()).await, RateLimits::default()).await;
    for e in ENDPOINTS {
        let (method, path) = (e.method.as_str(), concrete(e.path));
        let before = hits.load(Ordering::SeqCst);
        let (status, body) = send(&base, method, &path).await;
        let reached = hits.load(Ordering::SeqCst) > before;
        match e.pin {
            Pin::NodeOnly => {
                assert_eq!(status, 404, "{method} {path} is a node's own: {body}");
                assert!(!reached, "{method} {path} reached a node");
            }
            // The router answers from the nodes' catalogues.
            Pin::Router => assert_eq!(status, 200, "{method} {path}: {body}"),
            // The router's own observability: answered here, never forwarded.
            Pin::RouterOnly => {
                assert_eq!(status, 200, "{method} {path}: {body}");
                assert_eq!(body["object"], "list", "{method} {path}: {body}");
                assert!(!reached, "{method} {path} reached a node");
            }
            Pin::Model | Pin::Caller | Pin::Agent => {
                assert_eq!(status, 200, "{method} {path}: {body}");
                assert_eq!(
                    body["path"],
                    path.as_str(),
                    "{method} {path} forwarded as is"
                );
                assert_eq!(body["method"], method);
            }
        }
    }
    // Other methods on the table's paths: the router's 405, never a node's.
    for e in ENDPOINTS.iter().filter(|e| e.pin != Pin::NodeOnly) {
        for m in [Method::Get, Method::Post, Method::Put, Method::Delete] {
            if ENDPOINTS.iter().any(|o| o.path == e.path && o.method == m) {
                continue;
            }
            let path = concrete(e.path);
            let before = hits.load(Ordering::SeqCst);
            let (status, body) = send(&base, m.as_str(), &path).await;
            assert_eq!(status, 405, "{} {path}: {body}", m.as_str());
            assert_eq!(body["error"]["code"], "method_not_allowed", "{body}");
            assert_eq!(
                hits.load(Ordering::SeqCst),
                before,
                "{} {path} reached a node",
                m.as_str()
            );
        }
    }
    // A path under a table prefix that the table does not list is not forwarded.
    for path in [
        "/v1/files/f_1/bogus",
        "/v1/agents/a/bogus",
        "/v1/responses/r/x/y",
    ] {
        let (status, body) = send(&base, "GET", path).await;
        assert_eq!(status, 404, "{path}: {body}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_router_limits_vector_store_search() {
    let hits = Arc::new(AtomicUsize::new(0));
    let limits = RateLimits {
        requests_per_minute: Some(1),
        tokens_per_minute: None,
    };
    let base = router_over(&start_node(hits.clone()).await, limits).await;
    let search = "/v1/vector_stores/vs_1/search";
    let (status, body) = send(&base, "POST", search).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(hits.load(Ordering::SeqCst), 1);
    let (status, body) = send(&base, "POST", search).await;
    assert_eq!(status, 429, "the second search in a minute: {body}");
    assert_eq!(body["error"]["code"], "rate_limit_exceeded", "{body}");
    assert_eq!(hits.load(Ordering::SeqCst), 1, "refused by the router");
    // A route that runs no model is not counted.
    let (status, body) = send(&base, "GET", "/v1/vector_stores/vs_1").await;
    assert_eq!(status, 200, "{body}");
}
