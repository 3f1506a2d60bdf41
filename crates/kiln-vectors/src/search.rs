//! How a query searches one index: exactly where that is cheaper, else on the graph
//! with an `ef` chosen from the index's size and top-K, always with the graph's tail
//! scored exactly.
//!
//! **The ef rule.** `ef = base × √(n / 5000)`, clamped to `[base, MAX_EF]`, where
//! `base = max(expansion_search, 4 × topK)` and `n` the vectors in the graph. HNSW's
//! recall at a fixed ef falls as the graph grows; on random Gaussian vectors (the hard
//! case: no clusters to route through) recall@10 ≥ 0.95 took ef 256 at 20k and ef
//! ≈ 560 at 100k (64 dims, M 16; BENCHMARKS.md), close to √n growth. The 4 × topK
//! keeps a larger top-K's tail as well served as top 10's.
//!
//! **Exact or graph.** A graph walk at ef scores about `GRAPH_COST_PER_EF × ef`
//! vectors' worth of work (scattered reads of neighbour lists), measured against
//! usearch's exact scan on this machine; an index no larger than that, or of at most
//! [`GraphParams::exact_search_max`] values (vectors × dimensions), is scanned exactly
//! (recall 1). A filter's candidates are scored exactly by the same rule, or when
//! there are at most [`GraphParams::exact_scan_max`] of them.

use std::collections::HashSet;

use crate::error::Result;
use crate::limits::GraphParams;
use crate::live::Graph;
use crate::metric::Metric;

/// The largest ef: past it a walk costs more than scanning most indexes it serves.
pub(crate) const MAX_EF: usize = 4096;
/// Vectors scored exactly in the time a graph walk spends per unit of ef.
const GRAPH_COST_PER_EF: usize = 64;

/// The candidate list for a search of `n` vectors for `top_k` (see the module doc).
pub(crate) fn ef(params: &GraphParams, n: usize, top_k: usize) -> usize {
    let base = params.expansion_search.max(4 * top_k);
    let scale = (n as f64 / 5000.0).sqrt().max(1.0);
    ((base as f64 * scale).ceil() as usize).clamp(base, MAX_EF.max(base))
}

/// Whether scanning all `n` vectors of `dims` beats walking the graph at `ef`.
pub(crate) fn exact_is_cheaper(params: &GraphParams, n: usize, dims: usize, ef: usize) -> bool {
    params.exact_search_max > 0
        && (n.saturating_mul(dims) <= params.exact_search_max || n <= GRAPH_COST_PER_EF * ef)
}

/// The `top_k` best (key, score) pairs of the graph and its tail, closest first,
/// among `admit`'s keys when given.
pub(crate) fn nearest(
    graph: &Graph,
    params: &GraphParams,
    metric: Metric,
    query: &[f32],
    top_k: usize,
    admit: Option<&HashSet<u64>>,
) -> Result<Vec<(u64, f32)>> {
    let n = graph.in_graph();
    let ef = ef(params, n, top_k);
    let from_graph = match admit {
        None if exact_is_cheaper(params, n, query.len(), ef) => graph.exact(query, top_k)?,
        None => graph.search(query, top_k, ef, None)?,
        Some(keys) => {
            // A predicate that rejects part of the graph leaves fewer candidates per
            // step; widen the search by the inverse of the share admitted.
            let widened = (ef * n).div_ceil(keys.len().max(1));
            let want = widened.clamp(ef, 4 * ef);
            graph.search(query, top_k, want, Some(&|k| keys.contains(&k)))?
        }
    };
    let mut scored: Vec<(u64, f32)> = from_graph
        .into_iter()
        .map(|(k, d)| (k, metric.score_of_distance(d)))
        .collect();
    scored.extend(
        graph
            .tail
            .iter()
            .filter(|(k, _)| admit.is_none_or(|keys| keys.contains(k)))
            .map(|(k, v)| (*k, metric.score(query, v))),
    );
    Ok(best(scored, metric, top_k))
}

/// The `top_k` best of `keys`, each scored exactly (a filter's candidates).
pub(crate) fn scan(
    graph: &Graph,
    metric: Metric,
    query: &[f32],
    top_k: usize,
    keys: impl IntoIterator<Item = u64>,
) -> Vec<(u64, f32)> {
    let mut buf = vec![0f32; query.len()];
    let mut scored = Vec::new();
    for k in keys {
        if graph.get(k, &mut buf) {
            scored.push((k, metric.score(query, &buf)));
        }
    }
    best(scored, metric, top_k)
}

/// The `top_k` closest of `scored`, each key once (a chunk the worker failed to
/// insert whole can leave a key in both the graph and its tail).
pub(crate) fn best(mut scored: Vec<(u64, f32)>, metric: Metric, top_k: usize) -> Vec<(u64, f32)> {
    scored.sort_by(|a, b| metric.closer_first(a.1, b.1));
    let mut seen = HashSet::with_capacity(scored.len().min(4 * top_k));
    scored.retain(|(k, _)| seen.insert(*k));
    scored.truncate(top_k);
    scored
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ef_grows_with_size_and_top_k_within_bounds() {
        let p = GraphParams::default();
        assert_eq!(ef(&p, 100, 10), 128);
        assert_eq!(ef(&p, 20_000, 10), 256);
        assert!((560..=580).contains(&ef(&p, 100_000, 10)));
        assert_eq!(ef(&p, 20_000, 100), 800);
        assert_eq!(ef(&p, 1 << 40, 10), MAX_EF);
        assert!(ef(&p, 20_000, 10) >= 10);
    }

    #[test]
    fn small_indexes_are_scanned_and_large_ones_walked() {
        let p = GraphParams::default();
        assert!(exact_is_cheaper(&p, 20_000, 384, ef(&p, 20_000, 10)));
        assert!(!exact_is_cheaper(&p, 200_000, 384, ef(&p, 200_000, 10)));
        let off = GraphParams {
            exact_search_max: 0,
            ..p
        };
        assert!(!exact_is_cheaper(&off, 10, 4, 128));
    }

    #[test]
    fn best_keeps_each_key_once() {
        let got = best(
            vec![(1, 0.5), (2, 0.9), (1, 0.5), (3, 0.1)],
            Metric::Cosine,
            3,
        );
        assert_eq!(got, vec![(2, 0.9), (1, 0.5), (3, 0.1)]);
    }
}
