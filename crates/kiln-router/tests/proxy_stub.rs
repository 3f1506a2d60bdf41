//! The router over real HTTP against small in-process stand-in nodes whose failures
//! are scripted: the cases a real `kiln serve` cannot be made to produce on demand
//! (a stream cut mid-event, a 500, a node that answers 429 every time). The end-to-end
//! tests with real nodes are in `crates/kiln/tests/e2e_router*.rs`.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use common::start_router;
use futures_util::{stream, StreamExt};
use kiln_router::{NodeSpec, RouterConfig, Upstream};
use serde_json::{json, Value};
use tokio::net::TcpListener;

/// How a stand-in node answers inference requests.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Mode {
    /// Three SSE events and `[DONE]` (or JSON without `stream`).
    Ok,
    /// One event, then the connection breaks.
    BreakMidStream,
    /// 500 before any byte.
    Fail,
    /// 503 `server_shutdown`, as a node past its shutdown deadline answers.
    ShuttingDown,
    /// 429 with Retry-After.
    Busy,
    /// 400 context_length_exceeded.
    TooLong,
}

#[derive(Clone)]
struct Stub {
    name: &'static str,
    models: Vec<&'static str>,
    mode: Arc<Mutex<Mode>>,
    hits: Arc<AtomicUsize>,
    /// `authorization` of the last inference request.
    auth: Arc<Mutex<Option<String>>>,
}

impl Stub {
    fn set(&self, mode: Mode) {
        *self.mode.lock().unwrap_or_else(|p| p.into_inner()) = mode;
    }

    fn hits(&self) -> usize {
        self.hits.load(Ordering::SeqCst)
    }
}

async fn infer(State(stub): State<Stub>, headers: HeaderMap, body: Bytes) -> Response {
    stub.hits.fetch_add(1, Ordering::SeqCst);
    *stub.auth.lock().unwrap_or_else(|p| p.into_inner()) = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let req: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let mode = *stub.mode.lock().unwrap_or_else(|p| p.into_inner());
    let error = |status: StatusCode, code: &str| {
        let body = json!({"error": {"message": code, "type": "x", "param": null, "code": code}});
        let mut r = (status, Json(body)).into_response();
        r.headers_mut()
            .insert("retry-after", "1".parse().expect("header value"));
        r
    };
    match mode {
        Mode::Fail => return error(StatusCode::INTERNAL_SERVER_ERROR, "internal_error"),
        Mode::ShuttingDown => return error(StatusCode::SERVICE_UNAVAILABLE, "server_shutdown"),
        Mode::Busy => return error(StatusCode::TOO_MANY_REQUESTS, "queue_full"),
        Mode::TooLong => return error(StatusCode::BAD_REQUEST, "context_length_exceeded"),
        Mode::Ok | Mode::BreakMidStream => {}
    }
    let node = stub.name;
    if req["stream"] != json!(true) {
        let mut r = Json(json!({"node": node, "model": req["model"]})).into_response();
        r.headers_mut()
            .insert("x-kiln-warm", "true".parse().expect("header value"));
        return r;
    }
    let events: Vec<Result<Bytes, std::io::Error>> = if mode == Mode::Ok {
        vec![
            Ok(Bytes::from(format!(
                "data: {{\"n\":1,\"node\":\"{node}\"}}\n\n"
            ))),
            // An event split across two chunks must reach the client whole.
            Ok(Bytes::from("data: {\"n\":")),
            Ok(Bytes::from("2}\n\ndata: {\"n\":3}\n\n")),
            Ok(Bytes::from("data: [DONE]\n\n")),
        ]
    } else {
        vec![
            Ok(Bytes::from("data: {\"n\":1}\n\ndata: {\"half")),
            Err(std::io::Error::other("node died")),
        ]
    };
    let body = Body::from_stream(stream::iter(events).then(|e| async move {
        tokio::time::sleep(Duration::from_millis(5)).await;
        e
    }));
    let mut r = Response::new(body);
    r.headers_mut().insert(
        "content-type",
        "text/event-stream"
            .parse()
            .unwrap_or_else(|_| unreachable!()),
    );
    r.headers_mut()
        .insert("x-kiln-warm", "false".parse().expect("header value"));
    r
}

