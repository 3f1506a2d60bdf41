//! Side-by-side results: B/A ratios of every metric, and Markdown tables of sweeps.

use std::fmt::Write as _;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::report::{f2, mib, save_json, RunReport};
use crate::stats::Summary;

/// Version tag of the comparison JSON.
pub const COMPARE_FORMAT: &str = "kiln-bench-compare/1";

/// One metric of two runs and their ratio.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MetricRatio {
    pub metric: String,
    pub a: Option<f64>,
    pub b: Option<f64>,
    /// `b / a`; `None` when either is missing or `a` is 0.
    pub ratio: Option<f64>,
}

/// The two runs at one concurrency.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ComparedPair {
    pub max_concurrency: Option<usize>,
    pub a: RunReport,
    pub b: RunReport,
    pub ratios: Vec<MetricRatio>,
}

/// A whole comparison (one or more concurrencies), as saved to JSON.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Comparison {
    /// Always [`COMPARE_FORMAT`].
    pub format: String,
    pub a_label: String,
    pub b_label: String,
    pub pairs: Vec<ComparedPair>,
}

/// Every scalar metric of a run, by name (latencies in ms, memory in bytes).
pub fn metrics(r: &RunReport) -> Vec<(String, Option<f64>)> {
    let mut m: Vec<(String, Option<f64>)> = vec![
        ("request_throughput".into(), Some(r.request_throughput)),
        ("output_throughput".into(), Some(r.output_throughput)),
        (
            "total_token_throughput".into(),
            Some(r.total_token_throughput),
        ),
        ("wall_seconds".into(), Some(r.wall_seconds)),
        ("completed".into(), Some(r.completed as f64)),
        ("failed".into(), Some(r.failed as f64)),
        (
            "total_output_tokens".into(),
            Some(r.total_output_tokens as f64),
        ),
    ];
    for (name, s) in [
        ("ttft_ms", &r.ttft_ms),
        ("tpot_ms", &r.tpot_ms),
        ("itl_ms", &r.itl_ms),
        ("e2e_ms", &r.e2e_ms),
    ] {
        let get = |f: fn(&Summary) -> f64| s.as_ref().map(f);
        m.push((format!("{name}.mean"), get(|s| s.mean)));
        m.push((format!("{name}.p50"), get(|s| s.p50)));
        m.push((format!("{name}.p90"), get(|s| s.p90)));
        m.push((format!("{name}.p99"), get(|s| s.p99)));
    }
    m.push(("server.cpu_seconds".into(), r.server.map(|s| s.cpu_seconds)));
    m.push(("server.cpu_utilization".into(), r.server_cpu_utilization));
    m.push((
        "server.cpu_seconds_per_output_token".into(),
        r.server_cpu_seconds_per_output_token,
    ));
    m.push((
        "server.peak_rss_bytes".into(),
        r.server.map(|s| s.peak_rss_bytes as f64),
    ));
    m.push((
        "server.max_sampled_rss_bytes".into(),
        r.server.map(|s| s.max_sampled_rss_bytes as f64),
    ));
    m
}

/// B/A for every metric of [`metrics`].
pub fn ratios(a: &RunReport, b: &RunReport) -> Vec<MetricRatio> {
    metrics(a)
        .into_iter()
        .zip(metrics(b))
        .map(|((metric, a), (_, b))| MetricRatio {
            metric,
            a,
            b,
            ratio: match (a, b) {
                (Some(a), Some(b)) if a != 0.0 => Some(b / a),
                _ => None,
            },
        })
        .collect()
}

impl Comparison {
    /// Pairs up runs of A and B made at the same concurrencies, in order.
    pub fn new(a_runs: Vec<RunReport>, b_runs: Vec<RunReport>) -> Self {
        let a_label = a_runs
            .first()
            .map_or_else(|| "A".to_owned(), |r| r.label.clone());
        let b_label = b_runs
            .first()
            .map_or_else(|| "B".to_owned(), |r| r.label.clone());
        let pairs = a_runs
            .into_iter()
            .zip(b_runs)
            .map(|(a, b)| ComparedPair {
                max_concurrency: a.max_concurrency,
                ratios: ratios(&a, &b),
                a,
                b,
            })
            .collect();
        Comparison {
            format: COMPARE_FORMAT.to_owned(),
            a_label,
            b_label,
            pairs,
        }
    }

    pub fn save(&self, path: &Path) -> Result<()> {
        save_json(path, self)
    }

