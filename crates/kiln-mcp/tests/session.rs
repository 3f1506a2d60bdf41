//! End-to-end tests of `McpSession` against real MCP servers over HTTP.
#![allow(clippy::unwrap_used)]

mod support;

use std::{
    sync::atomic::Ordering,
    time::{Duration, Instant},
};

use kiln_mcp::{CallResult, McpError, McpServer, McpSession, McpSettings};
use kiln_outbound::{Exception, OutboundPolicy};
use serde_json::{json, Map, Value};
use support::Options;

/// The test servers listen on loopback, which the default outbound policy refuses.
fn loopback_allowed() -> OutboundPolicy {
    OutboundPolicy::new(vec![Exception::parse("127.0.0.0/8").unwrap()]).unwrap()
}

fn fast() -> McpSettings {
    McpSettings {
        timeout: Duration::from_secs(5),
        attempts: 3,
        backoff: Duration::from_millis(20),
        outbound: loopback_allowed(),
    }
}

fn server(url: &str, headers: &[(&str, &str)]) -> McpServer {
    McpServer {
        label: "test-server".to_owned(),
        url: url.to_owned(),
        headers: headers
            .iter()
            .map(|(n, v)| ((*n).to_owned(), (*v).to_owned()))
            .collect(),
    }
}

fn args(value: Value) -> Map<String, Value> {
    match value {
        Value::Object(map) => map,
        other => panic!("not an object: {other}"),
    }
}

#[tokio::test]
async fn lists_tools_and_calls_them() {
    let srv = support::start(Options::default()).await;
    let session = McpSession::connect(&server(&srv.url, &[]), &fast())
        .await
        .unwrap();

    let tools = session.list_tools().await.unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["add", "echo", "fail", "slow"]);
    let add = &tools[0];
    assert_eq!(add.description.as_deref(), Some("Add two integers"));
    assert_eq!(add.input_schema["type"], "object");
    assert!(
        add.input_schema["properties"]["a"].is_object(),
        "{}",
        add.input_schema
    );
    assert!(add.input_schema["properties"]["b"].is_object());
    assert!(tools[1].input_schema["properties"]["text"].is_object());

    let sum = session
        .call_tool("add", args(json!({"a": 2, "b": 3})))
        .await
        .unwrap();
    assert_eq!(sum, CallResult::Output("5".to_owned()));
    let echoed = session
        .call_tool("echo", args(json!({"text": "hello\nworld"})))
        .await
        .unwrap();
    assert_eq!(echoed, CallResult::Output("hello\nworld".to_owned()));

    session.close().await;
}

#[tokio::test]
async fn tool_reported_failure_is_a_tool_error() {
    let srv = support::start(Options::default()).await;
    let session = McpSession::connect(&server(&srv.url, &[]), &fast())
        .await
        .unwrap();
    let result = session.call_tool("fail", Map::new()).await.unwrap();
    assert_eq!(
        result,
        CallResult::ToolError("boom: the tool failed".to_owned())
    );
}

#[tokio::test]
async fn unknown_tool_is_a_server_error() {
    let srv = support::start(Options::default()).await;
    let session = McpSession::connect(&server(&srv.url, &[]), &fast())
        .await
        .unwrap();
    let err = session.call_tool("nope", Map::new()).await.unwrap_err();
    assert!(matches!(err, McpError::Server { .. }), "{err:?}");
    let message = err.to_string();
    assert!(
        message.contains("test-server") && message.contains("'nope'"),
        "{message}"
    );
}

#[tokio::test]
async fn follows_pagination_cursors() {
    let srv = support::start(Options {
        paginate: true,
        ..Options::default()
    })
    .await;
    let session = McpSession::connect(&server(&srv.url, &[]), &fast())
        .await
        .unwrap();
    let names: Vec<String> = session
        .list_tools()
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.name)
        .collect();
    assert_eq!(names, ["add", "echo", "fail", "slow"]);
}

