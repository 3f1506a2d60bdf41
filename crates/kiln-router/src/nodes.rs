//! One node's state as the router sees it: health (active checks and passive failure
//! detection with backoff ejection), overload cool-down, the load it last reported,
//! its catalogue, and the router's own in-flight count.
//!
//! Health and membership are separate on purpose: a node that fails stays on the ring
//! (its models keep their placement, requests go to the rest of the shard until it
//! recovers); only discovery adds or removes nodes.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::config::NodeSpec;
use crate::metrics::NodeMetrics;
use crate::prom::NodeLoad;

/// Probe failures in a row before a node that was up is marked down.
const PROBE_FAILURES_TO_DOWN: u32 = 2;

/// One model in a node's `/v1/models`.
#[derive(Debug, Clone, PartialEq)]
pub struct CatalogueModel {
    pub id: String,
    pub aliases: Vec<String>,
    /// Loaded on the node now (`ready`).
    pub loaded: bool,
    /// The card as the node sent it, for the router's own `/v1/models`.
    pub card: Value,
}

impl CatalogueModel {
    /// Reads one card; `None` if it has no string `id`.
    pub fn from_card(card: &Value) -> Option<Self> {
        let id = card.get("id")?.as_str()?.to_string();
        let aliases = card
            .get("aliases")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|v| v.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default();
        let loaded = card.get("ready").and_then(Value::as_bool).unwrap_or(true);
        Some(Self {
            id,
            aliases,
            loaded,
            card: card.clone(),
        })
    }
}

/// What one active check found.
#[derive(Debug, Clone, Default)]
pub struct Probe {
    /// `GET /health` answered 2xx.
    pub healthy: bool,
    pub error: Option<String>,
    pub load: Option<NodeLoad>,
    pub catalogue: Option<Vec<CatalogueModel>>,
}

/// Where a node stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Health {
    /// Not checked yet.
    Unknown,
    Up,
    /// Failed its health checks.
    Down,
    /// Taken out after failed requests, until the backoff passes.
    Ejected,
    /// Answered 429; rests for its `Retry-After`.
    Overloaded,
}

impl Health {
    pub fn as_str(self) -> &'static str {
        match self {
            Health::Unknown => "unknown",
            Health::Up => "up",
            Health::Down => "down",
            Health::Ejected => "ejected",
            Health::Overloaded => "overloaded",
        }
    }
}

#[derive(Debug, Default)]
struct State {
    probed: bool,
    up: bool,
    probe_failures: u32,
    /// Passive failures in a row (reset by a successful request).
    failures: u32,
    ejected_until: Option<Instant>,
    overloaded_until: Option<Instant>,
    catalogue: Option<Arc<Vec<CatalogueModel>>>,
    load: Option<NodeLoad>,
    last_error: Option<String>,
}

/// A node of the set.
#[derive(Debug)]
pub struct Node {
    pub spec: NodeSpec,
    pub id: String,
    /// `spec.colo`, or `default`.
    pub colo: String,
    pub metrics: Arc<NodeMetrics>,
    in_flight: Arc<AtomicUsize>,
    state: Mutex<State>,
}

