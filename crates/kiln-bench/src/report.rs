//! A run's aggregates: throughput over the wall time, latency summaries, the server's
//! CPU and memory; printed as a table and saved as JSON.

use std::fmt::Write as _;
use std::fs;
use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::client::RequestRecord;
use crate::error::{Error, Result};
use crate::procfs::ServerUsage;
use crate::run::RunConfig;
use crate::stats::Summary;
use crate::wire::Endpoint;
use crate::workload::Workload;

/// Version tag of the run report JSON.
pub const REPORT_FORMAT: &str = "kiln-bench-run/1";

/// Where a run's requests came from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkloadInfo {
    pub dataset: String,
    pub tokenizer: String,
    pub seed: u64,
    pub num_prompts: usize,
}

/// Everything one run measured. Latencies are in milliseconds, throughputs per second of
/// wall time (from the release of the requests to the last completion).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunReport {
    /// Always [`REPORT_FORMAT`].
    pub format: String,
    pub label: String,
    pub base_url: String,
    pub endpoint: Endpoint,
    pub model: String,
    pub workload: WorkloadInfo,
    pub max_concurrency: Option<usize>,
    /// Poisson rate in requests/s; `None` when all were released at once.
    pub request_rate: Option<f64>,
    pub completed: usize,
    pub failed: usize,
    pub wall_seconds: f64,
    pub request_throughput: f64,
    pub output_throughput: f64,
    /// (Workload prompt tokens + output tokens) of the completed requests per second.
    pub total_token_throughput: f64,
    /// Workload prompt tokens (no chat template) of the completed requests.
    pub total_input_tokens: u64,
    pub total_output_tokens: u64,
    /// Sum of the server's `usage.prompt_tokens` (template included), when every
    /// completed request reported it.
    pub server_prompt_tokens: Option<u64>,
    /// Completed requests without `usage.completion_tokens` (counted by chunks instead).
    pub missing_usage: usize,
    /// Completed requests whose `usage.completion_tokens` differs from their number of
    /// content chunks (a server that sends several tokens per chunk shows up here).
    pub chunk_count_mismatches: usize,
    /// Completed requests that produced fewer tokens than asked (`ignore_eos` ignored?).
    pub short_outputs: usize,
    pub ttft_ms: Option<Summary>,
    /// Per request, `(e2e - ttft) / (output tokens - 1)`.
    pub tpot_ms: Option<Summary>,
    /// Gaps between content chunks, over all requests.
    pub itl_ms: Option<Summary>,
    pub e2e_ms: Option<Summary>,
    pub server: Option<ServerUsage>,
    /// Server CPU seconds per wall second (2.0 = two cores busy).
    pub server_cpu_utilization: Option<f64>,
    pub server_cpu_seconds_per_output_token: Option<f64>,
    /// The benchmark client's own CPU time during the run.
    pub client_cpu_seconds: Option<f64>,
    pub requests: Vec<RequestRecord>,
}

impl RunReport {
    /// Aggregates the records of a finished run.
    pub fn new(
        workload: &Workload,
        config: &RunConfig,
        base_url: &str,
        requests: Vec<RequestRecord>,
        wall: Duration,
        server: Option<ServerUsage>,
        client_cpu_seconds: Option<f64>,
    ) -> Self {
        let ok: Vec<&RequestRecord> = requests.iter().filter(|r| r.ok()).collect();
        let wall_seconds = wall.as_secs_f64();
        let per_second = |x: f64| {
            if wall_seconds > 0.0 {
                x / wall_seconds
            } else {
                0.0
            }
        };
        let total_input_tokens: u64 = ok.iter().map(|r| r.prompt_tokens as u64).sum();
        let total_output_tokens: u64 = ok.iter().map(|r| r.output_tokens()).sum();
        let server_prompt_tokens = ok.iter().map(|r| r.usage_prompt_tokens).sum();
        let collect = |f: &dyn Fn(&RequestRecord) -> Option<f64>| -> Vec<f64> {
            ok.iter().filter_map(|r| f(r)).collect()
        };
        let itl: Vec<f64> = ok.iter().flat_map(|r| r.itl_ms.iter().copied()).collect();
        let server_cpu = server.map(|s| s.cpu_seconds);
        RunReport {
            format: REPORT_FORMAT.to_owned(),
            label: config.label.clone(),
            base_url: base_url.to_owned(),
            endpoint: config.endpoint,
            model: config.model.clone(),
            workload: WorkloadInfo {
                dataset: workload.dataset.clone(),
                tokenizer: workload.tokenizer.clone(),
                seed: workload.seed,
                num_prompts: workload.requests.len(),
            },
            max_concurrency: config.max_concurrency,
            request_rate: config.request_rate,
            completed: ok.len(),
            failed: requests.len() - ok.len(),
            wall_seconds,
            request_throughput: per_second(ok.len() as f64),
            output_throughput: per_second(total_output_tokens as f64),
            total_token_throughput: per_second((total_input_tokens + total_output_tokens) as f64),
            total_input_tokens,
            total_output_tokens,
            server_prompt_tokens,
            missing_usage: ok
                .iter()
                .filter(|r| r.usage_completion_tokens.is_none())
                .count(),
            chunk_count_mismatches: ok
                .iter()
                .filter(|r| {
                    r.usage_completion_tokens
                        .is_some_and(|u| u != r.content_chunks as u64)
                })
                .count(),
            short_outputs: ok
                .iter()
                .filter(|r| r.output_tokens() < r.target_output_tokens as u64)
                .count(),
            ttft_ms: Summary::of(&collect(&|r| r.ttft_ms)),
            tpot_ms: Summary::of(&collect(&|r| r.tpot_ms())),
            itl_ms: Summary::of(&itl),
            e2e_ms: Summary::of(&collect(&|r| Some(r.e2e_ms))),
            server,
            server_cpu_utilization: server_cpu.map(per_second),
            server_cpu_seconds_per_output_token: server_cpu
                .filter(|_| total_output_tokens > 0)
                .map(|c| c / total_output_tokens as f64),
            client_cpu_seconds,
            requests,
        }
    }

