//! Placement: a consistent-hash ring with virtual nodes, and the assignment of each
//! model to a shard of `k` nodes under bounded loads (Mirrokni, Thorup, Zadimoghaddam,
//! "Consistent Hashing with Bounded Loads", 2018).
//!
//! Each node owns `vnodes` points on a 64-bit ring. A model hashes to a point and walks
//! clockwise; the distinct nodes it meets form its preference list. Plain consistent
//! hashing would take the first `k` of them, which leaves some nodes with far more
//! models than others when models are few. Bounded loads caps every node at
//! `ceil(load_factor * placements / nodes)` placements: models are assigned in a fixed
//! order (by their hash) and skip nodes that are full. A node joining or leaving then
//! moves about `1/N` of the placements, plus a small cascade from the cap.
//!
//! Everything here is a pure function of node ids, model names and settings, so router
//! replicas that see the same nodes compute the same placement.

use crate::hash::{hash_parts, hash_str};

/// The ring's points: `(position, node index)`, sorted.
#[derive(Debug, Clone)]
pub struct Ring {
    points: Vec<(u64, u32)>,
    nodes: usize,
}

impl Ring {
    /// A ring over `node_ids` (indices into that slice are what the ring returns), with
    /// `vnodes` points per node (at least one).
    pub fn new(node_ids: &[String], vnodes: u32) -> Self {
        let vnodes = vnodes.max(1);
        let mut points = Vec::with_capacity(node_ids.len() * vnodes as usize);
        for (i, id) in node_ids.iter().enumerate() {
            let Ok(index) = u32::try_from(i) else { break };
            for v in 0..vnodes {
                points.push((hash_parts(&[id.as_bytes(), &v.to_le_bytes()]), index));
            }
        }
        // Ties between positions (vanishingly rare) are broken by node id, not by the
        // order the caller listed the nodes in.
        points.sort_by(|a, b| {
            a.0.cmp(&b.0)
                .then_with(|| node_ids[a.1 as usize].cmp(&node_ids[b.1 as usize]))
        });
        Self {
            points,
            nodes: node_ids.len().min(u32::MAX as usize),
        }
    }

    /// Number of nodes on the ring.
    pub fn nodes(&self) -> usize {
        self.nodes
    }

    /// Every node once, in the clockwise order met from `key`'s position.
    pub fn walk(&self, key: &str) -> Vec<usize> {
        let mut seen = vec![false; self.nodes];
        let mut order = Vec::with_capacity(self.nodes);
        if self.points.is_empty() {
            return order;
        }
        let start = self.points.partition_point(|p| p.0 < hash_str(key));
        for i in 0..self.points.len() {
            let node = self.points[(start + i) % self.points.len()].1 as usize;
            if !seen[node] {
                seen[node] = true;
                order.push(node);
                if order.len() == self.nodes {
                    break;
                }
            }
        }
        order
    }
}

/// What one model asks of the placement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Demand {
    /// The model's canonical name (its ring key).
    pub model: String,
    /// Shard size wanted (`k`).
    pub replicas: usize,
    /// `eligible[i]`: node `i` lists the model in its catalogue.
    pub eligible: Vec<bool>,
}

/// Where each model lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Assignment {
    /// Per demand (same order): the shard, best first.
    pub shards: Vec<Vec<usize>>,
    /// Per demand: the shard, then every other eligible node in ring order (where a
    /// request goes when the shard's nodes are down).
    pub preference: Vec<Vec<usize>>,
    /// The most placements any node was allowed (when every shard fit under it).
    pub capacity: usize,
    /// Placements per node.
    pub loads: Vec<usize>,
}