impl Node {
    pub fn new(spec: NodeSpec, metrics: Arc<NodeMetrics>) -> Self {
        Self {
            id: spec.id(),
            colo: spec.colo.clone().unwrap_or_else(|| "default".into()),
            spec,
            metrics,
            in_flight: Arc::new(AtomicUsize::new(0)),
            state: Mutex::new(State::default()),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn health(&self, now: Instant) -> Health {
        let s = self.state();
        if !s.probed {
            Health::Unknown
        } else if !s.up {
            Health::Down
        } else if s.ejected_until.is_some_and(|t| t > now) {
            Health::Ejected
        } else if s.overloaded_until.is_some_and(|t| t > now) {
            Health::Overloaded
        } else {
            Health::Up
        }
    }

    /// Takes requests now.
    pub fn usable(&self, now: Instant) -> bool {
        self.health(now) == Health::Up
    }

    /// A request got a real answer (the node is alive): the backoff starts over.
    pub fn record_success(&self) {
        self.state().failures = 0;
    }

    /// A request failed (connect error, 5xx, broken body): eject for `base * 2^(n-1)`
    /// (at most `max`), `n` the ejections in a row without a success between. Failures
    /// while already ejected (the other requests that were in flight when the node
    /// died) are one incident, not more: they neither extend nor escalate it. Returns
    /// how long the node stays out from now.
    pub fn record_failure(
        &self,
        now: Instant,
        base: Duration,
        max: Duration,
        why: &str,
    ) -> Duration {
        let mut s = self.state();
        s.last_error = Some(why.to_string());
        if let Some(until) = s.ejected_until.filter(|&t| t > now) {
            return until - now;
        }
        s.failures = s.failures.saturating_add(1);
        let factor = 1u32 << (s.failures - 1).min(16);
        let length = base.saturating_mul(factor).min(max.max(base));
        self.metrics.ejections.inc();
        s.ejected_until = Some(now + length);
        tracing::warn!(node = %self.id, ejected_for_s = length.as_secs_f64(), "node ejected: {why}");
        length
    }

    /// The node said 429: rest it for `length`.
    pub fn record_overload(&self, now: Instant, length: Duration) {
        self.state().overloaded_until = Some(now + length);
    }

    /// Applies an active check; returns whether the catalogue changed.
    pub fn record_probe(&self, probe: Probe) -> bool {
        let mut s = self.state();
        let was_up = s.probed && s.up;
        s.probed = true;
        if probe.healthy {
            s.up = true;
            s.probe_failures = 0;
        } else {
            s.probe_failures = s.probe_failures.saturating_add(1);
            if !was_up || s.probe_failures >= PROBE_FAILURES_TO_DOWN {
                s.up = false;
            }
            if was_up && !s.up {
                self.metrics.ejections.inc();
                tracing::warn!(node = %self.id, "node down: {}", probe.error.as_deref().unwrap_or("health check failed"));
            }
            s.last_error = probe.error.clone();
        }
        if let Some(load) = probe.load {
            s.load = Some(load);
        }
        match probe.catalogue {
            Some(new) if s.catalogue.as_deref().map(|c| ids(c)) != Some(ids(&new)) => {
                s.catalogue = Some(Arc::new(new));
                true
            }
            Some(new) => {
                // Same models; refresh the cards (loaded flags change all the time).
                s.catalogue = Some(Arc::new(new));
                false
            }
            None => false,
        }
    }

    /// The last catalogue the node reported (kept while it is down, so its models stay
    /// placed).
    pub fn catalogue(&self) -> Option<Arc<Vec<CatalogueModel>>> {
        self.state().catalogue.clone()
    }

    pub fn serves(&self, model: &str) -> bool {
        self.catalogue()
            .is_some_and(|c| c.iter().any(|m| m.id == model))
    }

    pub fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Acquire)
    }

    /// Counts a request as in flight until the guard drops.
    pub fn begin(&self) -> InFlight {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        InFlight(self.in_flight.clone())
    }

    /// Lower is better: outstanding work (the router's own count or, when other
    /// routers or clients also send here, the node's last report, whichever is more),
    /// queued work counted again (a queue costs latency to everyone on the node), and
    /// KV-cache fullness (0..1) to break ties.
    pub fn load_score(&self) -> f64 {
        let mine = self.in_flight() as f64;
        match &self.state().load {
            Some(l) => mine.max(l.running + l.waiting) + l.waiting + l.kv_usage,
            None => mine,
        }
    }

