//! Per-minute aggregates of one colo × model. Every field adds up, so minutes merge
//! into any window (an hour, a day) and percentiles come from the merged histogram.

use serde::{Deserialize, Serialize};

use crate::event::Event;

/// Latency histogram buckets: bucket `i` holds latencies up to `GROWTH^i` ms (1 ms to
/// about 24 minutes in 36 steps of 1.5×), so a percentile is within 1.5× of the truth.
pub const BUCKETS: usize = 36;
const GROWTH: f64 = 1.5;

fn bucket_of(ms: f64) -> usize {
    if ms <= 1.0 || !ms.is_finite() {
        return 0;
    }
    ((ms.ln() / GROWTH.ln()).ceil() as usize).min(BUCKETS - 1)
}

/// Upper bound of bucket `i`, in ms.
pub fn bucket_upper(i: usize) -> f64 {
    GROWTH.powi(i as i32)
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Rollup {
    pub minute: i64,
    pub colo: String,
    pub model: String,
    pub requests: u64,
    pub errors: u64,
    pub fallbacks: u64,
    /// Sum of the latency fallbacks added.
    pub fallback_added_ms: f64,
    pub cold_starts: u64,
    pub latency_ms_sum: f64,
    /// Per-bucket (not cumulative) counts of latency.
    pub latency_hist: Vec<u64>,
    pub ttft_ms_sum: f64,
    pub ttft_count: u64,
    pub tokens_in: u64,
    pub tokens_out: u64,
    pub neurons: f64,
    pub wasted_neurons: f64,
    pub confidence_sum: f64,
    pub confidence_count: u64,
}

impl Rollup {
    pub fn new(minute: i64, colo: &str, model: &str) -> Self {
        Self {
            minute,
            colo: colo.to_string(),
            model: model.to_string(),
            requests: 0,
            errors: 0,
            fallbacks: 0,
            fallback_added_ms: 0.0,
            cold_starts: 0,
            latency_ms_sum: 0.0,
            latency_hist: vec![0; BUCKETS],
            ttft_ms_sum: 0.0,
            ttft_count: 0,
            tokens_in: 0,
            tokens_out: 0,
            neurons: 0.0,
            wasted_neurons: 0.0,
            confidence_sum: 0.0,
            confidence_count: 0,
        }
    }

    pub fn add(&mut self, e: &Event) {
        self.requests += 1;
        self.errors += u64::from(e.is_error());
        // A routing rule's trip central is policy, not a failure: it does not count
        // toward the fallback rate (its event still says `rule`).
        if let Some(f) = e.fallback.as_ref().filter(|_| e.fell_back()) {
            self.fallbacks += 1;
            self.fallback_added_ms += f.added_ms;
        }
        self.cold_starts += u64::from(e.cold_start_ms.is_some());
        self.latency_ms_sum += e.latency_ms;
        self.latency_hist.resize(BUCKETS, 0);
        self.latency_hist[bucket_of(e.latency_ms)] += 1;
        if let Some(t) = e.ttft_ms {
            self.ttft_ms_sum += t;
            self.ttft_count += 1;
        }
        self.tokens_in += e.tokens_in.unwrap_or(0);
        self.tokens_out += e.tokens_out.unwrap_or(0);
        self.neurons += e.neurons.unwrap_or(0.0);
        self.wasted_neurons += e.wasted_neurons;
        if let Some(c) = e.confidence {
            self.confidence_sum += c;
            self.confidence_count += 1;
        }
    }

    /// Adds `o`'s counts (its minute, colo and model are not checked).
    pub fn merge(&mut self, o: &Rollup) {
        self.requests += o.requests;
        self.errors += o.errors;
        self.fallbacks += o.fallbacks;
        self.fallback_added_ms += o.fallback_added_ms;
        self.cold_starts += o.cold_starts;
        self.latency_ms_sum += o.latency_ms_sum;
        self.latency_hist.resize(BUCKETS, 0);
        for (a, b) in self.latency_hist.iter_mut().zip(&o.latency_hist) {
            *a += b;
        }
        self.ttft_ms_sum += o.ttft_ms_sum;
        self.ttft_count += o.ttft_count;
        self.tokens_in += o.tokens_in;
        self.tokens_out += o.tokens_out;
        self.neurons += o.neurons;
        self.wasted_neurons += o.wasted_neurons;
        self.confidence_sum += o.confidence_sum;
        self.confidence_count += o.confidence_count;
    }

    /// The latency under which a share `q` of requests fell (the upper bound of its
    /// bucket), or `None` without requests.
    pub fn latency_quantile(&self, q: f64) -> Option<f64> {
        let n: u64 = self.latency_hist.iter().sum();
        if n == 0 {
            return None;
        }
        let rank = ((q * n as f64).ceil() as u64).clamp(1, n);
        let mut seen = 0;
        for (i, c) in self.latency_hist.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return Some(bucket_upper(i));
            }
        }
        Some(bucket_upper(BUCKETS - 1))
    }

    pub fn mean_confidence(&self) -> Option<f64> {
        (self.confidence_count > 0).then(|| self.confidence_sum / self.confidence_count as f64)
    }

    /// Neurons per request that the application used (wasted ones excluded).
    pub fn useful_neurons_per_request(&self) -> Option<f64> {
        (self.requests > 0).then(|| (self.neurons - self.wasted_neurons) / self.requests as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(ms: f64) -> Event {
        Event {
            latency_ms: ms,
            ..Event::default()
        }
    }

    #[test]
    fn a_routing_rule_s_trip_central_is_not_a_fallback() {
        let central = |reason: &str| Event {
            fallback: Some(crate::event::FallbackInfo {
                reason: reason.into(),
                from: None,
                added_ms: 5.0,
            }),
            ..event(1.0)
        };
        let mut r = Rollup::new(0, "ams", "m");
        r.add(&central(crate::event::RULE));
        r.add(&central("node_down"));
        assert_eq!((r.requests, r.fallbacks, r.fallback_added_ms), (2, 1, 5.0));
    }

    #[test]
    fn quantiles_come_from_merged_minutes_within_a_bucket() {
        let (mut a, mut b) = (Rollup::new(1, "ams", "m"), Rollup::new(2, "ams", "m"));
        for _ in 0..98 {
            a.add(&event(10.0));
        }
        b.add(&event(1000.0));
        b.add(&event(1000.0));
        a.merge(&b);
        let p50 = a.latency_quantile(0.5).expect("p50");
        let p99 = a.latency_quantile(0.99).expect("p99");
        assert!((10.0..15.0).contains(&p50), "{p50}");
        assert!((1000.0..1500.0).contains(&p99), "{p99}");
        assert_eq!(a.requests, 100);
        assert_eq!(Rollup::new(0, "x", "y").latency_quantile(0.5), None);
    }
}