    /// Plain-text tables of every metric and its ratio, one per concurrency.
    pub fn ratio_text(&self) -> String {
        let mut t = String::new();
        for p in &self.pairs {
            let _ = writeln!(
                t,
                "\n== {} vs {} at concurrency {} (ratio = B/A)",
                self.b_label,
                self.a_label,
                cap(p.max_concurrency)
            );
            let _ = writeln!(
                t,
                "{:<38}{:>16}{:>16}{:>10}",
                "metric",
                format!("A: {}", self.a_label),
                format!("B: {}", self.b_label),
                "B/A"
            );
            for r in &p.ratios {
                let v = |x: Option<f64>| x.map_or("-".to_owned(), number);
                let ratio = r.ratio.map_or("-".to_owned(), |x| format!("{x:.3}"));
                let _ = writeln!(
                    t,
                    "{:<38}{:>16}{:>16}{:>10}",
                    r.metric,
                    v(r.a),
                    v(r.b),
                    ratio
                );
            }
        }
        t
    }

    /// A Markdown table in the layout of docs/BENCHMARKS.md: a row per server and
    /// concurrency, and a B/A row under each pair.
    pub fn markdown(&self) -> String {
        let mut t = String::new();
        t.push_str(
            "| concurrency | server | req/s | output tok/s | TTFT p50 / p99 | ITL p50 / p99 | server CPU | CPU ms / token | peak RSS | failed |\n",
        );
        t.push_str("|---|---|---|---|---|---|---|---|---|---|\n");
        for p in &self.pairs {
            for r in [&p.a, &p.b] {
                let _ = writeln!(t, "{}", markdown_row(r));
            }
            let ratio = |name: &str| {
                p.ratios
                    .iter()
                    .find(|m| m.metric == name)
                    .and_then(|m| m.ratio)
                    .map_or("-".to_owned(), |x| format!("{x:.2}×"))
            };
            let _ = writeln!(
                t,
                "| {} | **{} / {}** | {} | {} | {} / {} | {} / {} | {} | {} | {} | |",
                cap(p.max_concurrency),
                self.b_label,
                self.a_label,
                ratio("request_throughput"),
                ratio("output_throughput"),
                ratio("ttft_ms.p50"),
                ratio("ttft_ms.p99"),
                ratio("itl_ms.p50"),
                ratio("itl_ms.p99"),
                ratio("server.cpu_utilization"),
                ratio("server.cpu_seconds_per_output_token"),
                ratio("server.peak_rss_bytes"),
            );
        }
        t
    }
}

/// One run as a Markdown table row (the columns of [`Comparison::markdown`]).
pub fn markdown_row(r: &RunReport) -> String {
    let lat = |s: &Option<Summary>, f: fn(&Summary) -> f64| {
        s.as_ref().map_or("-".to_owned(), |s| latency(f(s)))
    };
    format!(
        "| {} | {} | {} | {:.0} | {} / {} | {} / {} | {} | {} | {} | {} |",
        cap(r.max_concurrency),
        r.label,
        f2(r.request_throughput),
        r.output_throughput,
        lat(&r.ttft_ms, |s| s.p50),
        lat(&r.ttft_ms, |s| s.p99),
        lat(&r.itl_ms, |s| s.p50),
        lat(&r.itl_ms, |s| s.p99),
        r.server_cpu_utilization
            .map_or("-".to_owned(), |u| format!("{:.0}%", u * 100.0)),
        r.server_cpu_seconds_per_output_token
            .map_or("-".to_owned(), |c| format!("{:.2}", c * 1e3)),
        r.server
            .map_or("-".to_owned(), |s| memory(s.peak_rss_bytes)),
        r.failed,
    )
}

/// A Markdown table of runs of one server (e.g. a `serve` sweep).
pub fn markdown_runs(runs: &[RunReport]) -> String {
    let mut t = String::from(
        "| concurrency | server | req/s | output tok/s | TTFT p50 / p99 | ITL p50 / p99 | server CPU | CPU ms / token | peak RSS | failed |\n|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for r in runs {
        let _ = writeln!(t, "{}", markdown_row(r));
    }
    t
}

/// Three decimals, or three significant digits for small values (seconds per token).
fn number(x: f64) -> String {
    if x != 0.0 && x.abs() < 0.1 {
        format!("{x:.3e}")
    } else {
        format!("{x:.3}")
    }
}

fn cap(c: Option<usize>) -> String {
    c.map_or("∞".to_owned(), |c| c.to_string())
}

fn latency(ms: f64) -> String {
    if ms >= 1000.0 {
        format!("{:.2} s", ms / 1000.0)
    } else if ms >= 10.0 {
        format!("{ms:.0} ms")
    } else {
        format!("{ms:.1} ms")
    }
}

fn memory(bytes: u64) -> String {
    let m = mib(bytes);
    if m >= 1024.0 {
        format!("{:.2} GiB", m / 1024.0)
    } else {
        format!("{m:.0} MiB")
    }
}
