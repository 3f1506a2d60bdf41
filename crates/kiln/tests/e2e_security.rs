//! The adversarial checks of the platform, against a real `kiln serve`, so none of the
//! holes a probe found comes back:
//!
//! - SSRF through MCP tools: a Responses request naming an MCP `server_url` on loopback
//!   (in every spelling), the cloud metadata address or a private network gets a failed
//!   response with `mcp_server_not_allowed` and the target is never contacted; with the
//!   operator's `--outbound-allow` the request goes through, and the target's error body
//!   (an internal secret) never reaches the client, only its status;
//! - servers on different `--data-dir`s meter usage into their own files;
//! - agents: a cron pattern with seconds (`* * * * * *` ran a turn every second), one
//!   that fires more often than the minimum interval, an `at` in year 9999 or the past,
//!   more schedules than an agent may have, an unserved model and tools of the wrong
//!   shape at `PUT` are all 400s naming the field; `GET /v1/agents` needs a key (401,
//!   not 404) and pages the key's own agents.

mod support;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use reqwest::Method;

use serde_json::{json, Value};
use support::*;

const SECRET: &str = "internal-secret=hunter2-7731";

/// A loopback HTTP service that answers every request with 501 and a secret in its
/// body; the port and a count of the connections it accepted.
fn internal_service() -> (u16, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = accepted.clone();
    std::thread::spawn(move || {
        for mut stream in listener.incoming().flatten() {
            count.fetch_add(1, Ordering::SeqCst);
            let mut buf = [0u8; 4096];
            let _ = stream.read(&mut buf);
            let reply = format!(
                "HTTP/1.1 501 Not Implemented\r\ncontent-type: text/plain\r\n\
                 content-length: {}\r\nconnection: close\r\n\r\n{SECRET}",
                SECRET.len()
            );
            let _ = stream.write_all(reply.as_bytes());
        }
    });
    (port, accepted)
}

fn serve(extra: &[&str]) -> (kiln_testkit::server::ServerProcess, tempfile::TempDir) {
    let data = tempfile::tempdir().expect("tempdir");
    let dir = data.path().to_string_lossy().to_string();
    let args = [
        &["--data-dir", dir.as_str(), "--kv-cache-memory", "64MiB"],
        extra,
    ]
    .concat();
    (start(&args), data)
}

async fn respond_with_mcp(base: &str, server_url: &str) -> Value {
    let body = json!({
        "input": "hi",
        "max_output_tokens": 4,
        "tools": [{"type": "mcp", "server_label": "probe", "server_url": server_url,
                   "require_approval": "never"}],
    });
    let (status, response) = post(base, "/v1/responses", &body).await;
    assert_eq!(status, 200, "{server_url}: {response}");
    response
}

#[test]
fn mcp_server_urls_on_internal_addresses_are_refused_untouched() {
    let (port, accepted) = internal_service();
    let (server, _data) = serve(&[]);
    let base = server.base_url();
    block_on(async {
        for (url, class) in [
            (format!("http://127.0.0.1:{port}/mcp"), "loopback"),
            (format!("http://localhost:{port}/mcp"), "loopback"),
            (format!("http://0x7f000001:{port}/mcp"), "loopback"),
            (format!("http://[::1]:{port}/mcp"), "loopback"),
            (format!("http://[::ffff:127.0.0.1]:{port}/mcp"), "loopback"),
            (
                "http://169.254.169.254/latest/meta-data/".into(),
                "cloud metadata",
            ),
            ("http://10.20.30.40:8080/mcp".into(), "private-network"),
            ("http://192.168.1.1/mcp".into(), "private-network"),
        ] {
            let r = respond_with_mcp(&base, &url).await;
            assert_eq!(r["status"], "failed", "{url}: {r}");
            assert_eq!(r["error"]["code"], "mcp_server_not_allowed", "{url}: {r}");
            let message = r["error"]["message"].as_str().unwrap_or_default();
            assert!(
                message.contains("not allowed") && message.contains(class),
                "{url}: {message}"
            );
        }
    });
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        0,
        "the internal service was contacted"
    );
}

#[test]
fn an_allowed_internal_server_never_has_its_body_echoed() {
    let (port, accepted) = internal_service();
    let (server, _data) = serve(&["--outbound-allow", "127.0.0.0/8"]);
    let base = server.base_url();
    let r = block_on(respond_with_mcp(
        &base,
        &format!("http://127.0.0.1:{port}/mcp"),
    ));
    assert!(
        accepted.load(Ordering::SeqCst) >= 1,
        "the allowed server was not tried: {r}"
    );
    assert_eq!(r["status"], "failed", "{r}");
    assert_eq!(r["error"]["code"], "mcp_server_unreachable", "{r}");
    let text = r.to_string();
    assert!(text.contains("501"), "the status should be named: {text}");
    assert!(!text.contains("hunter2"), "the remote body leaked: {text}");
}

