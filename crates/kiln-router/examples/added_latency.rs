//! The router's added latency with inference events on (issue 34's target: under 1 ms
//! p99 at 500 req/s): the same open-loop load sent straight to a node and through the
//! router, in alternated rounds, and the percentiles of each.
//!
//! The node is a stand-in that answers `POST /v1/chat/completions` at once with an
//! OpenAI body (with `usage`) and the headers the router reads from nodes (colo,
//! neurons, warm); it also answers the router's health, load and catalogue checks. The
//! router is the real one ([`kiln_router::serve`], on its own runtime as `kiln route`
//! runs it), events on (the default) over a data dir, so its SQLite store is flushed
//! every second as in production.
//!
//! Load is open-loop: request `i` is due at `start + i / rate`, sent from a thread that
//! sleeps until then, and its latency counts from that due time, so a stall delays
//! every request behind it instead of hiding them (no coordinated omission).
//!
//! `cargo run --release -p kiln-router --example added_latency [SECONDS] [ROUNDS] [RATE] [store|memory]`
//! (defaults: 25 s per phase, 2 rounds of direct then via-router, 500 req/s, `store`;
//! `memory` runs the router without a data dir, to see what the store costs; the
//! router's runtime has a worker per core, as in `kiln route`, unless told how many)

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::{get, post};
use axum::{Json, Router};
use kiln_router::{NodeSpec, RouterConfig, SystemResolver};
use serde_json::{json, Value};
use tokio::net::TcpListener;
use tokio::runtime::{Builder, Runtime};

const MODEL: &str = "fake-model";
/// Discarded at the start of every phase (connections open, caches warm).
const WARMUP: Duration = Duration::from_secs(2);

async fn chat() -> impl IntoResponse {
    let body = json!({
        "id": "chatcmpl-bench", "object": "chat.completion", "created": 0, "model": MODEL,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"},
                     "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 9, "completion_tokens": 1, "total_tokens": 10},
    });
    let headers = [
        ("x-kiln-colo", "ams"),
        ("x-kiln-neurons", "0.0123"),
        ("x-kiln-warm", "true"),
    ];
    (headers, Json(body))
}

fn node_app() -> Router {
    let models =
        json!({"object": "list", "data": [{"id": MODEL, "object": "model", "ready": true}]});
    let metrics = format!(
        "kiln:num_requests_running{{model_name=\"{MODEL}\"}} 0\n\
         kiln:num_requests_waiting{{model_name=\"{MODEL}\"}} 0\n\
         kiln:kv_cache_usage_perc{{model_name=\"{MODEL}\"}} 0.01\n"
    );
    Router::new()
        .route("/health", get(|| async { Json(json!({"status": "ok"})) }))
        .route("/ready", get(|| async { Json(json!({"status": "ready"})) }))
        .route("/metrics", get(move || async move { metrics }))
        .route("/v1/models", get(move || async move { Json(models) }))
        .route("/v1/chat/completions", post(chat))
}

fn runtime(name: &str, workers: Option<usize>) -> Runtime {
    let mut b = Builder::new_multi_thread();
    if let Some(n) = workers {
        b.worker_threads(n);
    }
    b.enable_all()
        .thread_name(name)
        .build()
        .expect("a tokio runtime")
}