async fn start_stub(name: &'static str, models: &[&'static str]) -> (Stub, String) {
    let stub = Stub {
        name,
        models: models.to_vec(),
        mode: Arc::new(Mutex::new(Mode::Ok)),
        hits: Arc::default(),
        auth: Arc::default(),
    };
    let app = Router::new()
        .route("/health", get(|| async { Json(json!({"status": "ok"})) }))
        .route(
            "/metrics",
            get(|| async { "kiln:num_requests_running{model_name=\"m\"} 0\n" }),
        )
        .route(
            "/v1/models",
            get(|State(s): State<Stub>| async move {
                let data: Vec<Value> = s
                    .models
                    .iter()
                    .map(|m| json!({"id": m, "object": "model", "task": "text-generation", "aliases": [format!("{m}-alias")], "ready": true}))
                    .collect();
                Json(json!({"object": "list", "data": data}))
            }),
        )
        .route("/v1/chat/completions", post(infer))
        .with_state(stub.clone());
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("test setup"));
    tokio::spawn(async move { axum::serve(listener, app).await });
    (stub, url)
}

fn config(nodes: &[(&str, &str)]) -> RouterConfig {
    RouterConfig {
        nodes: nodes
            .iter()
            .map(|(url, name)| {
                NodeSpec::parse(&format!("{url}@name={name},colo=test")).expect("test setup")
            })
            .collect(),
        health_interval: Duration::from_millis(200),
        eject_base: Duration::from_secs(5),
        ..RouterConfig::default()
    }
}

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(20))
        .build()
        .expect("test setup")
}

async fn chat(base: &str, body: Value) -> (StatusCode, HeaderMap, String) {
    let r = client()
        .post(format!("{base}/v1/chat/completions"))
        .json(&body)
        .send()
        .await
        .expect("send");
    let (status, headers) = (r.status(), r.headers().clone());
    let text = r.text().await.expect("body");
    (status, headers, text)
}

/// `data:` payloads of an SSE body.
fn events(text: &str) -> Vec<&str> {
    text.split("\n\n")
        .filter_map(|e| e.strip_prefix("data: "))
        .collect()
}

