//! The router's Prometheus metrics (`kiln_router:` names): per node and per colo
//! request counts, latency histograms, retries, ejections, stream errors, warm rate
//! (from the nodes' `x-kiln-warm` header), affinity hit rate, fallbacks, and the routing
//! rules' decisions and reloads.
//!
//! A few atomics per series, like the server's registry; per-node series are kept by
//! node id for the process's life, so a node that leaves and comes back keeps counting
//! from where it was (counters never go backwards), and only present nodes are shown.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Most `(rule, route)` series; past it (tables reloaded under ever new names), new
/// rules are counted as `other`, so reloads cannot grow the series without end.
const MAX_RULE_SERIES: usize = 512;

/// Seconds; first byte spans queueing and prefill, so it reaches minutes.
const LATENCY_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 80.0, 160.0, 320.0,
    640.0,
];

#[derive(Debug, Default)]
pub struct Counter(AtomicU64);

impl Counter {
    pub fn inc(&self) {
        self.0.fetch_add(1, Relaxed);
    }

    pub fn get(&self) -> u64 {
        self.0.load(Relaxed)
    }
}

/// Fixed buckets; the sum is kept in microseconds so it stays an integer atomic.
#[derive(Debug)]
pub struct Histogram {
    /// Per-bucket (not cumulative) counts; the last is `+Inf`.
    counts: Box<[AtomicU64]>,
    sum_us: AtomicU64,
}

impl Default for Histogram {
    fn default() -> Self {
        Self {
            counts: (0..=LATENCY_BUCKETS.len())
                .map(|_| AtomicU64::new(0))
                .collect(),
            sum_us: AtomicU64::new(0),
        }
    }
}

impl Histogram {
    pub fn observe(&self, d: Duration) {
        let secs = d.as_secs_f64();
        let i = LATENCY_BUCKETS
            .iter()
            .position(|&b| secs <= b)
            .unwrap_or(LATENCY_BUCKETS.len());
        self.counts[i].fetch_add(1, Relaxed);
        self.sum_us
            .fetch_add(u64::try_from(d.as_micros()).unwrap_or(u64::MAX), Relaxed);
    }

    pub fn count(&self) -> u64 {
        self.counts.iter().map(|c| c.load(Relaxed)).sum()
    }
}

/// What the router measures about one node (or the upstream).
#[derive(Debug, Default)]
pub struct NodeMetrics {
    /// Responses this node gave that went back to a client.
    pub requests: Counter,
    /// Attempts on this node that failed and went elsewhere.
    pub retries: Counter,
    pub ejections: Counter,
    /// Streams that broke after their first byte (an SSE error event went out).
    pub stream_errors: Counter,
    pub warm: Counter,
    pub cold: Counter,
    pub first_byte: Histogram,
    pub duration: Histogram,
}

/// Router-wide series.
#[derive(Debug, Default)]
pub struct Metrics {
    nodes: Mutex<BTreeMap<String, Arc<NodeMetrics>>>,
    colos: Mutex<BTreeMap<String, Arc<Counter>>>,
    fallbacks: Mutex<BTreeMap<&'static str, u64>>,
    pub affinity_requests: Counter,
    pub affinity_hits: Counter,
    /// `(rule, route)` → requests the rule decided.
    rule_requests: Mutex<BTreeMap<(String, &'static str), u64>>,
    /// Rules in the table in force.
    pub rules: AtomicU64,
    /// Rule tables read from a changed config file and put in force.
    pub config_reloads: Counter,
    /// Changed config files whose rules could not be read or checked (the old stay).
    pub config_reload_errors: Counter,
}

/// A node's gauges at scrape time.
pub struct NodeGauges<'a> {
    pub id: &'a str,
    pub colo: &'a str,
    pub up: bool,
    pub in_flight: usize,
    pub placements: usize,
}

