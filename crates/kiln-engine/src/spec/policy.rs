//! How many draft tokens each sequence gets this step, so that speculation never costs.
//!
//! A draft row pays off when the tokens it is expected to add outweigh what it adds to
//! the step's time. Both sides are measured, not assumed:
//! - each sequence's acceptance rate (an average over its recent verified positions, its
//!   start taken from every sequence's), kept apart by the length of the match the draft
//!   came from, since a long match is copied text and far likelier to go on; draft
//!   position `j` is expected to add `a^(j+1)` tokens;
//! - the forward time of steps by their row count ([`StepCosts`]), kept for decode-only
//!   steps, on this machine, model and context.
//!
//! Rows are handed out one at a time to the position with the best odds, and the step
//! keeps the prefix of that order with the most expected tokens per second. At batch 1,
//! where the weights' bandwidth bounds the step, a row costs a fraction of a step, so
//! likely drafts run long; with many sequences, where the step is compute-bound, a row
//! costs as much as the tokens it would add and nothing is drafted. That is the "never
//! costs under load" rule, by arithmetic.

/// Most draft tokens for one sequence in one step.
pub const MAX_DRAFT: usize = 32;
/// Most draft tokens in one step (bounds the logits buffer).
pub const MAX_STEP_DRAFT: usize = 64;
/// Row counts whose step time is tracked.
const MAX_TRACKED_ROWS: usize = 128;
/// Assumed cost of an extra row, as a share of the largest measured smaller step, until
/// that row count has been measured: a guess low enough that drafts get tried, and
/// trying measures the truth.
const PRIOR_ROW_COST: f64 = 0.05;
/// Weight of the newest observation in the running averages.
const STEP_ALPHA: f64 = 0.2;
/// Observations after which a row count not seen again counts as unmeasured.
const STALE_AFTER: u64 = 256;
const ACCEPT_ALPHA: f32 = 0.15;
/// Match-length groups with their own acceptance rates.
pub const BUCKETS: usize = 3;
/// Acceptance assumed per group before any sequence has verified a draft.
const PRIOR_ACCEPTANCE: [f32; BUCKETS] = [0.4, 0.6, 0.8];

/// The acceptance group of a draft from a match of `len` tokens.
pub fn bucket(len: usize) -> usize {
    match len {
        0..=3 => 0,
        4..=15 => 1,
        _ => 2,
    }
}

/// Moves `rate` toward what positions `0..k.min(m + 1)` of a draft showed: the first `m`
/// accepted, the next (if drafted) rejected.
fn update(rate: &mut f32, alpha: f32, k: usize, m: usize) {
    for j in 0..k.min(m + 1) {
        let hit = if j < m { 1.0 } else { 0.0 };
        *rate += alpha * (hit - *rate);
    }
}

/// Average forward time of decode-only steps, by row count.
///
/// A row count's average is forgotten once [`STALE_AFTER`] observations have passed
/// without it. The policy only measures the counts it picks, so one slow sample at a
/// count (a stall in the first long draft) would otherwise price every count near it
/// too high for good, and the policy would never pick it again to find out; forgotten,
/// the count is estimated from its fresh neighbours and tried again.
pub struct StepCosts {
    ns: Vec<f64>,
    /// The observation number at which each count was last seen.
    seen: Vec<u64>,
    observations: u64,
}

impl Default for StepCosts {
    fn default() -> Self {
        Self {
            ns: vec![0.0; MAX_TRACKED_ROWS + 1],
            seen: vec![0; MAX_TRACKED_ROWS + 1],
            observations: 0,
        }
    }
}

impl StepCosts {
    /// Records a decode-only step of `rows` rows that took `ns` nanoseconds.
    pub fn observe(&mut self, rows: usize, ns: f64) {
        if rows == 0 || rows > MAX_TRACKED_ROWS {
            return;
        }
        let fresh = self.measured(rows);
        self.observations += 1;
        self.seen[rows] = self.observations;
        let t = &mut self.ns[rows];
        *t = if fresh {
            *t + STEP_ALPHA * (ns - *t)
        } else {
            ns
        };
    }

