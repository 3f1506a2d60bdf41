//! Shared helpers: seeded data and a database in a temporary directory.

#![allow(dead_code)]

use kiln_vectors::{GraphParams, Limits, VectorDb, VectorRecord};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

pub fn open(dir: &std::path::Path) -> VectorDb {
    VectorDb::open(dir, Limits::default(), GraphParams::default()).expect("open")
}

/// `vectors` as records with ids `v{from}`, `v{from + 1}`, …, and `metadata(i)` for
/// record `i` (its number in the whole set).
pub fn records(
    vectors: &[Vec<f32>],
    from: usize,
    metadata: impl Fn(usize) -> Option<serde_json::Map<String, serde_json::Value>>,
) -> Vec<VectorRecord> {
    vectors
        .iter()
        .enumerate()
        .map(|(j, v)| VectorRecord {
            id: format!("v{}", from + j),
            values: v.clone(),
            namespace: None,
            metadata: metadata(from + j),
        })
        .collect()
}

/// `n` unit vectors of `dims` around `clusters` random centres (embeddings cluster by
/// topic; uniform noise in high dimensions has no neighbours worth finding).
pub fn clustered(n: usize, dims: usize, clusters: usize, seed: u64) -> Vec<Vec<f32>> {
    let mut rng = StdRng::seed_from_u64(seed);
    let centres: Vec<Vec<f32>> = (0..clusters)
        .map(|_| unit(&mut rng, dims, None, 1.0))
        .collect();
    (0..n)
        .map(|i| unit(&mut rng, dims, Some(&centres[i % clusters]), 0.08))
        .collect()
}

/// A unit vector: `around` (or the origin) plus uniform noise of `noise`, normalized.
pub fn unit(rng: &mut StdRng, dims: usize, around: Option<&[f32]>, noise: f32) -> Vec<f32> {
    let mut v: Vec<f32> = (0..dims)
        .map(|d| around.map_or(0.0, |c| c[d]) + noise * (rng.random::<f32>() * 2.0 - 1.0))
        .collect();
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    v.iter_mut().for_each(|x| *x /= norm);
    v
}

pub fn cosine(a: &[f32], b: &[f32]) -> f32 {
    let dot: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let n = |v: &[f32]| v.iter().map(|x| x * x).sum::<f32>().sqrt();
    dot / (n(a) * n(b))
}

/// The exact top `k` ids among `(id, vector)` by cosine.
pub fn exact_top<'a>(
    q: &[f32],
    items: impl Iterator<Item = (&'a String, &'a Vec<f32>)>,
    k: usize,
) -> Vec<String> {
    let mut s: Vec<(f32, &String)> = items.map(|(id, v)| (cosine(q, v), id)).collect();
    s.sort_by(|a, b| b.0.total_cmp(&a.0));
    s.into_iter().take(k).map(|(_, id)| id.clone()).collect()
}

/// `n` random Gaussian vectors of `dims` (Box-Muller): no clusters for a graph to
/// route through, the hard case for recall.
pub fn gaussian(n: usize, dims: usize, seed: u64) -> Vec<Vec<f32>> {
    let mut rng = StdRng::seed_from_u64(seed);
    (0..n)
        .map(|_| {
            (0..dims)
                .map(|_| {
                    let u: f64 = rng.random::<f64>().max(1e-12);
                    let v: f64 = rng.random();
                    ((-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()) as f32
                })
                .collect()
        })
        .collect()
}
