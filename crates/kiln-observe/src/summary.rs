//! A window of rollups summed for the dashboard: one row per colo (latency percentiles,
//! fallbacks, cold starts), per model (cost per useful inference, confidence) and per
//! minute (the serving time series).

use std::collections::BTreeMap;

use serde::Serialize;

use crate::rollup::Rollup;

#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// The colo, model, or minute (as a string) this row sums.
    pub key: String,
    pub requests: u64,
    pub errors: u64,
    pub fallbacks: u64,
    pub fallback_added_ms: f64,
    pub cold_starts: u64,
    pub p50_ms: Option<f64>,
    pub p99_ms: Option<f64>,
    pub mean_ttft_ms: Option<f64>,
    pub tokens_in: u64,
    pub tokens_out: u64,
    pub neurons: f64,
    pub wasted_neurons: f64,
    pub useful_neurons_per_request: Option<f64>,
    pub mean_confidence: Option<f64>,
}

impl Row {
    fn of(key: String, r: &Rollup) -> Self {
        Self {
            key,
            requests: r.requests,
            errors: r.errors,
            fallbacks: r.fallbacks,
            fallback_added_ms: r.fallback_added_ms,
            cold_starts: r.cold_starts,
            p50_ms: r.latency_quantile(0.5),
            p99_ms: r.latency_quantile(0.99),
            mean_ttft_ms: (r.ttft_count > 0).then(|| r.ttft_ms_sum / r.ttft_count as f64),
            tokens_in: r.tokens_in,
            tokens_out: r.tokens_out,
            neurons: r.neurons,
            wasted_neurons: r.wasted_neurons,
            useful_neurons_per_request: r.useful_neurons_per_request(),
            mean_confidence: r.mean_confidence(),
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    pub colos: Vec<Row>,
    pub models: Vec<Row>,
    pub minutes: Vec<Row>,
}

fn rows(rollups: &[Rollup], key: impl Fn(&Rollup) -> String) -> Vec<Row> {
    let mut sums: BTreeMap<String, Rollup> = BTreeMap::new();
    for r in rollups {
        sums.entry(key(r))
            .or_insert_with(|| Rollup::new(r.minute, &r.colo, &r.model))
            .merge(r);
    }
    sums.into_iter().map(|(k, r)| Row::of(k, &r)).collect()
}

pub fn summarize(rollups: &[Rollup]) -> Summary {
    Summary {
        colos: rows(rollups, |r| r.colo.clone()),
        models: rows(rollups, |r| r.model.clone()),
        // Zero-padded, so the string order is the time order.
        minutes: rows(rollups, |r| format!("{:012}", r.minute)),
    }
}