/// Assigns every demand a shard of `min(replicas, eligible nodes)` distinct eligible
/// nodes, no node above `ceil(load_factor * total / active nodes)` unless a model's
/// eligible nodes are all full (then it goes to its preferred eligible nodes anyway).
pub fn assign(ring: &Ring, demands: &[Demand], load_factor: f64) -> Assignment {
    let n = ring.nodes();
    let wanted = |d: &Demand| {
        let eligible = d.eligible.iter().take(n).filter(|&&e| e).count();
        d.replicas.min(eligible)
    };
    let total: usize = demands.iter().map(wanted).sum();
    let active = (0..n)
        .filter(|&i| demands.iter().any(|d| d.eligible.get(i) == Some(&true)))
        .count()
        .max(1);
    let factor = if load_factor.is_finite() {
        load_factor.max(1.0)
    } else {
        1.0
    };
    let capacity = ((factor * total as f64 / active as f64).ceil() as usize).max(1);

    // A fixed order, independent of how the caller listed the models.
    let mut order: Vec<usize> = (0..demands.len()).collect();
    order.sort_by(|&a, &b| {
        let (da, db) = (&demands[a], &demands[b]);
        hash_str(&da.model)
            .cmp(&hash_str(&db.model))
            .then_with(|| da.model.cmp(&db.model))
    });

    let mut loads = vec![0usize; n];
    let mut shards = vec![Vec::new(); demands.len()];
    let mut preference = vec![Vec::new(); demands.len()];
    for i in order {
        let d = &demands[i];
        let k = wanted(d);
        let walk: Vec<usize> = ring
            .walk(&d.model)
            .into_iter()
            .filter(|&node| d.eligible.get(node) == Some(&true))
            .collect();
        let mut shard: Vec<usize> = Vec::with_capacity(k);
        for &node in &walk {
            if shard.len() == k {
                break;
            }
            if loads[node] < capacity {
                shard.push(node);
            }
        }
        // Too few eligible nodes have room: overflow onto the least loaded (ring order
        // breaks ties), so the excess spreads instead of piling on one node.
        if shard.len() < k {
            let mut rest: Vec<(usize, usize)> = walk
                .iter()
                .enumerate()
                .filter(|(_, node)| !shard.contains(node))
                .map(|(pos, &node)| (loads[node], pos))
                .collect();
            rest.sort_unstable();
            shard.extend(rest.iter().take(k - shard.len()).map(|&(_, pos)| walk[pos]));
        }
        for &node in &shard {
            loads[node] += 1;
        }
        let mut pref = shard.clone();
        pref.extend(walk.iter().filter(|node| !shard.contains(node)));
        shards[i] = shard;
        preference[i] = pref;
    }
    Assignment {
        shards,
        preference,
        capacity,
        loads,
    }
}

/// Share of placements (model, node) in `before` that are not in `after`: the
/// fraction of model loads a membership change costs. Models are matched by name.
pub fn moved_share(before: &[(String, Vec<String>)], after: &[(String, Vec<String>)]) -> f64 {
    let total: usize = before.iter().map(|(_, s)| s.len()).sum();
    if total == 0 {
        return 0.0;
    }
    let moved: usize = before
        .iter()
        .map(|(model, shard)| {
            let now = after.iter().find(|(m, _)| m == model).map(|(_, s)| s);
            shard
                .iter()
                .filter(|node| now.is_none_or(|s| !s.contains(node)))
                .count()
        })
        .sum();
    moved as f64 / total as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("node-{i}")).collect()
    }

    fn demands(models: usize, k: usize, nodes: usize) -> Vec<Demand> {
        (0..models)
            .map(|m| Demand {
                model: format!("model-{m}"),
                replicas: k,
                eligible: vec![true; nodes],
            })
            .collect()
    }

    #[test]
    fn walk_visits_every_node_once() {
        let ring = Ring::new(&ids(5), 50);
        let mut w = ring.walk("x");
        assert_eq!(w.len(), 5);
        w.sort_unstable();
        assert_eq!(w, vec![0, 1, 2, 3, 4]);
        assert!(Ring::new(&[], 50).walk("x").is_empty());
    }

    #[test]
    fn shards_are_distinct_eligible_and_capped() {
        let ring = Ring::new(&ids(4), 100);
        let mut d = demands(40, 2, 4);
        d[0].eligible = vec![false, true, false, false];
        let a = assign(&ring, &d, 1.25);
        assert_eq!(a.shards[0], vec![1]);
        assert_eq!(a.preference[0], vec![1]);
        for s in &a.shards[1..] {
            assert_eq!(s.len(), 2);
            assert_ne!(s[0], s[1]);
        }
        assert!(a.loads.iter().all(|&l| l <= a.capacity), "{a:?}");
        assert_eq!(a.loads.iter().sum::<usize>(), 79);
    }

    #[test]
    fn full_nodes_overflow_rather_than_leave_a_model_unplaced() {
        // Three models only node 0 can serve: the cap cannot hold, the models still land.
        let ring = Ring::new(&ids(3), 10);
        let d: Vec<Demand> = (0..3)
            .map(|m| Demand {
                model: format!("m{m}"),
                replicas: 1,
                eligible: vec![true, false, false],
            })
            .collect();
        let a = assign(&ring, &d, 1.0);
        assert!(a.shards.iter().all(|s| s == &vec![0]));
    }

    #[test]
    fn moved_share_counts_lost_placements() {
        let s = |m: &str, n: &[&str]| (m.to_string(), n.iter().map(|x| x.to_string()).collect());
        let before = vec![s("a", &["x", "y"]), s("b", &["y", "z"])];
        let after = vec![s("a", &["x", "w"]), s("b", &["z", "y"])];
        assert!((moved_share(&before, &after) - 0.25).abs() < 1e-9);
    }
}
