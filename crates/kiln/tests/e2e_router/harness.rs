//! Helpers for the router's end-to-end tests: real `kiln serve` nodes and a real
//! `kiln route` process on loopback, requests that record which node answered, and
//! Prometheus text lookups.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use kiln_testkit::server::ServerProcess;
use serde_json::Value;

pub const SMOLLM2: &str = "smollm2-135m-instruct";
pub const GEMMA3: &str = "gemma3-270m";
pub const QWEN: &str = "qwen2.5-coder-0.5b-instruct";

/// The tests start several processes each on a 2-core machine: one test at a time.
static SERIAL: Mutex<()> = Mutex::new(());

/// Runs `test` on its own runtime, after any other test of this file has finished.
pub fn serially<F: std::future::Future>(test: F) -> F::Output {
    let _one_at_a_time: MutexGuard<'_, ()> = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime")
        .block_on(test)
}

fn bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_kiln"))
}

/// Starts a `kiln serve` node serving `models` (small KV cache) with `args` added.
pub fn node(models: &[&str], args: &[&str]) -> ServerProcess {
    let mut all: Vec<&str> = Vec::new();
    for m in models {
        all.extend(["--model", m]);
    }
    all.extend(["--kv-cache-memory", "64MiB"]);
    all.extend(args);
    node_with_args(models, &all)
}

/// Starts `kiln serve <args>` (after fetching `models`, a no-op when cached, so the
/// node starts at once).
pub fn node_with_args(models: &[&str], args: &[&str]) -> ServerProcess {
    for m in models {
        kiln_testkit::model_dir(m);
    }
    ServerProcess::start(bin(), args, Duration::from_secs(120)).unwrap_or_else(|e| panic!("{e}"))
}

/// A `kiln route` process on a free loopback port; killed on drop.
pub struct Router {
    child: Child,
    port: u16,
    log: Arc<Mutex<Vec<String>>>,
}

impl Router {
    /// Starts `kiln route --host 127.0.0.1 --port 0 <args>` and waits until `/ready`.
    pub async fn start(args: &[String]) -> Router {
        let mut child = Command::new(bin())
            .args(["route", "--host", "127.0.0.1", "--port", "0"])
            .args(args)
            .env("RUST_LOG", "warn,kiln_router=info")
            .env_remove("KILN_ROUTER_API_KEY")
            .env_remove("KILN_NODE_API_KEY")
            .env_remove("KILN_UPSTREAM_API_KEY")
            .env_remove("KILN_LOG_FORMAT")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start kiln route: {e}"));
        let log = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = mpsc::channel();
        if let Some(stderr) = child.stderr.take() {
            let log = log.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                    eprintln!("[kiln route] {line}");
                    if let Some(rest) = line.split("listening on http://").nth(1) {
                        let port = rest
                            .split_whitespace()
                            .next()
                            .and_then(|a| a.rsplit(':').next())
                            .and_then(|p| p.parse::<u16>().ok());
                        if let Some(p) = port {
                            let _ = tx.send(p);
                        }
                    }
                    if let Ok(mut l) = log.lock() {
                        l.push(line);
                    }
                }
            });
        }
        let port = rx
            .recv_timeout(Duration::from_secs(60))
            .unwrap_or_else(|e| panic!("kiln route did not start listening: {e}"));
        let router = Router { child, port, log };
        let start = Instant::now();
        loop {
            if let Ok(r) = client().get(format!("{}/ready", router.url())).send().await {
                if r.status() == 200 {
                    return router;
                }
            }
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "router not ready:\n{}",
                router.log_tail()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn log_tail(&self) -> String {
        let l = self.log.lock().map(|l| l.clone()).unwrap_or_default();
        l[l.len().saturating_sub(40)..].join("\n")
    }

    pub async fn nodes(&self) -> Value {
        get_json(&format!("{}/nodes", self.url())).await
    }

    /// The inference events the router keeps (up to 1,000, newest last).
    pub async fn events(&self) -> Vec<Value> {
        let v = get_json(&format!(
            "{}/v1/observability/events?limit=1000",
            self.url()
        ))
        .await;
        v["data"].as_array().cloned().unwrap_or_default()
    }

    pub async fn metrics(&self) -> String {
        client()
            .get(format!("{}/metrics", self.url()))
            .send()
            .await
            .expect("GET /metrics")
            .text()
            .await
            .expect("metrics body")
    }
}