    /// A JSON view for `GET /nodes`.
    pub fn view(&self, now: Instant) -> Value {
        let health = self.health(now);
        let s = self.state();
        let until = |t: Option<Instant>| {
            t.filter(|&t| t > now)
                .map_or(0.0, |t| (t - now).as_secs_f64())
        };
        serde_json::json!({
            "id": self.id,
            "url": self.spec.url,
            "colo": self.colo,
            "health": health.as_str(),
            "ejected_for_s": until(s.ejected_until),
            "overloaded_for_s": until(s.overloaded_until),
            "consecutive_failures": s.failures,
            "last_error": s.last_error,
            "in_flight": self.in_flight(),
            "running": s.load.as_ref().map(|l| l.running),
            "waiting": s.load.as_ref().map(|l| l.waiting),
            "kv_cache_usage": s.load.as_ref().map(|l| l.kv_usage),
            "models": s.catalogue.as_deref().map(|c| c.iter().map(|m| m.id.clone()).collect::<Vec<_>>()),
            "loaded": s.catalogue.as_deref().map(|c| c.iter().filter(|m| m.loaded).map(|m| m.id.clone()).collect::<Vec<_>>()),
        })
    }
}

fn ids(c: &[CatalogueModel]) -> Vec<(&str, &[String])> {
    c.iter()
        .map(|m| (m.id.as_str(), m.aliases.as_slice()))
        .collect()
}

/// A request in flight on a node; dropping it ends the count.
#[derive(Debug)]
pub struct InFlight(Arc<AtomicUsize>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node() -> Node {
        let spec = NodeSpec::parse("http://127.0.0.1:1@colo=ams").expect("spec");
        Node::new(spec, Arc::default())
    }

    fn healthy() -> Probe {
        Probe {
            healthy: true,
            ..Probe::default()
        }
    }

    #[test]
    fn unknown_until_probed_then_up() {
        let n = node();
        let now = Instant::now();
        assert_eq!(n.health(now), Health::Unknown);
        n.record_probe(healthy());
        assert!(n.usable(now));
    }

    #[test]
    fn passive_failures_eject_with_doubling_backoff() {
        let n = node();
        n.record_probe(healthy());
        let now = Instant::now();
        let (base, max) = (Duration::from_secs(1), Duration::from_secs(5));
        let s = Duration::from_secs;
        assert_eq!(n.record_failure(now, base, max, "x"), s(1));
        assert_eq!(n.health(now), Health::Ejected);
        // More failures of the same incident change nothing.
        assert_eq!(n.record_failure(now, base, max, "x"), s(1));
        // Each new incident (after the ejection ran out) doubles it, up to `max`.
        let mut t = now;
        for want in [2, 4, 5, 5] {
            t += s(10);
            assert!(n.usable(t));
            assert_eq!(n.record_failure(t, base, max, "x"), s(want));
        }
        n.record_success();
        t += s(10);
        assert_eq!(n.record_failure(t, base, max, "x"), s(1));
        assert_eq!(n.metrics.ejections.get(), 6);
    }

    #[test]
    fn one_failed_check_is_forgiven_two_mark_down() {
        let n = node();
        n.record_probe(healthy());
        let failed = Probe::default();
        n.record_probe(failed.clone());
        assert!(n.usable(Instant::now()));
        n.record_probe(failed);
        assert_eq!(n.health(Instant::now()), Health::Down);
        n.record_probe(healthy());
        assert!(n.usable(Instant::now()));
    }

    #[test]
    fn overload_rests_the_node_and_catalogue_changes_are_reported() {
        let n = node();
        let card = serde_json::json!({"id": "m", "aliases": ["mm"], "ready": false});
        let model = CatalogueModel::from_card(&card).expect("card");
        let changed = n.record_probe(Probe {
            healthy: true,
            catalogue: Some(vec![model.clone()]),
            ..Probe::default()
        });
        assert!(changed && n.serves("m") && !n.serves("mm"));
        let loaded = CatalogueModel {
            loaded: true,
            ..model
        };
        assert!(!n.record_probe(Probe {
            healthy: true,
            catalogue: Some(vec![loaded]),
            ..Probe::default()
        }));
        let now = Instant::now();
        n.record_overload(now, Duration::from_secs(1));
        assert_eq!(n.health(now), Health::Overloaded);
        assert!(n.usable(now + Duration::from_secs(2)));
    }

    #[test]
    fn in_flight_guard_counts_and_scores() {
        let n = node();
        let a = n.begin();
        let b = n.begin();
        assert_eq!((n.in_flight(), n.load_score()), (2, 2.0));
        drop((a, b));
        assert_eq!(n.in_flight(), 0);
    }
}
