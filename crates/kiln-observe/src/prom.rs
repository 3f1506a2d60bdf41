//! The per-colo Prometheus series (`kiln_router:colo_*`, `kiln_router:model_confidence_*`),
//! kept from the events as they are recorded. Colos and models are already bounded
//! ([`crate::labels`]) when they get here, so the series are too.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Mutex;

use crate::event::Event;

/// Seconds.
const BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 80.0, 160.0,
];

#[derive(Debug, Default, Clone)]
struct Colo {
    requests: u64,
    errors: u64,
    cold_starts: u64,
    fallback_added_s: f64,
    neurons: f64,
    wasted_neurons: f64,
    tokens_in: u64,
    tokens_out: u64,
    latency: Vec<u64>,
    latency_sum: f64,
    ttft_sum: f64,
    ttft_count: u64,
}

/// A per-colo counter: name, help, and how to read it.
type Counter = (&'static str, &'static str, fn(&Colo) -> f64);

#[derive(Debug, Default)]
struct Series {
    colos: BTreeMap<String, Colo>,
    /// (from colo, reason) → count.
    fallbacks: BTreeMap<(String, String), u64>,
    /// model → (sum, count).
    confidence: BTreeMap<String, (f64, u64)>,
}

#[derive(Debug, Default)]
pub struct ColoSeries(Mutex<Series>);

impl ColoSeries {
    /// Counts `e`, whose colo, fallback colo and model are bounded labels.
    pub fn record(&self, e: &Event, colo: &str, from: Option<&str>, model: &str) {
        let mut s = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let c = s.colos.entry(colo.to_string()).or_default();
        c.requests += 1;
        c.errors += u64::from(e.is_error());
        c.cold_starts += u64::from(e.cold_start_ms.is_some());
        c.neurons += e.neurons.unwrap_or(0.0);
        c.wasted_neurons += e.wasted_neurons;
        c.tokens_in += e.tokens_in.unwrap_or(0);
        c.tokens_out += e.tokens_out.unwrap_or(0);
        let secs = e.latency_ms / 1000.0;
        c.latency.resize(BUCKETS.len() + 1, 0);
        let i = BUCKETS
            .iter()
            .position(|&b| secs <= b)
            .unwrap_or(BUCKETS.len());
        c.latency[i] += 1;
        c.latency_sum += secs;
        if let Some(t) = e.ttft_ms {
            c.ttft_sum += t / 1000.0;
            c.ttft_count += 1;
        }
        if let Some(f) = &e.fallback {
            c.fallback_added_s += f.added_ms / 1000.0;
            let key = (from.unwrap_or("none").to_string(), f.reason.clone());
            *s.fallbacks.entry(key).or_default() += 1;
        }
        if let Some(conf) = e.confidence {
            let m = s.confidence.entry(model.to_string()).or_default();
            m.0 += conf;
            m.1 += 1;
        }
    }

    /// The series in Prometheus' text format, appended to `out`.
    pub fn render(&self, out: &mut String) {
        let s = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let counters: [Counter; 8] = [
            (
                "colo_events_total",
                "Inference requests answered, by the colo that answered.",
                |c| c.requests as f64,
            ),
            (
                "colo_errors_total",
                "Inference requests that failed, by colo.",
                |c| c.errors as f64,
            ),
            (
                "colo_cold_starts_total",
                "Requests that waited for a model load, by colo.",
                |c| c.cold_starts as f64,
            ),
            (
                "colo_fallback_added_seconds_total",
                "Latency fallbacks added before going central, by the answering colo.",
                |c| c.fallback_added_s,
            ),
            (
                "colo_neurons_total",
                "Neurons the answering colo reported.",
                |c| c.neurons,
            ),
            (
                "colo_wasted_neurons_total",
                "Neurons spent on answers re-checked centrally.",
                |c| c.wasted_neurons,
            ),
            ("colo_prompt_tokens_total", "Prompt tokens, by colo.", |c| {
                c.tokens_in as f64
            }),
            (
                "colo_generation_tokens_total",
                "Generated tokens, by colo.",
                |c| c.tokens_out as f64,
            ),
        ];
        for (name, help, get) in counters {
            let _ = writeln!(
                out,
                "# HELP kiln_router:{name} {help}\n# TYPE kiln_router:{name} counter"
            );
            for (colo, c) in &s.colos {
                let _ = writeln!(out, "kiln_router:{name}{{colo=\"{colo}\"}} {}", get(c));
            }
        }
        let name = "kiln_router:colo_request_duration_seconds";
        let _ = writeln!(out, "# HELP {name} Arrival to last byte, by the colo that answered.\n# TYPE {name} histogram");
        for (colo, c) in &s.colos {
            let mut cum = 0;
            for (i, b) in BUCKETS.iter().enumerate() {
                cum += c.latency.get(i).copied().unwrap_or(0);
                let _ = writeln!(out, "{name}_bucket{{colo=\"{colo}\",le=\"{b}\"}} {cum}");
            }
            let _ = writeln!(
                out,
                "{name}_bucket{{colo=\"{colo}\",le=\"+Inf\"}} {}",
                c.requests
            );
            let _ = writeln!(out, "{name}_sum{{colo=\"{colo}\"}} {}", c.latency_sum);
            let _ = writeln!(out, "{name}_count{{colo=\"{colo}\"}} {}", c.requests);
        }
        let name = "kiln_router:colo_time_to_first_byte_seconds";
        let _ = writeln!(
            out,
            "# HELP {name} Arrival to first byte, by colo.\n# TYPE {name} summary"
        );
        for (colo, c) in &s.colos {
            let _ = writeln!(out, "{name}_sum{{colo=\"{colo}\"}} {}", c.ttft_sum);
            let _ = writeln!(out, "{name}_count{{colo=\"{colo}\"}} {}", c.ttft_count);
        }
        let name = "kiln_router:colo_fallbacks_total";
        let _ = writeln!(out, "# HELP {name} Requests sent central, by the colo first tried and why.\n# TYPE {name} counter");
        for ((colo, reason), n) in &s.fallbacks {
            let _ = writeln!(out, "{name}{{colo=\"{colo}\",reason=\"{reason}\"}} {n}");
        }
        let name = "kiln_router:model_confidence";
        let _ = writeln!(out, "# HELP {name} Top-class confidence of classifications, by model.\n# TYPE {name} summary");
        for (model, (sum, n)) in &s.confidence {
            let _ = writeln!(out, "{name}_sum{{model=\"{model}\"}} {sum}");
            let _ = writeln!(out, "{name}_count{{model=\"{model}\"}} {n}");
        }
    }
}
