//! The prompt firewall's counters, kept by the gate in front of the prompt routes and
//! rendered on `/metrics` under the classifier model's name.

use super::exposition::{header, histogram, sample};
use super::{Counter, Histogram};

const SCORE_BUCKETS: &[f64] = &[
    5.0, 10.0, 20.0, 30.0, 40.0, 50.0, 60.0, 70.0, 80.0, 90.0, 99.0,
];
const LATENCY_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// What the firewall counts.
pub struct FirewallMetrics {
    pub scores: Histogram,
    pub latency: Histogram,
    pub blocked_injection: Counter,
    pub blocked_pii: Counter,
}

impl Default for FirewallMetrics {
    fn default() -> Self {
        Self {
            scores: Histogram::new(SCORE_BUCKETS),
            latency: Histogram::new(LATENCY_BUCKETS),
            blocked_injection: Counter::default(),
            blocked_pii: Counter::default(),
        }
    }
}

/// The prompt firewall's families, labelled with its classifier's name.
pub fn render(out: &mut String, model: &str, m: &FirewallMetrics) {
    let score = "kiln:firewall_injection_score";
    header(
        out,
        score,
        "histogram",
        "Injection scores of scored prompts (1 riskiest, 99 safest).",
    );
    histogram(out, score, model, &m.scores);
    let latency = "kiln:firewall_latency_seconds";
    header(
        out,
        latency,
        "histogram",
        "Time to score a prompt's text, PII and injection.",
    );
    histogram(out, latency, model, &m.latency);
    let blocks = "kiln:firewall_blocks_total";
    header(
        out,
        blocks,
        "counter",
        "Prompts refused by the firewall, by reason.",
    );
    sample(
        out,
        blocks,
        model,
        &[("reason", "injection")],
        m.blocked_injection.get() as f64,
    );
    sample(
        out,
        blocks,
        model,
        &[("reason", "pii")],
        m.blocked_pii.get() as f64,
    );
}