    /// Whether `rows` has an average that is not stale.
    fn measured(&self, rows: usize) -> bool {
        self.ns[rows] > 0.0 && self.observations - self.seen[rows] < STALE_AFTER
    }

    /// Expected time of a step of `rows` rows; None before any smaller step was seen.
    ///
    /// Between two measured row counts it interpolates; past the largest it extends the
    /// measured slope (per row, from the smallest to the largest measured count), or
    /// [`PRIOR_ROW_COST`] of a step while only one count is known. A measured larger
    /// step caps every smaller one, measured or not: a step never costs more for having
    /// fewer rows, so one slow sample (a page fault, a busy core) can't leave a row
    /// count looking dear for good when the policy would never pick it again to correct
    /// the average.
    pub fn estimate(&self, rows: usize) -> Option<f64> {
        if rows == 0 || rows > MAX_TRACKED_ROWS {
            return None;
        }
        let measured = |r: usize| self.measured(r);
        let own = if measured(rows) {
            self.ns[rows]
        } else {
            let below = (1..rows).rev().find(|&r| measured(r))?;
            match (rows + 1..=MAX_TRACKED_ROWS).find(|&r| measured(r)) {
                Some(above) => {
                    let f = (rows - below) as f64 / (above - below) as f64;
                    self.ns[below] + f * (self.ns[above] - self.ns[below])
                }
                None => {
                    let first = (1..=below).find(|&r| measured(r)).unwrap_or(below);
                    let slope = if below > first {
                        ((self.ns[below] - self.ns[first]) / (below - first) as f64).max(0.0)
                    } else {
                        PRIOR_ROW_COST * self.ns[below]
                    };
                    self.ns[below] + slope * (rows - below) as f64
                }
            }
        };
        let cap = (rows + 1..=MAX_TRACKED_ROWS)
            .filter(|&r| measured(r))
            .map(|r| self.ns[r])
            .fold(f64::INFINITY, f64::min);
        Some(own.min(cap))
    }
}

/// One sequence's speculation record.
#[derive(Debug, Clone, Copy)]
pub struct SeqAcceptance {
    /// Chance that a draft token is accepted given the ones before it were, by group.
    rate: [f32; BUCKETS],
    /// Draft tokens verified and accepted, for the response's usage.
    pub drafted: u64,
    pub accepted: u64,
}

impl SeqAcceptance {
    pub fn new(prior: [f32; BUCKETS]) -> Self {
        Self {
            rate: prior,
            drafted: 0,
            accepted: 0,
        }
    }

    pub fn rate(&self, bucket: usize) -> f32 {
        self.rate[bucket]
    }

    /// Records a verified draft of `k` tokens from group `bucket` of which the first `m`
    /// were accepted.
    pub fn record(&mut self, bucket: usize, k: usize, m: usize) {
        self.drafted += k as u64;
        self.accepted += m as u64;
        update(&mut self.rate[bucket], ACCEPT_ALPHA, k, m);
    }
}

/// The engine-wide acceptance averages new sequences start from (slower to move).
pub struct GlobalAcceptance([f32; BUCKETS]);

impl Default for GlobalAcceptance {
    fn default() -> Self {
        Self(PRIOR_ACCEPTANCE)
    }
}

impl GlobalAcceptance {
    pub fn get(&self) -> [f32; BUCKETS] {
        self.0
    }

    pub fn record(&mut self, bucket: usize, k: usize, m: usize) {
        update(&mut self.0[bucket], ACCEPT_ALPHA * 0.2, k, m);
    }
}

/// A sequence that may draft this step: its acceptance rate and the longest draft its
/// match and limits allow.
#[derive(Debug, Clone, Copy)]
pub struct Candidate {
    pub rate: f32,
    pub max_len: usize,
}