impl Metrics {
    /// The series of node `id` (created on first use).
    pub fn node(&self, id: &str) -> Arc<NodeMetrics> {
        let mut nodes = self.nodes.lock().unwrap_or_else(|p| p.into_inner());
        nodes.entry(id.to_string()).or_default().clone()
    }

    /// Counts one response served from `colo`.
    pub fn colo_request(&self, colo: &str) {
        let counter = {
            let mut colos = self.colos.lock().unwrap_or_else(|p| p.into_inner());
            colos.entry(colo.to_string()).or_default().clone()
        };
        counter.inc();
    }

    /// Counts one request sent to the upstream, by why.
    pub fn fallback(&self, reason: &'static str) {
        let mut f = self.fallbacks.lock().unwrap_or_else(|p| p.into_inner());
        *f.entry(reason).or_default() += 1;
    }

    /// Counts one request decided by rule `name` (`route`: `central` or `edge`).
    pub fn rule_request(&self, name: &str, route: &'static str) {
        let mut r = self.rule_requests.lock().unwrap_or_else(|p| p.into_inner());
        let key = (name.to_string(), route);
        let key = if r.contains_key(&key) || r.len() < MAX_RULE_SERIES {
            key
        } else {
            (kiln_observe::labels::OTHER.to_string(), route)
        };
        *r.entry(key).or_default() += 1;
    }

    /// Warm responses / responses that said, over every node.
    pub fn warm_rate(&self) -> Option<f64> {
        let nodes = self.nodes.lock().unwrap_or_else(|p| p.into_inner());
        let (warm, cold) = nodes
            .values()
            .fold((0, 0), |(w, c), m| (w + m.warm.get(), c + m.cold.get()));
        (warm + cold > 0).then(|| warm as f64 / (warm + cold) as f64)
    }