#[tokio::test]
async fn headers_reach_every_request() {
    let srv = support::start(Options {
        bearer: Some("secret"),
        ..Options::default()
    })
    .await;
    let with_token = server(&srv.url, &[("Authorization", "Bearer secret")]);
    let session = McpSession::connect(&with_token, &fast()).await.unwrap();
    assert_eq!(session.list_tools().await.unwrap().len(), 4);
    let sum = session
        .call_tool("add", args(json!({"a": 1, "b": 1})))
        .await
        .unwrap();
    assert_eq!(sum, CallResult::Output("2".to_owned()));
    session.close().await;
    // initialize, initialized, list, call, plus the SSE GET and the DELETE.
    assert!(srv.counters.requests.load(Ordering::SeqCst) >= 4);
    assert_eq!(srv.counters.rejected.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn missing_or_wrong_token_fails_fast_without_retry() {
    let srv = support::start(Options {
        bearer: Some("secret"),
        ..Options::default()
    })
    .await;
    let started = Instant::now();
    let err = McpSession::connect(&server(&srv.url, &[]), &fast())
        .await
        .unwrap_err();
    assert!(
        matches!(err, McpError::HttpStatus { status: 401, .. }),
        "{err:?}"
    );
    assert_eq!(
        srv.counters.requests.load(Ordering::SeqCst),
        1,
        "4xx must not be retried"
    );
    assert!(started.elapsed() < Duration::from_secs(2));
    let message = err.to_string();
    assert!(
        message.contains("test-server") && message.contains(&srv.url),
        "{message}"
    );
    assert!(message.contains("401"), "{message}");
    assert!(
        !message.contains("missing or wrong bearer token"),
        "the remote body was echoed: {message}"
    );

    let wrong = server(&srv.url, &[("Authorization", "Bearer hunter2")]);
    let err = McpSession::connect(&wrong, &fast()).await.unwrap_err();
    assert!(
        matches!(err, McpError::HttpStatus { status: 401, .. }),
        "{err:?}"
    );
    assert!(
        !err.to_string().contains("hunter2"),
        "header value leaked: {err}"
    );
    assert!(
        !format!("{err:?}").contains("hunter2"),
        "header value leaked: {err:?}"
    );
}

#[tokio::test]
async fn server_errors_are_retried() {
    let srv = support::start(Options {
        fail_first: 2,
        ..Options::default()
    })
    .await;
    let session = McpSession::connect(&server(&srv.url, &[]), &fast())
        .await
        .unwrap();
    assert_eq!(session.list_tools().await.unwrap().len(), 4);

    let srv = support::start(Options {
        fail_first: 10,
        ..Options::default()
    })
    .await;
    let err = McpSession::connect(&server(&srv.url, &[]), &fast())
        .await
        .unwrap_err();
    assert!(
        matches!(err, McpError::HttpStatus { status: 503, .. }),
        "{err:?}"
    );
    assert_eq!(srv.counters.requests.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn unreachable_server_is_retried_then_reported() {
    let port = support::closed_port().await;
    let url = format!("http://127.0.0.1:{port}/mcp");
    let started = Instant::now();
    let err = McpSession::connect(&server(&url, &[]), &fast())
        .await
        .unwrap_err();
    match &err {
        McpError::Unreachable { attempts, .. } => assert_eq!(*attempts, 3),
        other => panic!("expected Unreachable, got {other:?}"),
    }
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    let message = err.to_string();
    assert!(
        message.contains("test-server") && message.contains(&url),
        "{message}"
    );
    assert!(message.contains("refused the connection"), "{message}");
}

#[tokio::test]
async fn silent_server_times_out_instead_of_hanging() {
    let (addr, accepted) = support::silent_server().await;
    let settings = McpSettings {
        timeout: Duration::from_millis(300),
        attempts: 2,
        backoff: Duration::from_millis(10),
        outbound: loopback_allowed(),
    };
    let started = Instant::now();
    let err = McpSession::connect(&server(&format!("http://{addr}/mcp"), &[]), &settings)
        .await
        .unwrap_err();
    assert!(matches!(err, McpError::Timeout { .. }), "{err:?}");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(accepted.load(Ordering::SeqCst), 2, "timeouts are retried");
    assert!(err.to_string().contains("300ms"), "{err}");
}

#[tokio::test]
async fn slow_tool_times_out_and_session_stays_usable() {
    let srv = support::start(Options::default()).await;
    let settings = McpSettings {
        timeout: Duration::from_millis(300),
        ..fast()
    };
    let session = McpSession::connect(&server(&srv.url, &[]), &settings)
        .await
        .unwrap();
    let started = Instant::now();
    let err = session.call_tool("slow", Map::new()).await.unwrap_err();
    assert!(matches!(err, McpError::Timeout { .. }), "{err:?}");
    assert!(started.elapsed() < Duration::from_secs(2));
    assert!(err.to_string().contains("tool 'slow'"), "{err}");
    let sum = session
        .call_tool("add", args(json!({"a": 2, "b": 2})))
        .await
        .unwrap();
    assert_eq!(sum, CallResult::Output("4".to_owned()));
}

#[tokio::test]
async fn bad_configuration_is_rejected_before_connecting() {
    let settings = fast();
    let err = McpSession::connect(&server("ftp://127.0.0.1/mcp", &[]), &settings)
        .await
        .unwrap_err();
    assert!(matches!(err, McpError::InvalidUrl { .. }), "{err:?}");
    let err = McpSession::connect(&server("not a url", &[]), &settings)
        .await
        .unwrap_err();
    assert!(matches!(err, McpError::InvalidUrl { .. }), "{err:?}");

    let url = "http://127.0.0.1:9/mcp";
    let err = McpSession::connect(&server(url, &[("Bad Name", "x")]), &settings)
        .await
        .unwrap_err();
    assert!(matches!(err, McpError::InvalidHeader { .. }), "{err:?}");
    let err = McpSession::connect(&server(url, &[("X-Key", "line\nbreak-secret")]), &settings)
        .await
        .unwrap_err();
    assert!(matches!(err, McpError::InvalidHeader { .. }), "{err:?}");
    assert!(!err.to_string().contains("secret"), "{err}");
    let err = McpSession::connect(&server(url, &[("Mcp-Session-Id", "x")]), &settings)
        .await
        .unwrap_err();
    assert!(matches!(err, McpError::InvalidHeader { .. }), "{err:?}");
}

#[tokio::test]
async fn https_is_supported_and_tls_failures_are_not_retried() {
    // A plain-HTTP server cannot complete a TLS handshake: a TLS error, at once.
    let srv = support::start(Options::default()).await;
    let url = srv.url.replace("http://", "https://");
    let err = McpSession::connect(&server(&url, &[]), &fast())
        .await
        .unwrap_err();
    assert!(matches!(err, McpError::Tls { .. }), "{err:?}");
    assert_eq!(srv.counters.requests.load(Ordering::SeqCst), 0);
    assert!(err.to_string().contains(&url), "{err}");

    let port = support::closed_port().await;
    let url = format!("https://127.0.0.1:{port}/mcp");
    let err = McpSession::connect(&server(&url, &[]), &fast())
        .await
        .unwrap_err();
    assert!(
        matches!(err, McpError::Unreachable { attempts: 3, .. }),
        "{err:?}"
    );
}

/// Callers hold sessions across `.await` in multi-threaded servers.
#[test]
fn session_and_its_futures_are_send_and_sync() {
    fn send_sync<T: Send + Sync>(_: &T) {}
    fn send<T: Send>(_: T) {}
    let settings = McpSettings::default();
    let srv = server("http://127.0.0.1:9/mcp", &[]);
    send(McpSession::connect(&srv, &settings));
    let _ = |session: McpSession| {
        send_sync(&session);
        send(async move {
            let _ = session.list_tools().await;
            let _ = session.call_tool("add", Map::new()).await;
            session.close().await;
        });
    };
}
