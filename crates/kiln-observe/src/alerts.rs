//! The alert rules, evaluated over the rollups of a recent window against a baseline
//! (the window before it). The same rules ship as Prometheus alerting rules in
//! `deploy/prometheus/kiln-alerts.yml`.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::rollup::Rollup;

/// Thresholds and windows, in minutes.
#[derive(Debug, Clone, Serialize)]
pub struct AlertRules {
    /// The recent window the rules look at.
    pub window_minutes: i64,
    /// The window before it, the baseline.
    pub baseline_minutes: i64,
    /// Fewest requests in a window for a rule to judge it.
    pub min_requests: u64,
    /// p99 over this many times the baseline p50 fires `ColoLatencyHigh`.
    pub p99_over_p50: f64,
    /// Fallback share over this fires `FallbackRateHigh`.
    pub max_fallback_rate: f64,
    /// Mean confidence below baseline by this much fires `ConfidenceDrift`.
    pub confidence_drop: f64,
    /// Cold-start share over this fires `ColoColdStarts`.
    pub max_cold_start_rate: f64,
}

impl Default for AlertRules {
    fn default() -> Self {
        Self {
            window_minutes: 5,
            baseline_minutes: 60,
            min_requests: 10,
            p99_over_p50: 3.0,
            max_fallback_rate: 0.05,
            confidence_drop: 0.1,
            max_cold_start_rate: 0.2,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Alert {
    /// `ColoLatencyHigh`, `FallbackRateHigh`, `ConfidenceDrift`, `ColoColdStarts`.
    pub name: &'static str,
    pub severity: &'static str,
    pub colo: Option<String>,
    pub model: Option<String>,
    pub value: f64,
    pub threshold: f64,
    pub message: String,
}

/// Windows summed by a key.
fn sum_by<K: Ord>(rollups: &[&Rollup], key: impl Fn(&Rollup) -> K) -> BTreeMap<K, Rollup> {
    let mut out: BTreeMap<K, Rollup> = BTreeMap::new();
    for r in rollups {
        out.entry(key(r))
            .or_insert_with(|| Rollup::new(r.minute, &r.colo, &r.model))
            .merge(r);
    }
    out
}

/// The alerts `rules` raise over `rollups` at epoch minute `now`.
pub fn evaluate(rules: &AlertRules, rollups: &[Rollup], now: i64) -> Vec<Alert> {
    let recent_from = now - rules.window_minutes + 1;
    let (recent, base): (Vec<&Rollup>, Vec<&Rollup>) =
        rollups.iter().partition(|r| r.minute >= recent_from);
    let mut out = Vec::new();
    let recent_colo = sum_by(&recent, |r| r.colo.clone());
    let base_colo = sum_by(&base, |r| r.colo.clone());
    for (colo, r) in &recent_colo {
        if r.requests < rules.min_requests {
            continue;
        }
        // Without a baseline yet, the window's own p50 is the baseline.
        let p50 = base_colo
            .get(colo)
            .filter(|b| b.requests >= rules.min_requests)
            .unwrap_or(r)
            .latency_quantile(0.5);
        if let (Some(p50), Some(p99)) = (p50, r.latency_quantile(0.99)) {
            if p99 > rules.p99_over_p50 * p50 {
                out.push(Alert {
                    name: "ColoLatencyHigh",
                    severity: "warning",
                    colo: Some(colo.clone()),
                    model: None,
                    value: p99,
                    threshold: rules.p99_over_p50 * p50,
                    message: format!(
                        "p99 latency in {colo} is {p99:.0} ms, over {}× its p50 baseline of {p50:.0} ms",
                        rules.p99_over_p50
                    ),
                });
            }
        }
        let cold = r.cold_starts as f64 / r.requests as f64;
        if cold > rules.max_cold_start_rate {
            out.push(Alert {
                name: "ColoColdStarts",
                severity: "info",
                colo: Some(colo.clone()),
                model: None,
                value: cold,
                threshold: rules.max_cold_start_rate,
                message: format!(
                    "{colo} cold-started {:.0}% of its requests: route its traffic central",
                    cold * 100.0
                ),
            });
        }
    }
    let all = sum_by(&recent, |_| ());
    if let Some(r) = all.get(&()).filter(|r| r.requests >= rules.min_requests) {
        let rate = r.fallbacks as f64 / r.requests as f64;
        if rate > rules.max_fallback_rate {
            out.push(Alert {
                name: "FallbackRateHigh",
                severity: "warning",
                colo: None,
                model: None,
                value: rate,
                threshold: rules.max_fallback_rate,
                message: format!(
                    "{:.1}% of requests fell back to the upstream (over {:.0}%)",
                    rate * 100.0,
                    rules.max_fallback_rate * 100.0
                ),
            });
        }
    }
    let recent_model = sum_by(&recent, |r| r.model.clone());
    let base_model = sum_by(&base, |r| r.model.clone());
    for (model, r) in &recent_model {
        let (Some(now_mean), Some(base_mean)) = (
            r.mean_confidence()
                .filter(|_| r.confidence_count >= rules.min_requests),
            base_model
                .get(model)
                .filter(|b| b.confidence_count >= rules.min_requests)
                .and_then(Rollup::mean_confidence),
        ) else {
            continue;
        };
        if now_mean < base_mean - rules.confidence_drop {
            out.push(Alert {
                name: "ConfidenceDrift",
                severity: "warning",
                colo: None,
                model: Some(model.clone()),
                value: now_mean,
                threshold: base_mean - rules.confidence_drop,
                message: format!(
                    "mean confidence of {model} fell to {now_mean:.3} from a baseline of {base_mean:.3}"
                ),
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{Event, FallbackInfo};

    fn rollup(minute: i64, colo: &str, events: impl IntoIterator<Item = Event>) -> Rollup {
        let mut r = Rollup::new(minute, colo, "m");
        for e in events {
            r.add(&e);
        }
        r
    }

    fn ev(ms: f64) -> Event {
        Event {
            latency_ms: ms,
            ..Event::default()
        }
    }

    #[test]
    fn each_rule_fires_on_its_condition_and_not_otherwise() {
        let rules = AlertRules::default();
        let now = 1000;
        let base = rollup(now - 30, "ams", (0..50).map(|_| ev(10.0)));
        let quiet = rollup(now, "ams", (0..50).map(|_| ev(11.0)));
        assert!(evaluate(&rules, &[base.clone(), quiet], now).is_empty());

        let slow = rollup(
            now,
            "ams",
            (0..50).map(|i| ev(if i < 5 { 500.0 } else { 10.0 })),
        );
        let fired = evaluate(&rules, &[base.clone(), slow], now);
        assert_eq!(fired.len(), 1, "{fired:?}");
        assert_eq!(
            (fired[0].name, fired[0].colo.as_deref()),
            ("ColoLatencyHigh", Some("ams"))
        );

        let fell = rollup(
            now,
            "up",
            (0..20).map(|i| Event {
                fallback: (i < 2).then(|| FallbackInfo {
                    reason: "node_down".into(),
                    from: Some("ams".into()),
                    added_ms: 3.0,
                }),
                latency_ms: 10.0,
                ..Event::default()
            }),
        );
        let names: Vec<_> = evaluate(&rules, &[base.clone(), fell], now)
            .iter()
            .map(|a| a.name)
            .collect();
        assert_eq!(names, ["FallbackRateHigh"]);

        let cold = rollup(
            now,
            "fra",
            (0..20).map(|i| Event {
                cold_start_ms: (i < 10).then_some(900),
                latency_ms: 10.0,
                ..Event::default()
            }),
        );
        let names: Vec<_> = evaluate(&rules, &[cold], now)
            .iter()
            .map(|a| a.name)
            .collect();
        assert_eq!(names, ["ColoColdStarts"]);

        let conf = |minute, c: f64| {
            rollup(
                minute,
                "ams",
                (0..20).map(|_| Event {
                    confidence: Some(c),
                    latency_ms: 10.0,
                    ..Event::default()
                }),
            )
        };
        let names: Vec<_> = evaluate(&rules, &[conf(now - 20, 0.95), conf(now, 0.6)], now)
            .iter()
            .map(|a| a.name)
            .collect();
        assert_eq!(names, ["ConfidenceDrift"]);
        assert!(evaluate(&rules, &[conf(now - 20, 0.95), conf(now, 0.93)], now).is_empty());
    }
}
