//! Timing one kernel call: warm-up calls, then timed repetitions until both a minimum
//! count and a time budget are reached; the median is what the report quotes.

use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::stats::percentile;

/// How many times, and for how long, each kernel is called.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TimingPlan {
    pub warmup: usize,
    pub min_reps: usize,
    pub max_reps: usize,
    /// Repetitions continue until at least this much time was spent in them.
    pub budget: Duration,
}

/// Seconds per call over the timed repetitions.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct CallTime {
    pub reps: usize,
    pub median_s: f64,
    pub min_s: f64,
}

/// Calls `f(i)` for `i = 0, 1, 2, ...` (warm-up first) and times each timed call.
pub(crate) fn time_calls(plan: &TimingPlan, mut f: impl FnMut(usize)) -> CallTime {
    for i in 0..plan.warmup {
        f(i);
    }
    let mut samples = Vec::with_capacity(plan.min_reps.max(16));
    let mut spent = Duration::ZERO;
    let mut i = plan.warmup;
    while samples.len() < plan.max_reps.max(1)
        && (samples.len() < plan.min_reps.max(1) || spent < plan.budget)
    {
        let start = Instant::now();
        f(i);
        let took = start.elapsed();
        spent += took;
        samples.push(took.as_secs_f64());
        i += 1;
    }
    samples.sort_by(f64::total_cmp);
    CallTime {
        reps: samples.len(),
        median_s: percentile(&samples, 50.0).unwrap_or(f64::NAN),
        min_s: samples.first().copied().unwrap_or(f64::NAN),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_warmup_then_at_least_min_reps() {
        let plan = TimingPlan {
            warmup: 2,
            min_reps: 5,
            max_reps: 7,
            budget: Duration::ZERO,
        };
        let mut seen = vec![];
        let t = time_calls(&plan, |i| seen.push(i));
        assert_eq!(seen, (0..7).collect::<Vec<_>>());
        assert_eq!(t.reps, 5);
        assert!(t.min_s <= t.median_s);
        let capped = TimingPlan {
            max_reps: 3,
            budget: Duration::from_secs(3600),
            ..plan
        };
        assert_eq!(time_calls(&capped, |_| ()).reps, 3);
    }
}
