//! A careless or hostile client against a real `kiln serve`: idle connections past the
//! descriptor limit, a body trickled one byte at a time, the wrong content type, browser
//! preflights, a scraper without its key, a model whose weights hold NaNs, and requests
//! still running at the shutdown deadline. Loopback only; every wait is bounded.

mod support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use kiln_testkit::server::ServerProcess;
use serde_json::{json, Value};
use support::*;

/// `kiln serve <args>` under a soft and hard limit of `fds` open descriptors.
fn start_limited(fds: u32, args: &[&str]) -> ServerProcess {
    kiln_testkit::model_dir(MODEL);
    let mut cmd = Command::new("sh");
    cmd.args([
        "-c",
        &format!("ulimit -n {fds} && exec \"$0\" \"$@\""),
        env!("CARGO_BIN_EXE_kiln"),
    ]);
    ServerProcess::start_with(cmd, args, Duration::from_secs(120)).unwrap_or_else(|e| panic!("{e}"))
}

fn connect(port: u16) -> TcpStream {
    let s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(20)))
        .expect("read timeout");
    s
}

/// Reads until the peer closes (or the read timeout), returning what arrived.
fn read_all(s: &mut TcpStream) -> String {
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

/// `POST url` with a JSON body.
async fn post_json(url: &str, body: &Value) -> reqwest::Response {
    client().post(url).json(body).send().await.expect("send")
}

/// The stream's error event (a stream that failed midway ends with one, then `[DONE]`).
fn error_event(events: &[String]) -> Value {
    assert_eq!(
        events.last().map(String::as_str),
        Some("[DONE]"),
        "{events:?}"
    );
    events
        .iter()
        .filter_map(|e| serde_json::from_str::<Value>(e).ok())
        .find(|v| v.get("error").is_some())
        .unwrap_or_else(|| panic!("no error event: {events:?}"))
}

#[test]
fn idle_connections_and_slow_bodies_are_cut_and_health_keeps_answering() {
    // 256 descriptors leave room for 192 clients: the connection cap must keep the
    // server under the limit, and the header timeout must free the slots idle ones hold.
    let server = start_limited(256, &["--header-timeout", "2", "--body-timeout", "2"]);
    let port = server.port();
    let idle: Vec<TcpStream> = (0..300).map(|_| connect(port)).collect();
    let start = Instant::now();
    let (status, _) = server.get("/health").expect("GET /health under the flood");
    assert_eq!(status, 200);
    assert!(
        start.elapsed() < Duration::from_secs(15),
        "/health took {:?}",
        start.elapsed()
    );
    // The server closed the idle connections it accepted (they sent no request).
    let mut first = idle.into_iter().next().expect("a connection");
    let t = Instant::now();
    assert_eq!(read_all(&mut first), "", "an idle connection got data");
    assert!(
        t.elapsed() < Duration::from_secs(10),
        "idle connection held {:?}",
        t.elapsed()
    );
    let log = server.log_tail();
    assert!(!log.contains("Too many open files"), "{log}");

    // A body trickled a byte at a time gets 408 once the body timeout passes, even
    // though bytes keep arriving.
    let mut slow = connect(port);
    let head =
        "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
                Content-Length: 200\r\n\r\n";
    slow.write_all(head.as_bytes()).expect("send head");
    let sent_at = Instant::now();
    let mut answer = String::new();
    for _ in 0..40 {
        if slow.write_all(b" ").is_err() {
            break;
        }
        std::thread::sleep(Duration::from_millis(150));
        slow.set_nonblocking(true).expect("nonblocking");
        let mut buf = [0u8; 4096];
        if let Ok(n) = slow.read(&mut buf) {
            answer.push_str(&String::from_utf8_lossy(&buf[..n]));
        }
        slow.set_nonblocking(false).expect("blocking");
        if !answer.is_empty() {
            break;
        }
    }
    if answer.is_empty() {
        answer = read_all(&mut slow);
    }
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("\"code\":\"request_timeout\""), "{answer}");
    assert!(
        sent_at.elapsed() < Duration::from_secs(6),
        "{:?}",
        sent_at.elapsed()
    );

    // A head sent too slowly is dropped without an answer.
    let mut partial = connect(port);
    partial
        .write_all(b"GET /health HTTP/1.1\r\n")
        .expect("half a head");
    let t = Instant::now();
    assert_eq!(read_all(&mut partial), "");
    assert!(t.elapsed() < Duration::from_secs(10));
    let (status, _) = server.get("/health").expect("GET /health after");
    assert_eq!(status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn content_type_cors_metrics_key_and_best_of() {
    let server = start(&[
        "--cors-origin",
        "https://app.example",
        "--metrics-key",
        "mk",
    ]);
    let base = server.base_url();
    let chat = format!("{base}/v1/chat/completions");
    let body = json!({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2});

    let r = client()
        .post(&chat)
        .header("content-type", "text/plain")
        .body(body.to_string())
        .send()
        .await
        .expect("send");
    assert_eq!(r.status(), 415);
    let v: Value = r.json().await.expect("json");
    assert_eq!(v["error"]["code"], "unsupported_media_type", "{v}");
    // A body with no content type at all is taken as JSON.
    let r = client()
        .post(&chat)
        .body(body.to_string())
        .send()
        .await
        .expect("send");
    assert_eq!(r.status(), 200);

    // A browser on the allowed origin gets its preflight answered, before any key.
    let r = client()
        .request(reqwest::Method::OPTIONS, &chat)
        .header("origin", "https://app.example")
        .header("access-control-request-method", "POST")
        .header(
            "access-control-request-headers",
            "authorization,content-type",
        )
        .send()
        .await
        .expect("preflight");
    assert!(r.status().is_success(), "{}", r.status());
    let allow = r.headers().get("access-control-allow-origin");
    assert_eq!(
        allow.and_then(|v| v.to_str().ok()),
        Some("https://app.example")
    );
    // Another origin is not allowed.
    let r = client()
        .request(reqwest::Method::OPTIONS, &chat)
        .header("origin", "https://evil.example")
        .header("access-control-request-method", "POST")
        .send()
        .await
        .expect("preflight");
    assert!(r.headers().get("access-control-allow-origin").is_none());

    // /metrics and /ready need the metrics key; /health never does.
    let get = |path: &str, key: Option<&str>| {
        let mut req = client().get(format!("{base}{path}"));
        if let Some(k) = key {
            req = req.bearer_auth(k);
        }
        req.send()
    };
    assert_eq!(get("/metrics", None).await.expect("send").status(), 401);
    assert_eq!(
        get("/ready", Some("wrong")).await.expect("send").status(),
        401
    );
    assert_eq!(
        get("/metrics", Some("mk")).await.expect("send").status(),
        200
    );
    assert_eq!(get("/ready", Some("mk")).await.expect("send").status(), 200);
    assert_eq!(get("/health", None).await.expect("send").status(), 200);

    // Chat refuses best_of the way completions does.
    let best_of = json!({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2,
        "n": 1, "best_of": 3});
    let r = post_json(&chat, &best_of).await;
    assert_eq!(r.status(), 400);
    let v: Value = r.json().await.expect("json");
    assert_eq!(v["error"]["param"], "best_of", "{v}");

    // Without a configured origin there is no CORS at all.
    let plain = start(&[]);
    let r = client()
        .request(
            reqwest::Method::OPTIONS,
            format!("{}/v1/chat/completions", plain.base_url()),
        )
        .header("origin", "https://app.example")
        .header("access-control-request-method", "POST")
        .send()
        .await
        .expect("preflight");
    assert!(r.headers().get("access-control-allow-origin").is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn weights_holding_nans_fail_requests_instead_of_answering_200() {
    let src = kiln_testkit::gguf(MODEL);
    let file = kiln_formats::GgufFile::open(&src).expect("open the model");
    let dir = tempfile::tempdir().expect("tempdir");
    let broken = dir.path().join("broken.gguf");
    let bad = "blk.3.attn_q.weight";
    kiln_testkit::gguf_copy::copy_replacing(&file, &broken, |info| {
        (info.name == bad).then(|| {
            let n = info.shape.iter().product::<u64>() as usize;
            kiln_testkit::gguf_copy::Replacement::F16(vec![f32::NAN; n])
        })
    })
    .expect("write the broken model");
    let server = ServerProcess::start(
        Path::new(env!("CARGO_BIN_EXE_kiln")),
        &["--model", broken.to_str().expect("utf-8 path")],
        Duration::from_secs(120),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let base = server.base_url();
    let body = json!({"model": "broken", "messages": [{"role": "user", "content": "Hi"}],
        "max_tokens": 4, "logprobs": true});
    let r = post_json(&format!("{base}/v1/chat/completions"), &body).await;
    assert_eq!(r.status(), 500);
    let v: Value = r.json().await.expect("json");
    assert_eq!(v["error"]["code"], "non_finite_logits", "{v}");

    let mut stream_body = body.clone();
    stream_body["stream"] = json!(true);
    let r = post_json(&format!("{base}/v1/chat/completions"), &stream_body).await;
    assert_eq!(r.status(), 200);
    let mut stream = Box::pin(r.bytes_stream());
    let events = read_events(&mut stream, &mut Vec::new(), usize::MAX).await;
    assert_eq!(
        events.last().map(String::as_str),
        Some("[DONE]"),
        "{events:?}"
    );
    let error = error_event(&events);
    assert_eq!(error["error"]["code"], "non_finite_logits");
    // No token was made from the NaNs.
    assert!(
        !events
            .iter()
            .any(|e| e.contains("\"content\":\"") && !e.contains("\"content\":\"\"")),
        "{events:?}"
    );
    assert!(model_metric(&base, "broken", "kiln:non_finite_logits_total").await >= 2.0);
    let log = server.log_tail();
    assert!(
        log.contains(bad),
        "the log does not name the bad tensor:\n{log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_running_at_the_shutdown_deadline_are_told_and_the_exit_is_non_zero() {
    let mut server = start(&[
        "--shutdown-timeout",
        "1",
        "--max-model-len",
        "2048",
        "--kv-cache-memory",
        "64MiB",
    ]);
    let base = server.base_url();
    let long = |stream: bool| {
        json!({"messages": [{"role": "user", "content": "Tell a long story"}],
            "max_tokens": 1900, "ignore_eos": true, "stream": stream})
    };
    let resp = fresh_client()
        .post(format!("{base}/v1/chat/completions"))
        .json(&long(true))
        .send()
        .await
        .expect("send");
    assert_eq!(resp.status(), 200);
    let mut stream = Box::pin(resp.bytes_stream());
    let mut buf = Vec::new();
    let mut events = read_events(&mut stream, &mut buf, 2).await;
    let waiting = tokio::spawn(
        fresh_client()
            .post(format!("{base}/v1/chat/completions"))
            .json(&long(false))
            .send(),
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    server.terminate().expect("SIGTERM");
    events.extend(read_events(&mut stream, &mut buf, usize::MAX).await);
    assert_eq!(
        events.last().map(String::as_str),
        Some("[DONE]"),
        "{events:?}"
    );
    let error = error_event(&events);
    assert_eq!(error["error"]["code"], "server_shutdown", "{error}");

    let r = waiting
        .await
        .expect("task")
        .expect("the non-streaming request got an answer");
    assert_eq!(r.status(), 503);
    let v: Value = r.json().await.expect("json");
    assert_eq!(v["error"]["code"], "server_shutdown", "{v}");

    let status = server
        .wait_exit(Duration::from_secs(30))
        .unwrap_or_else(|| panic!("no exit:\n{}", server.log_tail()));
    assert!(
        !status.success(),
        "cut requests must make the exit non-zero"
    );
}
