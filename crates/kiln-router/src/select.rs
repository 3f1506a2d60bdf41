//! Which nodes a request tries, in order: the model's shard first (the session's node
//! when there is a session key, else least loaded first), then the other nodes that
//! serve the model, in ring order, for when the shard's nodes fail.

use std::sync::Arc;
use std::time::Instant;

use crate::affinity;
use crate::nodes::{Health, Node};
use crate::placement::Placement;

/// A request's route.
#[derive(Debug)]
pub struct Plan {
    /// Usable nodes, best first; the first `shard_len` are shard members.
    pub candidates: Vec<Arc<Node>>,
    pub shard_len: usize,
    /// The session's preferred node (healthy or not), when the request has a session.
    pub preferred: Option<String>,
    /// No shard node is usable and some are resting after a 429: the shard is
    /// overloaded, and its load must not spill onto nodes that don't have the model.
    pub overloaded: bool,
}

/// Plans the route of one request for `model` (canonical) at `now`.
pub fn plan(placement: &Placement, model: &str, session: Option<&str>, now: Instant) -> Plan {
    let Some(place) = placement.models.get(model) else {
        return Plan {
            candidates: Vec::new(),
            shard_len: 0,
            preferred: None,
            overloaded: false,
        };
    };
    let node = |i: usize| &placement.nodes[i];
    let (mut shard, preferred): (Vec<usize>, Option<String>) = match session {
        Some(key) => {
            let ids: Vec<&str> = place.shard.iter().map(|&i| node(i).id.as_str()).collect();
            let order: Vec<usize> = affinity::rank(key, &ids)
                .into_iter()
                .map(|r| place.shard[r])
                .collect();
            let preferred = order.first().map(|&i| node(i).id.clone());
            (order, preferred)
        }
        None => {
            let mut scored: Vec<(f64, usize)> = place
                .shard
                .iter()
                .map(|&i| (node(i).load_score(), i))
                .collect();
            // Stable: equal loads keep the shard's (ring) order.
            scored.sort_by(|a, b| a.0.total_cmp(&b.0));
            (scored.into_iter().map(|(_, i)| i).collect(), None)
        }
    };
    let overloaded = place.shard.iter().all(|&i| !node(i).usable(now))
        && place
            .shard
            .iter()
            .any(|&i| node(i).health(now) == Health::Overloaded);
    shard.retain(|&i| node(i).usable(now));
    let shard_len = shard.len();
    let mut candidates: Vec<Arc<Node>> = shard.iter().map(|&i| node(i).clone()).collect();
    if !overloaded {
        candidates.extend(
            place
                .preference
                .iter()
                .filter(|i| !place.shard.contains(i))
                .map(|&i| node(i))
                .filter(|n| n.usable(now))
                .cloned(),
        );
    }
    Plan {
        candidates,
        shard_len,
        preferred,
        overloaded,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{NodeSpec, RouterConfig};
    use crate::nodes::{CatalogueModel, Probe};
    use std::time::Duration;

    fn fleet(n: usize) -> Placement {
        let nodes = (0..n)
            .map(|i| {
                let spec = NodeSpec::parse(&format!("http://h{i}:1@name=n{i}")).expect("spec");
                let node = Node::new(spec, Arc::default());
                let card = serde_json::json!({"id": "m", "ready": true});
                node.record_probe(Probe {
                    healthy: true,
                    catalogue: Some(vec![CatalogueModel::from_card(&card).expect("card")]),
                    ..Probe::default()
                });
                Arc::new(node)
            })
            .collect();
        Placement::build(nodes, &RouterConfig::default())
    }

    fn ids(p: &Plan) -> Vec<&str> {
        p.candidates.iter().map(|n| n.id.as_str()).collect()
    }

    #[test]
    fn least_loaded_shard_node_first_then_the_rest_of_the_ring() {
        let p = fleet(4);
        let now = Instant::now();
        let shard = &p.models["m"].shard;
        let busy = p.nodes[shard[0]].begin();
        let plan = plan(&p, "m", None, now);
        assert_eq!(plan.shard_len, 2);
        assert_eq!(plan.candidates.len(), 4);
        assert_eq!(plan.candidates[0].id, p.nodes[shard[1]].id);
        drop(busy);
        assert_eq!(
            super::plan(&p, "m", None, now).candidates[0].id,
            p.nodes[shard[0]].id
        );
    }

    #[test]
    fn a_session_sticks_to_its_node_and_fails_over_within_the_shard() {
        let p = fleet(4);
        let now = Instant::now();
        let first = plan(&p, "m", Some("alice"), now);
        let preferred = first.preferred.clone().expect("preferred");
        assert_eq!(first.candidates[0].id, preferred);
        // Load does not move a session.
        let _load: Vec<_> = (0..5).map(|_| first.candidates[0].begin()).collect();
        assert_eq!(ids(&plan(&p, "m", Some("alice"), now))[0], preferred);
        // Its node fails: the other shard node takes it; the preference is unchanged.
        let base = Duration::from_secs(1);
        first.candidates[0].record_failure(now, base, base, "test");
        let after = plan(&p, "m", Some("alice"), now);
        assert_eq!(after.preferred.as_deref(), Some(preferred.as_str()));
        assert_eq!(after.shard_len, 1);
        assert_eq!(after.candidates[0].id, first.candidates[1].id);
    }

    #[test]
    fn an_overloaded_shard_does_not_spill() {
        let p = fleet(4);
        let now = Instant::now();
        for &i in &p.models["m"].shard {
            p.nodes[i].record_overload(now, Duration::from_secs(1));
        }
        let plan = plan(&p, "m", None, now);
        assert!(plan.overloaded);
        assert!(plan.candidates.is_empty());
        assert!(super::plan(&p, "other", None, now).candidates.is_empty());
    }
}