/// Hands out draft lengths: `lens[i]` for `candidates[i]`, with `decode_rows` plain
/// decode rows in the step (every decoding sequence, drafting or not).
///
/// Rows go to the position with the best odds, one at a time, up to the step's limit;
/// the step keeps the prefix of that order with the most expected tokens per second.
/// Not stopping at the first row that doesn't pay: step times rise in stairs (a new
/// token tile, a second pass of a kernel), so a row that costs a stair can be followed
/// by several nearly free ones.
pub fn allot(costs: &StepCosts, decode_rows: usize, candidates: &[Candidate], lens: &mut [usize]) {
    lens.iter_mut().for_each(|l| *l = 0);
    let Some(t0) = costs.estimate(decode_rows) else {
        return;
    };
    let mut order = [0usize; MAX_STEP_DRAFT];
    let mut tokens = decode_rows as f64;
    let (mut best_rate, mut best_len) = (tokens / t0, 0);
    let mut total = 0;
    // The next position of sequence `i` adds `rate^(lens[i] + 1)` expected tokens.
    let gain = |i: usize, len: usize| f64::from(candidates[i].rate).powi(len as i32 + 1);
    while total < MAX_STEP_DRAFT {
        let best = (0..candidates.len())
            .filter(|&i| lens[i] < candidates[i].max_len.min(MAX_DRAFT))
            .max_by(|&a, &b| gain(a, lens[a]).total_cmp(&gain(b, lens[b])));
        let Some(i) = best else { break };
        let Some(t) = costs.estimate(decode_rows + total + 1) else {
            break;
        };
        tokens += gain(i, lens[i]);
        lens[i] += 1;
        order[total] = i;
        total += 1;
        if tokens / t > best_rate {
            (best_rate, best_len) = (tokens / t, total);
        }
    }
    for &i in &order[best_len..total] {
        lens[i] -= 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn costs(f: impl Fn(usize) -> f64) -> StepCosts {
        let mut c = StepCosts::default();
        for r in 1..=64 {
            c.observe(r, f(r));
        }
        c
    }

    #[test]
    fn cheap_rows_and_good_odds_draft_long() {
        // Bandwidth-bound: each extra row costs 2%.
        let c = costs(|r| 1000.0 * (1.0 + 0.02 * (r - 1) as f64));
        let mut lens = [0];
        allot(
            &c,
            1,
            &[Candidate {
                rate: 0.9,
                max_len: 16,
            }],
            &mut lens,
        );
        assert!(lens[0] >= 12, "{lens:?}");
    }

    #[test]
    fn compute_bound_steps_draft_nothing() {
        // Every row costs as much as the first: a draft row can't pay for itself.
        let c = costs(|r| 1000.0 * r as f64);
        let mut lens = [0; 8];
        let cands = [Candidate {
            rate: 0.9,
            max_len: 16,
        }; 8];
        allot(&c, 8, &cands, &mut lens);
        assert_eq!(lens, [0; 8]);
    }

    #[test]
    fn poor_odds_draft_less_than_good_ones() {
        let c = costs(|r| 1000.0 * (1.0 + 0.1 * (r - 1) as f64));
        let cands = [
            Candidate {
                rate: 0.95,
                max_len: 16,
            },
            Candidate {
                rate: 0.2,
                max_len: 16,
            },
        ];
        let mut lens = [0; 2];
        allot(&c, 2, &cands, &mut lens);
        assert!(lens[0] > lens[1], "{lens:?}");
        assert!(lens.iter().sum::<usize>() <= MAX_STEP_DRAFT);
    }

    #[test]
    fn no_measurement_no_draft_and_limits_hold() {
        let mut lens = [7];
        let c = StepCosts::default();
        allot(
            &c,
            1,
            &[Candidate {
                rate: 1.0,
                max_len: 16,
            }],
            &mut lens,
        );
        assert_eq!(lens, [0], "nothing measured yet");
        let c = costs(|_| 1000.0);
        allot(
            &c,
            1,
            &[Candidate {
                rate: 1.0,
                max_len: 3,
            }],
            &mut lens,
        );
        assert_eq!(lens, [3], "the match's length caps the draft");
    }

    #[test]
    fn unmeasured_rows_are_interpolated_and_extended_along_the_slope() {
        let mut c = StepCosts::default();
        c.observe(1, 1000.0);
        assert_eq!(
            c.estimate(3),
            Some(1100.0),
            "the prior while one count is known"
        );
        c.observe(10, 1900.0);
        assert_eq!(c.estimate(2), Some(1100.0));
        assert_eq!(c.estimate(9), Some(1800.0));
        assert_eq!(
            c.estimate(12),
            Some(2100.0),
            "the measured slope, 100 a row"
        );
    }

    #[test]
    fn a_slow_sample_cannot_make_fewer_rows_dearer_than_more() {
        let mut c = StepCosts::default();
        c.observe(1, 1000.0);
        c.observe(2, 1100.0);
        c.observe(3, 5000.0); // one stall
        c.observe(4, 1300.0);
        assert_eq!(c.estimate(3), Some(1300.0));
        let mut lens = [0];
        let cand = [Candidate {
            rate: 0.95,
            max_len: 3,
        }];
        allot(&c, 1, &cand, &mut lens);
        assert_eq!(lens, [3], "the stall doesn't stop the draft at one token");
    }

    #[test]
    fn a_slow_sample_at_a_long_draft_is_forgotten_and_the_draft_tried_again() {
        // The first 16-row step stalled; plain and 2-row steps go on being measured.
        let mut c = StepCosts::default();
        c.observe(1, 1000.0);
        c.observe(16, 40_000.0);
        let cand = [Candidate {
            rate: 0.95,
            max_len: 15,
        }];
        let mut lens = [0];
        c.observe(2, 1100.0);
        allot(&c, 1, &cand, &mut lens);
        assert_eq!(
            lens,
            [1],
            "while the stall is remembered, rows past 2 look dear"
        );
        for _ in 0..STALE_AFTER / 2 {
            c.observe(1, 1000.0);
            c.observe(2, 1100.0);
        }
        assert_eq!(c.estimate(16), Some(2500.0), "the fresh slope, 100 a row");
        allot(&c, 1, &cand, &mut lens);
        assert_eq!(lens, [15], "forgotten, the long draft is tried again");
        // Re-measured after being forgotten, a count starts from its new sample.
        c.observe(16, 2000.0);
        assert_eq!(c.estimate(16), Some(2000.0));
    }

    #[test]
    fn a_costly_stair_is_climbed_when_the_rows_past_it_pay() {
        // Rows 2–4 share a tile; the 5th row starts another that costs 60% of a step,
        // but rows 5–16 after it are nearly free.
        let c = costs(|r| 1000.0 + 20.0 * r as f64 + if r >= 5 { 600.0 } else { 0.0 });
        let mut lens = [0];
        let cand = [Candidate {
            rate: 0.99,
            max_len: 16,
        }];
        allot(&c, 1, &cand, &mut lens);
        assert_eq!(lens, [16]);
        let mut lens = [0];
        let cand = [Candidate {
            rate: 0.5,
            max_len: 16,
        }];
        allot(&c, 1, &cand, &mut lens);
        assert!(
            (1..=3).contains(&lens[0]),
            "{lens:?}: past the stair doesn't pay at 0.5"
        );
    }

    #[test]
    fn acceptance_tracks_recent_verifications() {
        let mut a = SeqAcceptance::new([0.5; BUCKETS]);
        for _ in 0..20 {
            a.record(2, 8, 8);
        }
        assert!(a.rate(2) > 0.95);
        for _ in 0..20 {
            a.record(2, 8, 0);
        }
        assert!(a.rate(2) < 0.1);
        assert_eq!(a.rate(0), 0.5, "other groups untouched");
        assert_eq!((a.drafted, a.accepted), (320, 160));
        assert_eq!((bucket(2), bucket(4), bucket(15), bucket(16)), (0, 1, 1, 2));
    }
}