    /// Renders the text format for the nodes present now (`nodes`) plus the upstream.
    pub fn render(&self, nodes: &[NodeGauges<'_>], upstream: bool) -> String {
        let mut out = String::with_capacity(8 * 1024);
        let mut shown: Vec<(String, String, Arc<NodeMetrics>)> = nodes
            .iter()
            .map(|n| (n.id.to_string(), n.colo.to_string(), self.node(n.id)))
            .collect();
        if upstream {
            shown.push(("upstream".into(), "upstream".into(), self.node("upstream")));
        }
        let counter = |out: &mut String, name: &str, help: &str, f: fn(&NodeMetrics) -> u64| {
            header(out, name, help, "counter");
            for (id, colo, m) in &shown {
                let _ = writeln!(out, "{name}{} {}", node_labels(id, colo), f(m));
            }
        };
        counter(
            &mut out,
            "kiln_router:requests_total",
            "Responses returned to clients, by the node that gave them.",
            |m| m.requests.get(),
        );
        counter(
            &mut out,
            "kiln_router:retries_total",
            "Attempts on a node that failed before the first byte and were retried elsewhere.",
            |m| m.retries.get(),
        );
        counter(
            &mut out,
            "kiln_router:ejections_total",
            "Times a node was taken out of rotation (failed request or health check).",
            |m| m.ejections.get(),
        );
        counter(
            &mut out,
            "kiln_router:stream_errors_total",
            "Streams that failed after their first byte and ended with an SSE error event.",
            |m| m.stream_errors.get(),
        );
        counter(
            &mut out,
            "kiln_router:warm_requests_total",
            "Responses from a node that already had the model loaded (x-kiln-warm: true).",
            |m| m.warm.get(),
        );
        counter(
            &mut out,
            "kiln_router:cold_requests_total",
            "Responses from a node that had to load the model first (x-kiln-warm: false).",
            |m| m.cold.get(),
        );
        for (name, help, pick) in [
            (
                "kiln_router:time_to_first_byte_seconds",
                "From the router sending a request to the node's first response byte.",
                (|m: &NodeMetrics| &m.first_byte) as fn(&NodeMetrics) -> &Histogram,
            ),
            (
                "kiln_router:request_duration_seconds",
                "From the router receiving a request to the end of its response.",
                |m: &NodeMetrics| &m.duration,
            ),
        ] {
            header(&mut out, name, help, "histogram");
            for (id, colo, m) in &shown {
                histogram(&mut out, name, id, colo, pick(m));
            }
        }

        header(
            &mut out,
            "kiln_router:colo_requests_total",
            "Responses returned to clients, by the colo of the node that gave them.",
            "counter",
        );
        for (colo, c) in self.colos.lock().unwrap_or_else(|p| p.into_inner()).iter() {
            let _ = writeln!(
                out,
                "kiln_router:colo_requests_total{{colo=\"{}\"}} {}",
                escape(colo),
                c.get()
            );
        }
        header(
            &mut out,
            "kiln_router:fallback_requests_total",
            "Requests sent to the upstream, by reason.",
            "counter",
        );
        let fallbacks = self.fallbacks.lock().map(|f| f.clone()).unwrap_or_default();
        for reason in [
            "unknown_model",
            "context_length",
            "overloaded",
            "unavailable",
            "low_confidence",
            "rule",
        ] {
            let n = fallbacks.get(reason).copied().unwrap_or(0);
            let _ = writeln!(
                out,
                "kiln_router:fallback_requests_total{{reason=\"{reason}\"}} {n}"
            );
        }
        header(
            &mut out,
            "kiln_router:rule_requests_total",
            "Inference requests a routing rule decided, by rule and route.",
            "counter",
        );
        let rules = self
            .rule_requests
            .lock()
            .map(|r| r.clone())
            .unwrap_or_default();
        for ((rule, route), n) in &rules {
            let _ = writeln!(
                out,
                "kiln_router:rule_requests_total{{rule=\"{}\",route=\"{route}\"}} {n}",
                escape(rule)
            );
        }
        for (name, help, value) in [
            (
                "kiln_router:config_reloads_total",
                "Routing rule tables read from a changed config file and put in force.",
                self.config_reloads.get(),
            ),
            (
                "kiln_router:config_reload_errors_total",
                "Changed config files whose rules were refused (the rules in force stay).",
                self.config_reload_errors.get(),
            ),
            (
                "kiln_router:affinity_requests_total",
                "Requests that carried a session key (x-session-affinity or `user`).",
                self.affinity_requests.get(),
            ),
            (
                "kiln_router:affinity_hits_total",
                "Session requests served by their session's preferred node.",
                self.affinity_hits.get(),
            ),
        ] {
            header(&mut out, name, help, "counter");
            let _ = writeln!(out, "{name} {value}");
        }
        let affinity = self.affinity_requests.get();
        let rates = [
            (
                "kiln_router:warm_rate",
                "Share of responses (that said) served by a node with the model already loaded.",
                self.warm_rate().unwrap_or(0.0),
            ),
            (
                "kiln_router:affinity_hit_rate",
                "Share of session requests served by their preferred node.",
                if affinity == 0 {
                    0.0
                } else {
                    self.affinity_hits.get() as f64 / affinity as f64
                },
            ),
        ];
        for (name, help, value) in rates {
            header(&mut out, name, help, "gauge");
            let _ = writeln!(out, "{name} {value}");
        }
        header(
            &mut out,
            "kiln_router:rules",
            "Routing rules in force.",
            "gauge",
        );
        let _ = writeln!(out, "kiln_router:rules {}", self.rules.load(Relaxed));
        for (name, help, f) in [
            (
                "kiln_router:node_up",
                "1 if the node takes requests now (healthy, not ejected, not overloaded).",
                (|n: &NodeGauges<'_>| usize::from(n.up)) as fn(&NodeGauges<'_>) -> usize,
            ),
            (
                "kiln_router:node_in_flight",
                "Requests the router has open on the node.",
                |n: &NodeGauges<'_>| n.in_flight,
            ),
            (
                "kiln_router:node_placements",
                "Models whose shard includes the node.",
                |n: &NodeGauges<'_>| n.placements,
            ),
        ] {
            header(&mut out, name, help, "gauge");
            for n in nodes {
                let _ = writeln!(out, "{name}{} {}", node_labels(n.id, n.colo), f(n));
            }
        }
        out
    }
}

fn header(out: &mut String, name: &str, help: &str, kind: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

fn node_labels(id: &str, colo: &str) -> String {
    format!("{{node=\"{}\",colo=\"{}\"}}", escape(id), escape(colo))
}

fn histogram(out: &mut String, name: &str, id: &str, colo: &str, h: &Histogram) {
    let labels = format!("node=\"{}\",colo=\"{}\"", escape(id), escape(colo));
    let mut cumulative = 0;
    for (i, bound) in LATENCY_BUCKETS.iter().enumerate() {
        cumulative += h.counts[i].load(Relaxed);
        let _ = writeln!(out, "{name}_bucket{{{labels},le=\"{bound}\"}} {cumulative}");
    }
    let total = h.count();
    let _ = writeln!(out, "{name}_bucket{{{labels},le=\"+Inf\"}} {total}");
    let sum = h.sum_us.load(Relaxed) as f64 / 1e6;
    let _ = writeln!(out, "{name}_sum{{{labels}}} {sum}");
    let _ = writeln!(out, "{name}_count{{{labels}}} {total}");
}

/// Label values escape `\`, `"` and newlines.
fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_node_colo_and_rate_series() {
        let m = Metrics::default();
        let a = m.node("a");
        a.requests.inc();
        a.warm.inc();
        a.warm.inc();
        a.cold.inc();
        a.duration.observe(Duration::from_millis(30));
        m.colo_request("ams");
        m.fallback("overloaded");
        m.affinity_requests.inc();
        m.affinity_hits.inc();
        m.rule_request("long-prompts", "central");
        m.config_reload_errors.inc();
        let text = m.render(
            &[NodeGauges {
                id: "a",
                colo: "ams",
                up: true,
                in_flight: 2,
                placements: 3,
            }],
            true,
        );
        for line in [
            "kiln_router:requests_total{node=\"a\",colo=\"ams\"} 1",
            "kiln_router:requests_total{node=\"upstream\",colo=\"upstream\"} 0",
            "kiln_router:colo_requests_total{colo=\"ams\"} 1",
            "kiln_router:request_duration_seconds_bucket{node=\"a\",colo=\"ams\",le=\"0.05\"} 1",
            "kiln_router:request_duration_seconds_bucket{node=\"a\",colo=\"ams\",le=\"0.025\"} 0",
            "kiln_router:fallback_requests_total{reason=\"overloaded\"} 1",
            "kiln_router:fallback_requests_total{reason=\"unknown_model\"} 0",
            "kiln_router:affinity_hit_rate 1",
            "kiln_router:fallback_requests_total{reason=\"rule\"} 0",
            "kiln_router:rule_requests_total{rule=\"long-prompts\",route=\"central\"} 1",
            "kiln_router:config_reload_errors_total 1",
            "kiln_router:config_reloads_total 0",
            "kiln_router:node_in_flight{node=\"a\",colo=\"ams\"} 2",
        ] {
            assert!(text.contains(line), "missing {line} in\n{text}");
        }
        let warm = m.warm_rate().expect("rate");
        assert!((warm - 2.0 / 3.0).abs() < 1e-9);
    }

    #[test]
    fn rule_series_are_bounded() {
        let m = Metrics::default();
        for i in 0..MAX_RULE_SERIES + 5 {
            m.rule_request(&format!("r{i}"), "edge");
        }
        m.rule_request("r0", "edge");
        let r = m.rule_requests.lock().expect("lock");
        assert_eq!(r.len(), MAX_RULE_SERIES + 1);
        assert_eq!(r[&("other".to_string(), "edge")], 5);
        assert_eq!(r[&("r0".to_string(), "edge")], 2);
    }

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(escape("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }
}
