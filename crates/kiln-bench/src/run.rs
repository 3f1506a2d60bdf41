//! The load generator: releases a workload's requests (all at once or at a Poisson rate)
//! behind a concurrency cap and collects what each one measured.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use rand_chacha::rand_core::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde_json::{Map, Value};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use crate::client::{FailureKind, HttpClient, PreparedRequest, RequestRecord};
use crate::error::{Error, Result};
use crate::procfs::{self, ProcessSampler};
use crate::report::RunReport;
use crate::wire::{self, Endpoint};
use crate::workload::Workload;

/// Output tokens asked of the warm-up request.
const WARMUP_TOKENS: usize = 16;
/// ChaCha stream of the arrival times (stream 0 is left to the workload's shuffle).
const ARRIVAL_STREAM: u64 = 1;

/// How to run one benchmark against one server.
#[derive(Debug, Clone)]
pub struct RunConfig {
    /// A name for this run in tables and plots (e.g. `kiln` or `llama.cpp`).
    pub label: String,
    /// `http://host:port` of the server.
    pub base_url: String,
    /// The `model` field of every request.
    pub model: String,
    pub endpoint: Endpoint,
    /// Requests in flight at most; `None` for no cap.
    pub max_concurrency: Option<usize>,
    /// Poisson arrival rate in requests per second; `None` releases all at once.
    pub request_rate: Option<f64>,
    /// Seed of the arrival times.
    pub seed: u64,
    /// The server's process, to read its CPU time and memory from `/proc`.
    pub server_pid: Option<u32>,
    /// Keys added to every request body.
    pub extra_body: Map<String, Value>,
    /// Sent as `Authorization: Bearer ...` when set.
    pub api_key: Option<String>,
    /// A request still streaming after this long is failed.
    pub request_timeout: Option<Duration>,
    /// Send one short unmeasured request first (and fail the run if it fails).
    pub warmup: bool,
    /// Draw a progress bar on stderr (hidden anyway when stderr is not a terminal).
    pub progress: bool,
}

impl RunConfig {
    /// A configuration with the method's defaults: chat endpoint, no cap, all released
    /// at once, seed 0, warm-up on, progress bar on.
    pub fn new(label: &str, base_url: &str, model: &str) -> Self {
        RunConfig {
            label: label.to_owned(),
            base_url: base_url.to_owned(),
            model: model.to_owned(),
            endpoint: Endpoint::Chat,
            max_concurrency: None,
            request_rate: None,
            seed: 0,
            server_pid: None,
            extra_body: Map::new(),
            api_key: None,
            request_timeout: None,
            warmup: true,
            progress: true,
        }
    }

    fn validate(&self) -> Result<()> {
        if self.max_concurrency == Some(0) {
            return Err(Error::Option {
                option: "max-concurrency",
                reason: "must be at least 1".to_owned(),
            });
        }
        if let Some(r) = self.request_rate {
            if !(r.is_finite() && r > 0.0) {
                return Err(Error::Option {
                    option: "request-rate",
                    reason: format!("{r} is not a positive rate"),
                });
            }
        }
        Ok(())
    }
}

/// Builds a single-threaded runtime (the client should take as little CPU from the
/// server as it can) and runs `fut` on it.
pub fn block_on<F: std::future::Future>(fut: F) -> Result<F::Output> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(Error::Runtime)?;
    Ok(rt.block_on(fut))
}

/// Runs `workload` against the server `config` names and aggregates the results.
pub async fn run(workload: &Workload, config: &RunConfig) -> Result<RunReport> {
    config.validate()?;
    let client = HttpClient::new(&config.base_url, config.api_key.clone())?;
    let path = config.endpoint.path();
    let prepared: Vec<Arc<PreparedRequest>> = workload
        .requests
        .iter()
        .enumerate()
        .map(|(index, r)| {
            Arc::new(PreparedRequest {
                index,
                prompt_tokens: r.prompt_tokens,
                target_output_tokens: r.output_tokens,
                body: Bytes::from(wire::request_body(
                    config.endpoint,
                    &config.model,
                    r,
                    r.output_tokens,
                    &config.extra_body,
                )),
            })
        })
        .collect();
    if config.warmup {
        warm_up(&client, workload, config).await?;
    }
    let arrivals = arrival_offsets(prepared.len(), config.request_rate, config.seed);
    let semaphore = config.max_concurrency.map(|c| Arc::new(Semaphore::new(c)));
    let bar = progress_bar(prepared.len(), config);
    let client_cpu_before = procfs::cpu_ticks(std::process::id()).ok();
    let sampler = config.server_pid.map(ProcessSampler::start).transpose()?;

    let release = Instant::now();
    let mut tasks = JoinSet::new();
    for (req, offset) in prepared.into_iter().zip(arrivals) {
        let client = client.clone();
        let semaphore = semaphore.clone();
        let timeout = config.request_timeout;
        tasks.spawn(async move {
            tokio::time::sleep_until((release + offset).into()).await;
            let _permit = match &semaphore {
                Some(s) => s.clone().acquire_owned().await.ok(),
                None => None,
            };
            let record = client.send(path, &req, release, timeout).await;
            (record, Instant::now())
        });
    }
    let mut records = Vec::with_capacity(workload.requests.len());
    let mut last_end = release;
    let mut failed = 0usize;
    while let Some(joined) = tasks.join_next().await {
        let (record, ended) = joined.unwrap_or_else(|e| (panicked_record(&e), Instant::now()));
        last_end = last_end.max(ended);
        bar.inc(1);
        if !record.ok() {
            failed += 1;
            bar.set_message(format!("{failed} failed"));
        }
        records.push(record);
    }
    let wall = last_end - release;
    let server = sampler.map(ProcessSampler::finish).transpose()?;
    let client_cpu_seconds = client_cpu_before.and_then(|before| {
        let after = procfs::cpu_ticks(std::process::id()).ok()?;
        let ticks = after.total().saturating_sub(before.total());
        Some(ticks as f64 / procfs::clock_ticks_per_second() as f64)
    });
    bar.finish_and_clear();
    records.sort_by_key(|r| r.index);
    Ok(RunReport::new(
        workload,
        config,
        client.base(),
        records,
        wall,
        server,
        client_cpu_seconds,
    ))
}