#[test]
fn each_data_dir_has_its_own_usage_meter() {
    let (first, a) = serve(&[]);
    let (second, b) = serve(&[]);
    for (server, dir) in [(&first, &a), (&second, &b)] {
        let want = dir.path().join("usage.sqlite3");
        let log = server.log_tail();
        assert!(
            log.contains(&format!("metering usage path={}", want.display())),
            "{log}"
        );
        assert!(want.exists(), "{}", want.display());
    }
}

#[test]
fn agent_schedules_and_settings_are_bounded() {
    const KEY: &str = "sk-sec";
    let (server, _data) = serve(&[
        "--api-key",
        KEY,
        "--agent-max-schedules",
        "3",
        "--agent-min-interval",
        "300",
    ]);
    let base = server.base_url();
    let send = |method: Method, path: String, body: Option<Value>| {
        let base = base.clone();
        async move { call(&base, method, &path, Some(KEY), body.as_ref()).await }
    };
    block_on(async {
        let refused = |(status, body): (u16, Value), param: &str| {
            assert_eq!(status, 400, "{param}: {body}");
            assert_eq!(body["error"]["param"], param, "{body}");
            body["error"]["message"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        };
        // Settings a turn would refuse are refused at PUT.
        let put =
            |name: &str, body: Value| send(Method::PUT, format!("/v1/agents/{name}"), Some(body));
        let (status, body) = put("a", json!({"model": "no-such-model"})).await;
        assert!(matches!(status, 400 | 404), "{status}: {body}");
        assert_eq!(body["error"]["code"], "model_not_found", "{body}");
        refused(
            put(
                "a",
                json!({"model": MODEL, "tools": [{"type": "web_search"}]}),
            )
            .await,
            "tools[0].type",
        );
        let (status, body) = put("a", json!({"model": MODEL})).await;
        assert_eq!(status, 200, "{body}");

        let schedule =
            |body: Value| send(Method::POST, "/v1/agents/a/schedules".into(), Some(body));
        let m = refused(
            schedule(json!({"input": "x", "cron": "* * * * * *"})).await,
            "cron",
        );
        assert!(m.contains("five fields"), "{m}");
        refused(
            schedule(json!({"input": "x", "cron": "0 0 * * * * 2030"})).await,
            "cron",
        );
        let m = refused(
            schedule(json!({"input": "x", "cron": "0,1 * * * *"})).await,
            "cron",
        );
        assert!(m.contains("60 s apart") && m.contains("300 s"), "{m}");
        refused(
            schedule(json!({"input": "x", "cron": "*/2 * * * *"})).await,
            "cron",
        );
        refused(
            schedule(json!({"input": "x", "at": "9999-12-31T23:59:59Z"})).await,
            "at",
        );
        refused(
            schedule(json!({"input": "x", "at": "2001-01-01T00:00:00Z"})).await,
            "at",
        );
        for _ in 0..3 {
            let (status, body) = schedule(json!({"input": "x", "delay_seconds": 3600})).await;
            assert_eq!(status, 200, "{body}");
        }
        let (status, body) = schedule(json!({"input": "x", "cron": "0 3 * * *"})).await;
        assert_eq!(status, 400, "{body}");
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap_or_default()
                .contains("3 schedules"),
            "{body}"
        );

        // Listing: a key first, then the key's own agents, a page at a time.
        let (status, body) = call(&base, Method::GET, "/v1/agents", None, None).await;
        assert_eq!(status, 401, "{body}");
        for name in ["b", "c"] {
            let (status, body) = put(name, json!({"model": MODEL})).await;
            assert_eq!(status, 200, "{body}");
        }
        let (status, page) = send(Method::GET, "/v1/agents?limit=2".into(), None).await;
        assert_eq!(status, 200, "{page}");
        assert_eq!(page["object"], "list");
        assert_eq!(page["data"][0]["id"], "a");
        assert_eq!(page["data"][1]["id"], "b");
        assert_eq!(page["has_more"], true, "{page}");
        assert_eq!(page["last_id"], "b");
        let (_, next) = send(Method::GET, "/v1/agents?limit=2&after=b".into(), None).await;
        assert_eq!(next["data"].as_array().map(Vec::len), Some(1), "{next}");
        assert_eq!(next["has_more"], false, "{next}");
        refused(
            send(Method::GET, "/v1/agents?limit=101".into(), None).await,
            "limit",
        );
    });
}