/// Sends `rate` requests a second to `url` for `warmup + secs`; returns the measured
/// requests' latencies (ms, from their due time) and the failures.
fn open_loop(
    client: &reqwest::Client,
    rt: &Runtime,
    url: &str,
    rate: f64,
    secs: f64,
) -> (Vec<f64>, usize) {
    let body =
        json!({"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1})
            .to_string();
    let period = Duration::from_secs_f64(1.0 / rate);
    let total = ((WARMUP.as_secs_f64() + secs) * rate) as u32;
    let warm = (WARMUP.as_secs_f64() * rate) as u32;
    let start = Instant::now() + Duration::from_millis(10);
    let mut tasks = Vec::with_capacity(total as usize);
    for i in 0..total {
        let due = start + period * i;
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        let req = client
            .post(url)
            .header(header::CONTENT_TYPE, "application/json")
            .body(body.clone());
        tasks.push(rt.spawn(async move {
            let ok = match req.send().await {
                Ok(r) => r.status().is_success() && r.bytes().await.is_ok(),
                Err(_) => false,
            };
            (ok, due.elapsed().as_secs_f64() * 1e3)
        }));
    }
    let (mut took, mut failed) = (Vec::new(), 0);
    for (i, t) in tasks.into_iter().enumerate() {
        let (ok, ms) = rt.block_on(t).expect("a request task");
        failed += usize::from(!ok);
        if i as u32 >= warm {
            took.push(ms);
        }
    }
    (took, failed)
}

struct Quantiles([f64; 4]);

impl Quantiles {
    fn of(mut v: Vec<f64>) -> Self {
        v.sort_by(f64::total_cmp);
        let q = |p: f64| v[((v.len() as f64 * p) as usize).min(v.len() - 1)];
        Self([q(0.5), q(0.9), q(0.99), v[v.len() - 1]])
    }

    fn show(&self) -> String {
        let [p50, p90, p99, max] = self.0;
        format!("p50 {p50:.3}  p90 {p90:.3}  p99 {p99:.3}  max {max:.3} ms")
    }
}

/// The real router, on a runtime of its own with a worker per core (as `kiln route`
/// runs it), in front of the node.
struct Routed {
    rt: Runtime,
    url: String,
    stop: tokio::sync::oneshot::Sender<()>,
    served: tokio::task::JoinHandle<kiln_router::Result<()>>,
}

impl Routed {
    fn start(
        node: &str,
        data_dir: Option<PathBuf>,
        client: &reqwest::Client,
        on: &Runtime,
        workers: Option<usize>,
    ) -> Self {
        let rt = runtime("router", workers);
        let listener = rt
            .block_on(TcpListener::bind("127.0.0.1:0"))
            .expect("a port");
        let url = format!("http://{}", listener.local_addr().expect("its address"));
        let config = RouterConfig {
            nodes: vec![NodeSpec::parse(&format!("{node}@name=n1,colo=ams")).expect("a node")],
            data_dir,
            ..RouterConfig::default()
        };
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let shutdown = async move {
            let _ = stopped.await;
        };
        let served = rt.spawn(kiln_router::serve(
            listener,
            config,
            SystemResolver,
            shutdown,
        ));
        // Until it has checked the node and placed its model.
        let models = format!("{url}/v1/models");
        let placed = || {
            on.block_on(async {
                let v: Value = client.get(&models).send().await.ok()?.json().await.ok()?;
                Some(v["data"].as_array()?.iter().any(|m| m["id"] == MODEL))
            })
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while placed() != Some(true) {
            assert!(Instant::now() < deadline, "the router never placed {MODEL}");
            std::thread::sleep(Duration::from_millis(100));
        }
        Self {
            rt,
            url,
            stop,
            served,
        }
    }

    /// Stops it; says what its store holds: the requests its rollups counted (read back
    /// from SQLite after a flush) and the data dir's size.
    fn stop(self, client: &reqwest::Client, on: &Runtime, dir: &Path) -> String {
        let rollups = format!("{}/v1/observability/rollups?minutes=60", self.url);
        let counted = on.block_on(async {
            let v: Value = client.get(&rollups).send().await.ok()?.json().await.ok()?;
            let rows = v["data"].as_array()?;
            Some(
                rows.iter()
                    .filter_map(|r| r["requests"].as_u64())
                    .sum::<u64>(),
            )
        });
        let _ = self.stop.send(());
        let _ = self.rt.block_on(self.served);
        self.rt.shutdown_timeout(Duration::from_secs(1));
        let bytes: u64 = std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .filter_map(|f| f.ok()?.metadata().ok())
            .map(|m| m.len())
            .sum();
        format!("requests in the store's rollups: {counted:?}; data dir {bytes} bytes")
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let arg = |i: usize, d: f64| {
        std::env::args()
            .nth(i)
            .and_then(|s| s.parse().ok())
            .unwrap_or(d)
    };
    let (secs, rounds, rate) = (arg(1, 25.0), arg(2, 2.0) as usize, arg(3, 500.0));
    let mode = std::env::args().nth(4).unwrap_or_else(|| "store".into());
    let workers = std::env::args().nth(5).and_then(|s| s.parse().ok());

    // The node, the router and the client each on a runtime of their own, as three
    // processes would be; the router's with a worker per core, like `kiln route`.
    let node_rt = runtime("node", Some(1));
    let node = node_rt.block_on(TcpListener::bind("127.0.0.1:0"))?;
    let node_url = format!("http://{}", node.local_addr()?);
    node_rt.spawn(async move { axum::serve(node, node_app()).await });

    let client_rt = runtime("client", Some(1));
    let client = reqwest::Client::builder().tcp_nodelay(true).build()?;
    let data = tempfile::tempdir()?;
    let store = (mode != "memory").then(|| data.path().to_path_buf());

    println!("{rate} req/s open-loop, {secs} s per phase (+{WARMUP:?} warm-up), {rounds} rounds, events: {mode}, router workers: {}", workers.map_or("one per core".to_string(), |n: usize| n.to_string()));
    let mut all: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    for round in 1..=rounds {
        for (k, name) in ["direct", "router"].into_iter().enumerate() {
            // The router runs only in its own phases (restarted on the same data dir),
            // so the direct ones see nothing of it.
            let router = (k == 1)
                .then(|| Routed::start(&node_url, store.clone(), &client, &client_rt, workers));
            let base = router.as_ref().map_or(&node_url, |r| &r.url);
            let url = format!("{base}/v1/chat/completions");
            let (took, failed) = open_loop(&client, &client_rt, &url, rate, secs);
            let n = took.len();
            all[k].extend_from_slice(&took);
            println!(
                "round {round} {name:<6} n={n} failed={failed}  {}",
                Quantiles::of(took).show()
            );
            if let Some(r) = router {
                println!("             {}", r.stop(&client, &client_rt, data.path()));
            }
        }
    }

    let [direct, via] = all.map(Quantiles::of);
    println!("all    direct  {}", direct.show());
    println!("all    router  {}", via.show());
    let d: Vec<String> = (0..4)
        .map(|i| format!("{:+.3}", via.0[i] - direct.0[i]))
        .collect();
    println!(
        "added  p50 {}  p90 {}  p99 {}  max {} ms",
        d[0], d[1], d[2], d[3]
    );

    Ok(())
}
