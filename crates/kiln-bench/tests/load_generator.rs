//! The load generator against an in-process fake OpenAI-compatible server whose token
//! counts and delays are known: latencies, token accounting, failures, the concurrency
//! cap, Poisson release and the exact request bodies.

mod common;

use std::sync::atomic::Ordering;
use std::time::Duration;

use common::fake_server::{FakeConfig, FakeServer};
use kiln_bench::{
    arrival_offsets, run, Endpoint, Error, FailureKind, LengthFilter, RunConfig, RunReport,
    Workload, WorkloadRequest, SAMPLER, WORKLOAD_FORMAT,
};

const FIRST: Duration = Duration::from_millis(40);
const GAP: Duration = Duration::from_millis(15);
/// Upper bounds are this many times the fake's delays plus a second: generous enough for
/// a loaded machine, tight enough to catch a client that waits for nothing.
const SLACK: f64 = 10.0;

fn workload(prompts: &[(&str, usize)]) -> Workload {
    Workload {
        format: WORKLOAD_FORMAT.to_owned(),
        dataset: "test".to_owned(),
        tokenizer: "words".to_owned(),
        seed: 0,
        sampler: SAMPLER.to_owned(),
        filter: LengthFilter::default(),
        requests: prompts
            .iter()
            .map(|&(p, n)| WorkloadRequest {
                prompt: p.to_owned(),
                prompt_tokens: p.split_whitespace().count(),
                output_tokens: n,
            })
            .collect(),
    }
}

async fn fake() -> FakeServer {
    let config = FakeConfig {
        first_token_delay: FIRST,
        token_delay: GAP,
    };
    FakeServer::start(config, 0)
        .await
        .expect("fake server binds")
}

