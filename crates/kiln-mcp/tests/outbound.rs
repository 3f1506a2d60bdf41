//! The outbound policy in front of every MCP connection: a live server on a denied
//! address is never contacted, an exception lets it through, a redirect hop is
//! checked again, and failures never carry what the remote answered.
#![allow(clippy::unwrap_used)]

#[allow(dead_code)] // each test binary uses part of the support module
mod support;

use std::{sync::atomic::Ordering, time::Duration};

use axum::{
    http::{header, StatusCode},
    response::IntoResponse,
    routing::any,
};
use kiln_mcp::{McpError, McpServer, McpSession, McpSettings};
use kiln_outbound::{Exception, OutboundPolicy};
use support::Options;

fn server(url: &str) -> McpServer {
    McpServer {
        label: "probe".to_owned(),
        url: url.to_owned(),
        headers: vec![],
    }
}

fn settings(exceptions: &[&str]) -> McpSettings {
    let exceptions = exceptions.iter().map(|e| Exception::parse(e).unwrap());
    McpSettings {
        timeout: Duration::from_secs(5),
        attempts: 3,
        backoff: Duration::from_millis(20),
        outbound: OutboundPolicy::new(exceptions.collect()).unwrap(),
    }
}

/// An HTTP server on loopback answering every request with `status`, `headers` and
/// `body`; returns its base URL.
async fn canned(
    status: StatusCode,
    headers: Vec<(&'static str, String)>,
    body: &'static str,
) -> String {
    let app = axum::Router::new().fallback(any(move || {
        let headers = headers.clone();
        async move {
            let mut response = (status, body).into_response();
            for (name, value) in headers {
                response.headers_mut().insert(name, value.parse().unwrap());
            }
            response
        }
    }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}")
}

#[tokio::test]
async fn loopback_in_every_spelling_is_refused_without_contact() {
    let srv = support::start(Options::default()).await;
    let port = srv.url.rsplit(':').next().unwrap().trim_end_matches("/mcp");
    for url in [
        format!("http://127.0.0.1:{port}/mcp"),
        format!("http://localhost:{port}/mcp"),
        format!("http://0x7f000001:{port}/mcp"),
        format!("http://2130706433:{port}/mcp"),
        format!("http://[::ffff:127.0.0.1]:{port}/mcp"),
    ] {
        let err = McpSession::connect(&server(&url), &settings(&[]))
            .await
            .unwrap_err();
        let message = err.to_string();
        assert!(matches!(err, McpError::NotAllowed { .. }), "{url}: {err:?}");
        assert!(
            message.contains("loopback") && message.contains("not allowed"),
            "{message}"
        );
    }
    assert_eq!(
        srv.counters.requests.load(Ordering::SeqCst),
        0,
        "nothing reached the server"
    );

    // The metadata and private addresses are refused before any connection is tried
    // (nothing listens there; an attempt would be Unreachable or a timeout instead).
    for (url, class) in [
        ("http://169.254.169.254/latest/meta-data/", "cloud metadata"),
        ("http://10.0.0.1:8000/mcp", "private-network"),
        ("http://[fe80::1]/mcp", "link-local"),
    ] {
        let err = McpSession::connect(&server(url), &settings(&[]))
            .await
            .unwrap_err();
        assert!(matches!(err, McpError::NotAllowed { .. }), "{url}: {err:?}");
        assert!(err.to_string().contains(class), "{err}");
    }
}

#[tokio::test]
async fn an_exception_lets_the_named_address_through() {
    let srv = support::start(Options::default()).await;
    let session = McpSession::connect(&server(&srv.url), &settings(&["127.0.0.1/32"]))
        .await
        .unwrap();
    assert_eq!(session.list_tools().await.unwrap().len(), 4);
    session.close().await;
    // A host-name exception covers that name only.
    let by_name = srv.url.replace("127.0.0.1", "localhost");
    let session = McpSession::connect(&server(&by_name), &settings(&["localhost"]))
        .await
        .unwrap();
    session.close().await;
    let other = McpSession::connect(&server(&srv.url), &settings(&["localhost"])).await;
    assert!(
        matches!(other, Err(McpError::NotAllowed { .. })),
        "{other:?}"
    );
}

#[tokio::test]
async fn a_redirect_to_loopback_is_not_followed() {
    let target = support::start(Options::default()).await;
    // Reached as `localhost` (allowed by name); it redirects to the loopback address,
    // which only the name was allowed for.
    let redirector = canned(
        StatusCode::TEMPORARY_REDIRECT,
        vec![("location", target.url.clone())],
        "",
    )
    .await;
    let url = format!("{}/mcp", redirector.replace("127.0.0.1", "localhost"));
    let err = McpSession::connect(&server(&url), &settings(&["localhost"]))
        .await
        .unwrap_err();
    assert_eq!(
        target.counters.requests.load(Ordering::SeqCst),
        0,
        "{err:?}"
    );
    assert!(!matches!(err, McpError::Closed { .. }), "{err:?}");
}

#[tokio::test]
async fn a_remote_error_body_never_reaches_the_caller() {
    const SECRET: &str = "internal-token=s3cr3t-4242";
    for status in [
        StatusCode::NOT_IMPLEMENTED,
        StatusCode::FORBIDDEN,
        StatusCode::OK,
    ] {
        let url = canned(
            status,
            vec![(header::CONTENT_TYPE.as_str(), "text/plain".into())],
            SECRET,
        )
        .await;
        let err = McpSession::connect(&server(&format!("{url}/mcp")), &settings(&["127.0.0.1"]))
            .await
            .unwrap_err();
        let message = format!("{err} {err:?}");
        assert!(!message.contains("s3cr3t"), "{status}: {message}");
        if status != StatusCode::OK {
            assert!(message.contains(status.as_str()), "{message}");
        }
    }
}