/// A port nothing listens on.
async fn dead_url() -> String {
    let l = TcpListener::bind("127.0.0.1:0").await.expect("test setup");
    let url = format!("http://{}", l.local_addr().expect("test setup"));
    drop(l);
    url
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_pass_through_whole_and_breaks_end_with_an_error_event() {
    let (a, a_url) = start_stub("a", &["m"]).await;
    let mut c = config(&[(&a_url, "a")]);
    c.replicas = 1;
    let base = start_router(c).await;
    let (status, headers, text) = chat(&base, json!({"model": "m-alias", "stream": true})).await;
    assert_eq!(status, 200);
    assert_eq!(headers["x-kiln-node"], "a");
    assert_eq!(headers["x-kiln-warm"], "false");
    assert_eq!(
        events(&text),
        [
            "{\"n\":1,\"node\":\"a\"}",
            "{\"n\":2}",
            "{\"n\":3}",
            "[DONE]"
        ]
    );

    a.set(Mode::BreakMidStream);
    let (status, _, text) = chat(&base, json!({"model": "m", "stream": true})).await;
    assert_eq!(status, 200);
    let ev = events(&text);
    assert_eq!(ev.len(), 3, "{text}");
    assert_eq!(ev[0], "{\"n\":1}");
    let err: Value = serde_json::from_str(ev[1]).unwrap_or_else(|e| panic!("{e}: {text}"));
    assert_eq!(err["error"]["code"], "stream_interrupted");
    assert_eq!(ev[2], "[DONE]");
    assert!(!text.contains("half"), "a partial event leaked: {text}");

    let metrics = client()
        .get(format!("{base}/metrics"))
        .send()
        .await
        .expect("test setup")
        .text()
        .await
        .unwrap_or_default();
    assert!(
        metrics.contains("kiln_router:stream_errors_total{node=\"a\",colo=\"test\"} 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("kiln_router:cold_requests_total{node=\"a\",colo=\"test\"} 2"),
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failures_before_the_first_byte_are_retried_on_the_next_node() {
    let (a, a_url) = start_stub("a", &["m"]).await;
    let (b, b_url) = start_stub("b", &["m"]).await;
    let mut c = config(&[(&a_url, "a"), (&b_url, "b")]);
    c.replicas = 2;
    let base = start_router(c).await;
    // Whichever node is tried first fails with 500 (or a shutting-down node's 503): the
    // other answers, every time.
    a.set(Mode::ShuttingDown);
    let (status, headers, text) = chat(&base, json!({"model": "m"})).await;
    assert_eq!(
        (status.as_u16(), &headers["x-kiln-node"]),
        (200, &"b".parse().expect("header value")),
        "{text}"
    );
    a.set(Mode::Fail);
    for _ in 0..3 {
        let (status, headers, text) = chat(&base, json!({"model": "m", "stream": true})).await;
        assert_eq!(
            (status.as_u16(), &headers["x-kiln-node"]),
            (200, &"b".parse().expect("header value")),
            "{text}"
        );
    }
    // `a` was tried at most once: the failure ejected it.
    assert!(a.hits() <= 1);
    let nodes: Value = client()
        .get(format!("{base}/nodes"))
        .send()
        .await
        .expect("test setup")
        .json()
        .await
        .unwrap_or_default();
    let a_view = nodes["nodes"]
        .as_array()
        .and_then(|n| n.iter().find(|n| n["id"] == "a"))
        .cloned()
        .unwrap_or_default();
    if a.hits() == 1 {
        assert_eq!(a_view["health"], "ejected", "{nodes}");
    }
    assert_eq!(b.hits(), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_and_failing_nodes_end_in_openai_errors() {
    let (b, b_url) = start_stub("b", &["m"]).await;
    let dead = dead_url().await;
    let mut c = config(&[(&dead, "dead"), (&b_url, "b")]);
    c.replicas = 2;
    let base = start_router(c).await;
    let (status, headers, _) = chat(&base, json!({"model": "m"})).await;
    assert_eq!(
        (status.as_u16(), headers["x-kiln-node"].to_str().ok()),
        (200, Some("b"))
    );
    // The last node fails: its own error goes back; then it is ejected and the router
    // says no node can serve the model.
    b.set(Mode::Fail);
    let (status, headers, text) = chat(&base, json!({"model": "m"})).await;
    assert_eq!(
        (status.as_u16(), headers["x-kiln-node"].to_str().ok()),
        (500, Some("b")),
        "{text}"
    );
    let (status, _, text) = chat(&base, json!({"model": "m"})).await;
    assert_eq!(status, 503, "{text}");
    let v: Value = serde_json::from_str(&text).unwrap_or_default();
    assert_eq!(v["error"]["code"], "no_node_available");
    assert_eq!(v["error"]["type"], "server_error");

    // A model no node lists is a 404; with no node that ever answered, a 503.
    let (status, _, text) = chat(&base, json!({"model": "other"})).await;
    assert_eq!(status, 404, "{text}");
    let v: Value = serde_json::from_str(&text).unwrap_or_default();
    assert_eq!(v["error"]["code"], "model_not_found");
    assert_eq!(v["error"]["param"], "model");
    let base = start_router(config(&[(&dead, "dead")])).await;
    let (status, _, text) = chat(&base, json!({"model": "m"})).await;
    assert_eq!(status, 503, "{text}");
    let v: Value = serde_json::from_str(&text).unwrap_or_default();
    assert!(
        v["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("reported")),
        "{v}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_upstream_gets_unknown_models_long_prompts_and_overload_only() {
    let (a, a_url) = start_stub("a", &["m"]).await;
    let (b, b_url) = start_stub("b", &["m"]).await;
    let (up, up_url) = start_stub("upstream", &["m", "big"]).await;
    let mut c = config(&[(&a_url, "a"), (&b_url, "b")]);
    c.upstream = Some(Upstream::new(&up_url, Some("central-key".into())).expect("test setup"));
    c.node_api_key = Some("node-key".into());
    let base = start_router(c).await;

    let (status, headers, _) = chat(&base, json!({"model": "m"})).await;
    assert_eq!(status, 200);
    assert_ne!(headers["x-kiln-node"], "upstream");
    assert_eq!(up.hits(), 0);
    let auth = a.auth.lock().map(|a| a.clone()).unwrap_or_default().or(b
        .auth
        .lock()
        .map(|a| a.clone())
        .unwrap_or_default());
    assert_eq!(auth.as_deref(), Some("Bearer node-key"));

    let (status, headers, _) = chat(&base, json!({"model": "big"})).await;
    assert_eq!(
        (status.as_u16(), headers["x-kiln-node"].to_str().ok()),
        (200, Some("upstream"))
    );
    assert_eq!(up.hits(), 1);
    assert_eq!(
        up.auth
            .lock()
            .map(|a| a.clone())
            .unwrap_or_default()
            .as_deref(),
        Some("Bearer central-key")
    );

    a.set(Mode::TooLong);
    b.set(Mode::TooLong);
    let (status, headers, _) = chat(&base, json!({"model": "m", "stream": true})).await;
    assert_eq!(
        (status.as_u16(), headers["x-kiln-node"].to_str().ok()),
        (200, Some("upstream"))
    );
    assert_eq!(up.hits(), 2);

    a.set(Mode::Busy);
    b.set(Mode::Busy);
    let (status, headers, _) = chat(&base, json!({"model": "m"})).await;
    assert_eq!(
        (status.as_u16(), headers["x-kiln-node"].to_str().ok()),
        (200, Some("upstream"))
    );
    assert_eq!(up.hits(), 3);
    // Both rest after their 429: the next request goes straight up without trying them.
    let before = a.hits() + b.hits();
    let (status, _, _) = chat(&base, json!({"model": "m"})).await;
    assert_eq!(status, 200);
    assert_eq!((a.hits() + b.hits(), up.hits()), (before, 4));

    let metrics = client()
        .get(format!("{base}/metrics"))
        .send()
        .await
        .expect("test setup")
        .text()
        .await
        .unwrap_or_default();
    for line in [
        "kiln_router:fallback_requests_total{reason=\"unknown_model\"} 1",
        "kiln_router:fallback_requests_total{reason=\"context_length\"} 1",
        "kiln_router:fallback_requests_total{reason=\"overloaded\"} 2",
        "kiln_router:fallback_requests_total{reason=\"unavailable\"} 0",
        "kiln_router:requests_total{node=\"upstream\",colo=\"upstream\"} 4",
    ] {
        assert!(metrics.contains(line), "missing {line}:\n{metrics}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_an_upstream_overload_is_a_429_and_errors_keep_openai_shape() {
    let (a, a_url) = start_stub("a", &["m"]).await;
    let mut c = config(&[(&a_url, "a")]);
    c.api_keys = vec!["secret".into()];
    c.body_limit = 1000;
    let base = start_router(c).await;
    let send = |body: Value, key: Option<&str>| {
        let mut r = client()
            .post(format!("{base}/v1/chat/completions"))
            .json(&body);
        if let Some(k) = key {
            r = r.bearer_auth(k);
        }
        r.send()
    };
    let r = send(json!({"model": "m"}), None).await.expect("test setup");
    assert_eq!(r.status(), 401);
    let v: Value = r.json().await.unwrap_or_default();
    assert_eq!(v["error"]["type"], "authentication_error");

    a.set(Mode::Busy);
    let r = send(json!({"model": "m"}), Some("secret"))
        .await
        .expect("test setup");
    assert_eq!(r.status(), 429);
    assert!(r.headers().contains_key("retry-after"));
    let r = send(
        json!({"model": "m", "pad": "x".repeat(2000)}),
        Some("secret"),
    )
    .await
    .expect("test setup");
    assert_eq!(r.status(), 413);
    let v: Value = r.json().await.unwrap_or_default();
    assert_eq!(v["error"]["code"], "request_too_large");
    let r = client()
        .get(format!("{base}/v1/nope"))
        .bearer_auth("secret")
        .send()
        .await
        .expect("test setup");
    assert_eq!(r.status(), 404);
    let v: Value = r.json().await.unwrap_or_default();
    assert_eq!(v["error"]["code"], "not_found");
    // Ops endpoints stay open.
    let r = client()
        .get(format!("{base}/ready"))
        .send()
        .await
        .expect("test setup");
    assert_eq!(r.status(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_stick_and_models_are_the_union() {
    let (_a, a_url) = start_stub("a", &["m", "x"]).await;
    let (_b, b_url) = start_stub("b", &["m"]).await;
    let (_c, c_url) = start_stub("c", &["m", "y"]).await;
    let mut c = config(&[(&a_url, "a"), (&b_url, "b"), (&c_url, "c")]);
    c.replicas = 3;
    let base = start_router(c).await;
    let models: Value = client()
        .get(format!("{base}/v1/models"))
        .send()
        .await
        .expect("test setup")
        .json()
        .await
        .unwrap_or_default();
    let ids: Vec<&str> = models["data"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| m["id"].as_str())
        .collect();
    assert_eq!(ids, ["m", "x", "y"]);

    let mut seen = std::collections::BTreeMap::new();
    for s in 0..12 {
        let user = format!("user-{}", s % 4);
        let (status, headers, _) = chat(&base, json!({"model": "m", "user": user})).await;
        assert_eq!(status, 200);
        let node = headers["x-kiln-node"]
            .to_str()
            .unwrap_or_default()
            .to_string();
        assert_eq!(seen.entry(user).or_insert_with(|| node.clone()), &node);
    }
    let metrics = client()
        .get(format!("{base}/metrics"))
        .send()
        .await
        .expect("test setup")
        .text()
        .await
        .unwrap_or_default();
    assert!(
        metrics.contains("kiln_router:affinity_hit_rate 1\n"),
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_router_cuts_slow_bodies_and_idle_clients_too() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (_a, a_url) = start_stub("a", &["m"]).await;
    let mut c = config(&[(&a_url, "a")]);
    c.limits.header_timeout = Duration::from_millis(500);
    c.limits.body_timeout = Duration::from_secs(1);
    let base = start_router(c).await;
    let addr = base.trim_start_matches("http://").to_string();

    // A body trickled a byte at a time: 408 once the body timeout passes.
    let mut slow = tokio::net::TcpStream::connect(&addr)
        .await
        .expect("connect");
    let head = "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n\
                Content-Type: application/json\r\nContent-Length: 100\r\n\r\n";
    slow.write_all(head.as_bytes()).await.expect("head");
    let start = std::time::Instant::now();
    let trickle = async {
        for _ in 0..30 {
            if slow.write_all(b" ").await.is_err() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    let _ = tokio::time::timeout(Duration::from_millis(1500), trickle).await;
    let mut answer = vec![0u8; 4096];
    let n = tokio::time::timeout(Duration::from_secs(5), slow.read(&mut answer))
        .await
        .expect("an answer")
        .expect("read");
    let answer = String::from_utf8_lossy(&answer[..n]);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(start.elapsed() < Duration::from_secs(4));

    // A client that connects and says nothing is dropped after the header timeout.
    let mut idle = tokio::net::TcpStream::connect(&addr)
        .await
        .expect("connect");
    let mut buf = [0u8; 16];
    let n = tokio::time::timeout(Duration::from_secs(5), idle.read(&mut buf))
        .await
        .expect("closed in time")
        .expect("read");
    assert_eq!(n, 0, "the idle client got data");
}