fn config(server: &FakeServer) -> RunConfig {
    let mut c = RunConfig::new("fake", &server.base_url, "fake-model");
    c.progress = false;
    c.warmup = false;
    c
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

#[test]
fn latencies_tokens_and_failures_are_accounted() {
    rt().block_on(async {
        let server = fake().await;
        let w = workload(&[
            ("say one two three", 12),
            ("a [fail] prompt", 5),
            ("a [nodone] prompt", 6),
            ("two per chunk [pairs]", 7),
            ("an [error-event] here", 5),
            ("short", 1),
            ("llama.cpp [error-line] style", 5),
        ]);
        let report = run(&w, &config(&server)).await.expect("run completes");
        assert_eq!(report.completed, 3);
        assert_eq!(report.failed, 4);
        let r = &report.requests;
        assert_eq!(
            r.iter().map(|q| q.index).collect::<Vec<_>>(),
            (0..7).collect::<Vec<_>>()
        );

        // A normal request: 12 tokens, one per chunk, usage agrees.
        let ok = &r[0];
        assert!(ok.ok(), "{:?}", ok.error);
        assert_eq!(ok.usage_completion_tokens, Some(12));
        assert_eq!(ok.content_chunks, 12);
        assert_eq!(ok.output_tokens(), 12);
        assert_eq!(ok.usage_prompt_tokens, Some(4 + 5));
        assert_eq!(ok.itl_ms.len(), 11);
        let ttft = ok.ttft_ms.expect("ttft");
        assert!(
            ttft >= ms(FIRST) && ttft < ms(FIRST) * SLACK + 1000.0,
            "ttft {ttft}"
        );
        // The server spends FIRST + 11 GAPs on the stream, so the request can't end sooner;
        // the gaps fit between the first token and the end.
        let floor = ms(FIRST) + 11.0 * ms(GAP);
        assert!(
            ok.e2e_ms >= floor && ok.e2e_ms < floor * SLACK + 1000.0,
            "e2e {}",
            ok.e2e_ms
        );
        let itl_sum: f64 = ok.itl_ms.iter().sum();
        assert!(
            itl_sum > 0.0 && itl_sum <= ok.e2e_ms - ttft + 1e-6,
            "itl sum {itl_sum}"
        );
        let tpot = ok.tpot_ms().expect("tpot");
        assert!(
            (tpot - (ok.e2e_ms - ttft) / 11.0).abs() < 1e-9,
            "tpot {tpot}"
        );

        // HTTP 500: status and body kept, no tokens.
        assert_eq!(r[1].failure, Some(FailureKind::Status));
        let msg = r[1].error.as_deref().unwrap_or("");
        assert!(msg.contains("500") && msg.contains("fake failure"), "{msg}");
        assert_eq!(r[1].content_chunks, 0);

        // All six tokens arrived, but without [DONE] the request failed.
        assert_eq!(r[2].failure, Some(FailureKind::NoDone));
        assert_eq!(r[2].content_chunks, 6);

        // Two tokens per chunk: usage counts tokens, chunks are fewer, ITLs are per chunk.
        assert!(r[3].ok());
        assert_eq!(r[3].usage_completion_tokens, Some(7));
        assert_eq!(r[3].content_chunks, 4);
        assert_eq!(r[3].itl_ms.len(), 3);

        // An `error` object inside the stream.
        assert_eq!(r[4].failure, Some(FailureKind::StreamError));
        assert!(r[4]
            .error
            .as_deref()
            .unwrap_or("")
            .contains("fake stream error"));

        assert_eq!(r[6].failure, Some(FailureKind::StreamError));
        assert!(r[6]
            .error
            .as_deref()
            .unwrap_or("")
            .contains("fake error line"));

        // One token: a TTFT, no gaps, no TPOT.
        assert!(r[5].ok());
        assert!(r[5].itl_ms.is_empty() && r[5].tpot_ms().is_none());

        // Aggregates count the completed requests only.
        assert_eq!(report.total_output_tokens, 12 + 7 + 1);
        assert_eq!(report.total_input_tokens, 4 + 4 + 1);
        assert_eq!(report.server_prompt_tokens, Some(9 + 9 + 6));
        assert_eq!(report.chunk_count_mismatches, 1);
        assert_eq!(report.missing_usage, 0);
        assert_eq!(report.short_outputs, 0);
        assert_eq!(report.ttft_ms.expect("ttft").count, 3);
        assert_eq!(report.itl_ms.expect("itl").count, 11 + 3);
        let wall = report.wall_seconds;
        let slowest = r
            .iter()
            .filter(|q| q.ok())
            .map(|q| q.e2e_ms)
            .fold(0.0, f64::max);
        assert!(
            wall * 1e3 >= slowest,
            "wall {wall} s, slowest request {slowest} ms"
        );
        assert!((report.output_throughput - 20.0 / wall).abs() < 1e-9);
        assert!((report.request_throughput - 3.0 / wall).abs() < 1e-9);
        assert!((report.total_token_throughput - 29.0 / wall).abs() < 1e-9);
        assert!(report.server.is_none());
        assert!(report.table().contains("Failed requests:"));

        // The JSON round-trips (floats to the last bit or so).
        let text = serde_json::to_string(&report).expect("serialises");
        let back: RunReport = serde_json::from_str(&text).expect("parses");
        common::assert_json_close(&back, &report);
    });
}

#[test]
fn concurrency_cap_is_respected() {
    rt().block_on(async {
        let server = fake().await;
        let w = workload(&[("p", 6); 9]);
        let mut c = config(&server);
        c.max_concurrency = Some(3);
        let report = run(&w, &c).await.expect("run");
        assert_eq!(report.completed, 9);
        assert_eq!(server.state.max_in_flight.load(Ordering::SeqCst), 3);
        // Nine 6-token requests, three at a time: at least three rounds of work.
        let one = ms(FIRST) + 5.0 * ms(GAP);
        assert!(report.wall_seconds * 1e3 >= 3.0 * one * 0.95);

        // Without a cap all nine run at once.
        let before = server.state.generations.load(Ordering::SeqCst);
        server.state.max_in_flight.store(0, Ordering::SeqCst);
        let report = run(&w, &config(&server)).await.expect("run");
        assert_eq!(report.completed, 9);
        assert_eq!(server.state.generations.load(Ordering::SeqCst) - before, 9);
        assert_eq!(server.state.max_in_flight.load(Ordering::SeqCst), 9);
    });
}

#[test]
fn poisson_release_follows_the_seeded_schedule() {
    rt().block_on(async {
        let server = fake().await;
        let w = workload(&[("p", 2); 8]);
        let mut c = config(&server);
        c.request_rate = Some(40.0);
        c.seed = 5;
        let report = run(&w, &c).await.expect("run");
        assert_eq!(report.completed, 8);
        let offsets = arrival_offsets(8, Some(40.0), 5);
        for (rec, at) in report.requests.iter().zip(&offsets) {
            assert!(
                rec.sent_at_ms >= ms(*at),
                "sent at {} before {at:?}",
                rec.sent_at_ms
            );
        }
        assert!(report.wall_seconds >= offsets[7].as_secs_f64());
    });
}

#[test]
fn bodies_are_the_method_and_identical_across_runs() {
    rt().block_on(async {
        let server = fake().await;
        let w = workload(&[("hello there", 3), ("general kenobi", 4)]);
        let mut c = config(&server);
        c.max_concurrency = Some(1);
        run(&w, &c).await.expect("first run");
        run(&w, &c).await.expect("second run");
        let mut bodies = server.state.bodies.lock().expect("lock").clone();
        assert_eq!(bodies.len(), 4);
        let (first, second) = bodies.split_at_mut(2);
        first.sort();
        second.sort();
        assert_eq!(
            first, second,
            "two runs of one workload send the same bytes"
        );
        let hello = first
            .iter()
            .find(|b| b.windows(11).any(|w| w == b"hello there"))
            .expect("the first prompt was sent");
        let v: serde_json::Value = serde_json::from_slice(hello).expect("json");
        assert_eq!(v["stream"], true);
        assert_eq!(v["temperature"], 0.0);
        assert_eq!(v["ignore_eos"], true);
        assert_eq!(v["stream_options"]["include_usage"], true);
        assert_eq!(v["model"], "fake-model");
        assert_eq!(v["messages"][0]["role"], "user");
        assert_eq!(v["messages"][0]["content"], "hello there");
        assert_eq!(v["max_tokens"], 3);
    });
}

#[test]
fn completions_endpoint_and_warmup() {
    rt().block_on(async {
        let server = fake().await;
        let w = workload(&[("complete this", 5)]);
        let mut c = config(&server);
        c.endpoint = Endpoint::Completions;
        c.warmup = true;
        let report = run(&w, &c).await.expect("run");
        assert_eq!(report.completed, 1);
        assert_eq!(report.requests[0].content_chunks, 5);
        // The warm-up request went first and asked for at most 16 tokens.
        let bodies = server.state.bodies.lock().expect("lock").clone();
        assert_eq!(bodies.len(), 2);
        let warm: serde_json::Value = serde_json::from_slice(&bodies[0]).expect("json");
        assert_eq!(warm["prompt"], "complete this");
        assert_eq!(warm["max_tokens"], 5);

        // A failing warm-up stops the run before anything is measured.
        let bad = workload(&[("[fail]", 5)]);
        let err = run(&bad, &c).await.expect_err("warm-up fails");
        assert!(matches!(err, Error::Warmup { .. }), "{err}");
    });
}

#[test]
fn unreachable_server_fails_every_request() {
    rt().block_on(async {
        // Bind then drop a listener: its port is (almost certainly) closed now.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("free port")
            .port();
        let mut c = RunConfig::new("none", &format!("http://127.0.0.1:{port}"), "m");
        c.progress = false;
        c.warmup = false;
        let report = run(&workload(&[("p", 3), ("q", 3)]), &c)
            .await
            .expect("run ends");
        assert_eq!(report.failed, 2);
        assert!(report
            .requests
            .iter()
            .all(|r| r.failure == Some(FailureKind::Transport)));
        assert!(report.ttft_ms.is_none());
    });
}

#[test]
fn bad_options_are_errors() {
    rt().block_on(async {
        let w = workload(&[("p", 3)]);
        let mut c = RunConfig::new("x", "https://127.0.0.1:1", "m");
        assert!(matches!(run(&w, &c).await, Err(Error::BaseUrl { .. })));
        c.base_url = "127.0.0.1:8080".to_owned();
        assert!(matches!(run(&w, &c).await, Err(Error::BaseUrl { .. })));
        c.base_url = "http://127.0.0.1:1".to_owned();
        c.max_concurrency = Some(0);
        assert!(matches!(run(&w, &c).await, Err(Error::Option { .. })));
        c.max_concurrency = None;
        c.request_rate = Some(-1.0);
        assert!(matches!(run(&w, &c).await, Err(Error::Option { .. })));
    });
}