    /// Writes the report as pretty JSON.
    pub fn save(&self, path: &Path) -> Result<()> {
        save_json(path, self)
    }

    /// Reads a report written by [`RunReport::save`].
    pub fn load(path: &Path) -> Result<Self> {
        let bytes = fs::read(path).map_err(Error::io(path))?;
        serde_json::from_slice(&bytes).map_err(|source| Error::Json {
            path: path.to_owned(),
            source,
        })
    }

    /// A human-readable table of the aggregates, in the layout of vLLM's benchmark.
    pub fn table(&self) -> String {
        let mut t = String::new();
        let mut row = |name: &str, value: String| {
            let line = if value.is_empty() {
                name.to_owned()
            } else {
                format!("{name:<36}{value:>20}")
            };
            let _ = writeln!(t, "{line}");
        };
        row("", String::new());
        let cap = self
            .max_concurrency
            .map_or("none".to_owned(), |c| c.to_string());
        let rate = self
            .request_rate
            .map_or("all at once".to_owned(), |r| format!("{r} req/s"));
        row(
            &format!("== {} ({}) ", self.label, self.base_url),
            String::new(),
        );
        row("Max concurrency:", cap);
        row("Release:", rate);
        row("Successful requests:", self.completed.to_string());
        row("Failed requests:", self.failed.to_string());
        row("Benchmark duration (s):", f2(self.wall_seconds));
        row("Total input tokens:", self.total_input_tokens.to_string());
        row(
            "Total generated tokens:",
            self.total_output_tokens.to_string(),
        );
        row("Request throughput (req/s):", f2(self.request_throughput));
        row(
            "Output token throughput (tok/s):",
            f2(self.output_throughput),
        );
        row(
            "Total token throughput (tok/s):",
            f2(self.total_token_throughput),
        );
        for (name, s) in [
            ("TTFT", &self.ttft_ms),
            ("TPOT", &self.tpot_ms),
            ("ITL", &self.itl_ms),
            ("E2E", &self.e2e_ms),
        ] {
            row(&format!("-- {name} (ms)"), String::new());
            match s {
                Some(s) => {
                    row("  mean:", f2(s.mean));
                    row(
                        "  p50 / p90 / p99:",
                        format!("{} / {} / {}", f1(s.p50), f1(s.p90), f1(s.p99)),
                    );
                }
                None => row("  (no samples)", String::new()),
            }
        }
        if let Some(s) = &self.server {
            row(&format!("-- Server process (pid {})", s.pid), String::new());
            row("  CPU time (s):", f2(s.cpu_seconds));
            row(
                "  CPU utilisation (cores):",
                self.server_cpu_utilization.map_or("-".to_owned(), f2),
            );
            row(
                "  CPU ms per output token:",
                self.server_cpu_seconds_per_output_token
                    .map_or("-".to_owned(), |c| f2(c * 1e3)),
            );
            row("  Peak RSS, VmHWM (MiB):", f1(mib(s.peak_rss_bytes)));
            row("  Max sampled RSS (MiB):", f1(mib(s.max_sampled_rss_bytes)));
        }
        if let Some(c) = self.client_cpu_seconds {
            row("Client CPU time (s):", f2(c));
        }
        if self.missing_usage + self.chunk_count_mismatches + self.short_outputs > 0 {
            row("Requests without usage:", self.missing_usage.to_string());
            row(
                "usage != content chunks:",
                self.chunk_count_mismatches.to_string(),
            );
            row("Shorter than max_tokens:", self.short_outputs.to_string());
        }
        for r in self.requests.iter().filter(|r| !r.ok()).take(5) {
            let _ = writeln!(
                t,
                "failed #{}: {}",
                r.index,
                r.error.as_deref().unwrap_or("unknown error")
            );
        }
        t
    }
}

/// Writes several runs (a sweep) as a pretty JSON array of [`RunReport`]s.
pub fn save_runs(path: &Path, runs: &[RunReport]) -> Result<()> {
    save_json(path, &runs)
}

/// Writes any serialisable value as pretty JSON with a trailing newline.
pub(crate) fn save_json<T: Serialize>(path: &Path, value: &T) -> Result<()> {
    let mut text = serde_json::to_vec_pretty(value).map_err(|source| Error::Json {
        path: path.to_owned(),
        source,
    })?;
    text.push(b'\n');
    fs::write(path, text).map_err(Error::io(path))
}

pub(crate) fn f1(x: f64) -> String {
    format!("{x:.1}")
}

pub(crate) fn f2(x: f64) -> String {
    format!("{x:.2}")
}

pub(crate) fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}
