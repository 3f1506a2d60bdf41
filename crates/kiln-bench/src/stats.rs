//! Percentiles and summaries of latency samples.

use serde::{Deserialize, Serialize};

/// The `p`-th percentile (0–100) of `sorted` (ascending), interpolating linearly between
/// the two nearest ranks, as NumPy's default (and so vLLM's benchmark) does. `None` for
/// no samples.
pub fn percentile(sorted: &[f64], p: f64) -> Option<f64> {
    let last = sorted.len().checked_sub(1)?;
    let rank = (p.clamp(0.0, 100.0) / 100.0) * last as f64;
    let lo = rank.floor() as usize;
    let hi = rank.ceil() as usize;
    let frac = rank - lo as f64;
    Some(sorted[lo] + (sorted[hi] - sorted[lo]) * frac)
}

/// Mean, spread and tail of a set of samples (milliseconds in reports).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    pub count: usize,
    pub mean: f64,
    pub min: f64,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub max: f64,
}

impl Summary {
    /// Summarises `samples` (any order); NaNs are ignored. `None` when none remain.
    pub fn of(samples: &[f64]) -> Option<Summary> {
        let mut v: Vec<f64> = samples.iter().copied().filter(|x| !x.is_nan()).collect();
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        let p = |q| percentile(&v, q).unwrap_or(f64::NAN);
        Some(Summary {
            count: v.len(),
            mean: v.iter().sum::<f64>() / v.len() as f64,
            min: v[0],
            p50: p(50.0),
            p90: p(90.0),
            p99: p(99.0),
            max: v[v.len() - 1],
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_interpolate_like_numpy() {
        // numpy.percentile([1, 2, 3, 4], q) for q = 0, 50, 90, 99, 100.
        let v = [1.0, 2.0, 3.0, 4.0];
        assert_eq!(percentile(&v, 0.0), Some(1.0));
        assert_eq!(percentile(&v, 50.0), Some(2.5));
        assert!((percentile(&v, 90.0).unwrap_or(0.0) - 3.7).abs() < 1e-12);
        assert!((percentile(&v, 99.0).unwrap_or(0.0) - 3.97).abs() < 1e-12);
        assert_eq!(percentile(&v, 100.0), Some(4.0));
        assert_eq!(percentile(&[5.0], 99.0), Some(5.0));
        assert_eq!(percentile(&[], 50.0), None);
    }

    #[test]
    fn summary_of_one_to_hundred() {
        let v: Vec<f64> = (1..=100).rev().map(f64::from).collect();
        let s = Summary::of(&v).expect("non-empty");
        assert_eq!(s.count, 100);
        assert_eq!(s.mean, 50.5);
        assert_eq!((s.min, s.max), (1.0, 100.0));
        assert_eq!(s.p50, 50.5);
        assert!((s.p90 - 90.1).abs() < 1e-9);
        assert!((s.p99 - 99.01).abs() < 1e-9);
        assert!(Summary::of(&[f64::NAN]).is_none());
    }
}
