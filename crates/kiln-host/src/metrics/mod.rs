//! What hosting measures per model: counters and fixed-bucket histograms, a handful of
//! atomics each, so nothing on the hot path takes a lock. [`exposition`] renders them with
//! the engine's own counters in Prometheus' text format for the server's `/metrics`.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use kiln_engine::FinishReason;

pub mod exposition;
pub mod firewall;
mod kv_disk;

/// Latency buckets in seconds (the same spans vLLM uses, so dashboards carry over).
const TTFT_BUCKETS: &[f64] = &[
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0, 160.0, 640.0,
];
const ITL_BUCKETS: &[f64] = &[
    0.001, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0,
    10.0, 20.0, 40.0, 80.0,
];
const REQUEST_BUCKETS: &[f64] = &[
    0.01, 0.05, 0.1, 0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0,
    60.0, 120.0, 240.0, 480.0, 960.0, 1920.0,
];
/// Model load times in seconds.
const LOAD_BUCKETS: &[f64] = &[
    0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 80.0, 160.0, 320.0,
];

#[derive(Default)]
pub struct Counter(AtomicU64);

impl Counter {
    pub fn add(&self, n: u64) {
        self.0.fetch_add(n, Relaxed);
    }

    pub fn get(&self) -> u64 {
        self.0.load(Relaxed)
    }
}

/// Fixed buckets; the sum is kept in nanoseconds so it stays an integer atomic.
pub struct Histogram {
    bounds: &'static [f64],
    /// Per-bucket (not cumulative) counts; the last is `+Inf`.
    counts: Box<[AtomicU64]>,
    sum_ns: AtomicU64,
}

impl Histogram {
    /// Buckets with these upper bounds (seconds, or whatever unit values are in).
    pub fn new(bounds: &'static [f64]) -> Self {
        Self {
            bounds,
            counts: (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect(),
            sum_ns: AtomicU64::new(0),
        }
    }

    pub fn observe(&self, d: Duration) {
        let secs = d.as_secs_f64();
        let i = self
            .bounds
            .iter()
            .position(|&b| secs <= b)
            .unwrap_or(self.bounds.len());
        self.counts[i].fetch_add(1, Relaxed);
        self.sum_ns
            .fetch_add(d.as_nanos().min(u64::MAX as u128) as u64, Relaxed);
    }

    /// Records a value in the unit of the bounds (a score, not a duration); the sum is
    /// kept in billionths, as durations are in nanoseconds.
    pub fn observe_value(&self, v: f64) {
        let i = self
            .bounds
            .iter()
            .position(|&b| v <= b)
            .unwrap_or(self.bounds.len());
        self.counts[i].fetch_add(1, Relaxed);
        self.sum_ns
            .fetch_add((v.max(0.0) * 1e9).min(u64::MAX as f64) as u64, Relaxed);
    }

    pub fn count(&self) -> u64 {
        self.counts.iter().map(|c| c.load(Relaxed)).sum()
    }

    /// Upper bounds in seconds, one per bucket but the last (`+Inf`).
    pub fn bounds(&self) -> &'static [f64] {
        self.bounds
    }

    /// Per-bucket (not cumulative) counts, `bounds().len() + 1` of them.
    pub fn bucket_counts(&self) -> impl Iterator<Item = u64> + '_ {
        self.counts.iter().map(|c| c.load(Relaxed))
    }

    /// Sum of the observed durations, in seconds.
    pub fn sum_seconds(&self) -> f64 {
        self.sum_ns.load(Relaxed) as f64 / 1e9
    }
}

/// What hosting measures for one model (the engine keeps its own counters).
pub struct ModelMetrics {
    pub prompt_tokens: Counter,
    pub success_stop: Counter,
    pub success_length: Counter,
    pub success_abort: Counter,
    /// Sequences ended because the model's logits held a NaN or an infinity.
    pub non_finite: Counter,
    pub rejected_queue_full: Counter,
    pub rejected_busy: Counter,
    /// Requests whose model was loaded when they arrived, and those that waited for it.
    pub requests_warm: Counter,
    pub requests_cold: Counter,
    /// Times the model was unloaded to make room for another.
    pub unloads: Counter,
    pub load_failures: Counter,
    /// LoRA adapters loaded for the model (a reload after eviction counts again).
    pub adapter_loads: Counter,
    pub model_load: Histogram,
    pub time_to_first_token: Histogram,
    pub inter_token_latency: Histogram,
    pub e2e_request_latency: Histogram,
    pub request_queue_time: Histogram,
    pub request_prefill_time: Histogram,
    pub request_decode_time: Histogram,
}

impl Default for ModelMetrics {
    fn default() -> Self {
        Self {
            prompt_tokens: Counter::default(),
            success_stop: Counter::default(),
            success_length: Counter::default(),
            success_abort: Counter::default(),
            non_finite: Counter::default(),
            rejected_queue_full: Counter::default(),
            rejected_busy: Counter::default(),
            requests_warm: Counter::default(),
            requests_cold: Counter::default(),
            unloads: Counter::default(),
            load_failures: Counter::default(),
            adapter_loads: Counter::default(),
            model_load: Histogram::new(LOAD_BUCKETS),
            time_to_first_token: Histogram::new(TTFT_BUCKETS),
            inter_token_latency: Histogram::new(ITL_BUCKETS),
            e2e_request_latency: Histogram::new(REQUEST_BUCKETS),
            request_queue_time: Histogram::new(REQUEST_BUCKETS),
            request_prefill_time: Histogram::new(REQUEST_BUCKETS),
            request_decode_time: Histogram::new(REQUEST_BUCKETS),
        }
    }
}

impl ModelMetrics {
    pub fn finished(&self, reason: FinishReason) {
        match reason {
            FinishReason::Stop => self.success_stop.add(1),
            FinishReason::Length => self.success_length.add(1),
            FinishReason::Abort => self.success_abort.add(1),
            FinishReason::NonFinite => self.non_finite.add(1),
        }
    }
}