impl Drop for Router {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(300))
        .build()
        .expect("http client")
}

pub async fn get_json(url: &str) -> Value {
    client()
        .get(url)
        .send()
        .await
        .unwrap_or_else(|e| panic!("GET {url}: {e}"))
        .json()
        .await
        .unwrap_or_else(|e| panic!("GET {url}: body: {e}"))
}

/// `(model, shard node ids)` from a router's `/nodes`.
pub fn shards(nodes: &Value) -> Vec<(String, Vec<String>)> {
    nodes["models"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|m| {
            let shard = m["shard"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|n| n.as_str().map(str::to_string))
                .collect();
            (m["model"].as_str().unwrap_or_default().to_string(), shard)
        })
        .collect()
}

/// The value of one series (exact name and labels) in Prometheus text; 0 if absent.
pub fn metric(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| {
            l.strip_prefix(series)
                .and_then(|v| v.strip_prefix(' '))
                .and_then(|v| v.trim().parse().ok())
        })
        .unwrap_or(0.0)
}

/// What one request got back.
#[derive(Debug, Clone, Default)]
pub struct Reply {
    pub status: u16,
    /// `x-kiln-node`
    pub node: String,
    /// `x-kiln-warm`
    pub warm: Option<bool>,
    /// SSE `data:` payloads, or the whole JSON body as one entry.
    pub events: Vec<String>,
}

impl Reply {
    /// The `error` object of an SSE error event, if one came.
    pub fn error_event(&self) -> Option<Value> {
        self.events.iter().find_map(|e| {
            serde_json::from_str::<Value>(e)
                .ok()
                .and_then(|v| v.get("error").cloned())
        })
    }

    pub fn done(&self) -> bool {
        self.events.last().map(String::as_str) == Some("[DONE]")
    }

    pub fn json(&self) -> Value {
        self.events
            .first()
            .and_then(|e| serde_json::from_str(e).ok())
            .unwrap_or(Value::Null)
    }
}

/// POSTs `body` to `url` (with `headers`) and reads the whole reply. `on_event` sees
/// the number of SSE events so far as they arrive.
pub async fn post(
    url: &str,
    body: &Value,
    headers: &[(&str, &str)],
    on_event: impl Fn(&str, usize),
) -> Reply {
    let mut req = client().post(url).json(body);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = req
        .send()
        .await
        .unwrap_or_else(|e| panic!("POST {url}: {e}"));
    let header = |name: &str| {
        resp.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    let mut reply = Reply {
        status: resp.status().as_u16(),
        node: header("x-kiln-node").unwrap_or_default(),
        warm: header("x-kiln-warm").map(|v| v == "true"),
        events: Vec::new(),
    };
    let sse = header("content-type").is_some_and(|c| c.starts_with("text/event-stream"));
    let mut stream = resp.bytes_stream();
    let mut buf: Vec<u8> = Vec::new();
    while let Some(chunk) = stream.next().await {
        buf.extend_from_slice(&chunk.unwrap_or_else(|e| panic!("{url}: body broke: {e}")));
        if !sse {
            continue;
        }
        while let Some(i) = buf.windows(2).position(|w| w == b"\n\n") {
            let ev: Vec<u8> = buf.drain(..i + 2).collect();
            let ev = String::from_utf8_lossy(&ev);
            reply
                .events
                .push(ev.trim_end().trim_start_matches("data: ").to_string());
            on_event(&reply.node, reply.events.len());
        }
    }
    if !sse {
        reply
            .events
            .push(String::from_utf8_lossy(&buf).into_owned());
    } else {
        assert!(
            buf.iter().all(u8::is_ascii_whitespace),
            "{url}: the stream ended inside an event: {:?}",
            String::from_utf8_lossy(&buf)
        );
    }
    reply
}

/// Polls `check` every 100 ms until it returns `Some`, for at most `limit`.
pub async fn wait_for<T, F: std::future::Future<Output = Option<T>>>(
    what: &str,
    limit: Duration,
    mut check: impl FnMut() -> F,
) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(start.elapsed() < limit, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A small deterministic generator (xorshift64*), for reproducible random choices.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed.max(1))
    }

    pub fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 33) as usize % n
    }
}