/// A record for a request whose task died (it can't: the task doesn't panic; but the
/// join error must still be accounted for rather than dropped).
fn panicked_record(e: &tokio::task::JoinError) -> RequestRecord {
    RequestRecord {
        index: usize::MAX,
        prompt_tokens: 0,
        target_output_tokens: 0,
        sent_at_ms: 0.0,
        ttft_ms: None,
        itl_ms: Vec::new(),
        e2e_ms: 0.0,
        content_chunks: 0,
        usage_prompt_tokens: None,
        usage_completion_tokens: None,
        failure: Some(FailureKind::Transport),
        error: Some(format!("request task failed: {e}")),
    }
}

async fn warm_up(client: &HttpClient, workload: &Workload, config: &RunConfig) -> Result<()> {
    let Some(first) = workload.requests.first() else {
        return Ok(());
    };
    let tokens = first.output_tokens.min(WARMUP_TOKENS);
    let req = PreparedRequest {
        index: 0,
        prompt_tokens: first.prompt_tokens,
        target_output_tokens: tokens,
        body: Bytes::from(wire::request_body(
            config.endpoint,
            &config.model,
            first,
            tokens,
            &config.extra_body,
        )),
    };
    let record = client
        .send(
            config.endpoint.path(),
            &req,
            Instant::now(),
            config.request_timeout,
        )
        .await;
    match record.error {
        Some(err) => Err(Error::Warmup {
            url: client.base().to_owned(),
            message: err,
        }),
        None => Ok(()),
    }
}

/// When each request is released, relative to the start: all at 0 without a rate, else
/// cumulative exponential gaps (a Poisson process) drawn from the seeded stream.
pub fn arrival_offsets(n: usize, rate: Option<f64>, seed: u64) -> Vec<Duration> {
    let Some(rate) = rate.filter(|r| r.is_finite() && *r > 0.0) else {
        return vec![Duration::ZERO; n];
    };
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    rng.set_stream(ARRIVAL_STREAM);
    let mut t = 0.0f64;
    (0..n)
        .map(|_| {
            // Uniform in [0, 1) from the top 53 bits; 1 - u is in (0, 1], so ln is finite.
            let u = (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
            t += -(1.0 - u).ln() / rate;
            Duration::from_secs_f64(t)
        })
        .collect()
}

fn progress_bar(n: usize, config: &RunConfig) -> ProgressBar {
    if !config.progress {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::with_draw_target(Some(n as u64), ProgressDrawTarget::stderr());
    let style = ProgressStyle::with_template(
        "{prefix:.bold} {wide_bar:.cyan/blue} {pos}/{len} requests {elapsed_precise} {msg}",
    )
    .unwrap_or_else(|_| ProgressStyle::default_bar())
    .progress_chars("=> ");
    bar.set_style(style);
    let cap = config
        .max_concurrency
        .map_or("unlimited".to_owned(), |c| c.to_string());
    bar.set_prefix(format!("{} c={cap}", config.label));
    bar
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arrivals_are_seeded_poisson() {
        assert_eq!(arrival_offsets(3, None, 0), vec![Duration::ZERO; 3]);
        let a = arrival_offsets(20_000, Some(4.0), 9);
        assert_eq!(a, arrival_offsets(20_000, Some(4.0), 9));
        assert!(a.windows(2).all(|w| w[0] <= w[1]));
        // Mean gap of an exponential with rate 4 is 0.25 s; 20k draws land within 3%.
        let mean = a[a.len() - 1].as_secs_f64() / a.len() as f64;
        assert!((mean - 0.25).abs() < 0.25 * 0.03, "mean gap {mean}");
    }
}
