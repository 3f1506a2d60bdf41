//! Engine counters and gauges, written by the engine thread and read by anyone (metrics
//! endpoints, benchmarks) through atomics: no lock on the hot path.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use crate::kv::PrefixCacheStats;
use crate::request::FinishReason;

#[derive(Default)]
struct Inner {
    num_running: AtomicU64,
    num_waiting: AtomicU64,
    kv_usage_ppm: AtomicU64,
    num_kv_blocks: AtomicU64,
    prefix_queries: AtomicU64,
    prefix_hits: AtomicU64,
    seqs_added: AtomicU64,
    finished_stop: AtomicU64,
    finished_length: AtomicU64,
    finished_abort: AtomicU64,
    generation_tokens: AtomicU64,
    batched_tokens: AtomicU64,
    preemptions: AtomicU64,
    steps: AtomicU64,
    schedule_ns: AtomicU64,
    model_ns: AtomicU64,
    update_ns: AtomicU64,
}

/// A cheap, cloneable view of the engine's counters.
#[derive(Clone, Default)]
pub struct EngineStats(Arc<Inner>);

/// A point-in-time copy of [`EngineStats`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StatsSnapshot {
    pub num_running: u64,
    pub num_waiting: u64,
    /// Share of KV blocks held by live sequences (0..=1).
    pub kv_usage: f64,
    pub num_kv_blocks: u64,
    pub prefix_cache: PrefixCacheStats,
    pub seqs_added: u64,
    pub finished_stop: u64,
    pub finished_length: u64,
    pub finished_abort: u64,
    /// Tokens sampled (generation tokens).
    pub generation_tokens: u64,
    /// Tokens run through the model (prompt and generated).
    pub batched_tokens: u64,
    pub preemptions: u64,
    pub steps: u64,
    /// Time spent scheduling and building batches.
    pub schedule_time: Duration,
    /// Time inside the model's forward pass.
    pub model_time: Duration,
    /// Time sampling and updating state after the forward pass.
    pub update_time: Duration,
}

impl StatsSnapshot {
    /// Share of step time spent outside the model's kernels.
    pub fn host_overhead(&self) -> f64 {
        let host = (self.schedule_time + self.update_time).as_secs_f64();
        let total = host + self.model_time.as_secs_f64();
        if total == 0.0 {
            0.0
        } else {
            host / total
        }
    }
}

impl EngineStats {
    pub fn new(num_kv_blocks: usize) -> Self {
        let s = Self::default();
        s.0.num_kv_blocks.store(num_kv_blocks as u64, Relaxed);
        s
    }

    pub(crate) fn requests_added(&self, n_seqs: usize) {
        self.0.seqs_added.fetch_add(n_seqs as u64, Relaxed);
    }

    pub(crate) fn preemptions(&self, n: usize) {
        self.0.preemptions.fetch_add(n as u64, Relaxed);
    }

    pub(crate) fn seq_finished(&self, reason: FinishReason, _n_out: usize) {
        let c = match reason {
            FinishReason::Stop => &self.0.finished_stop,
            FinishReason::Length => &self.0.finished_length,
            FinishReason::Abort => &self.0.finished_abort,
        };
        c.fetch_add(1, Relaxed);
    }

    pub(crate) fn step(
        &self,
        batched_tokens: usize,
        sampled: usize,
        schedule: Duration,
        model: Duration,
        update: Duration,
    ) {
        let i = &self.0;
        i.steps.fetch_add(1, Relaxed);
        i.batched_tokens.fetch_add(batched_tokens as u64, Relaxed);
        i.generation_tokens.fetch_add(sampled as u64, Relaxed);
        i.schedule_ns.fetch_add(schedule.as_nanos() as u64, Relaxed);
        i.model_ns.fetch_add(model.as_nanos() as u64, Relaxed);
        i.update_ns.fetch_add(update.as_nanos() as u64, Relaxed);
    }

    pub(crate) fn set_gauges(
        &self,
        running: usize,
        waiting: usize,
        kv_usage: f64,
        prefix: PrefixCacheStats,
    ) {
        let i = &self.0;
        i.num_running.store(running as u64, Relaxed);
        i.num_waiting.store(waiting as u64, Relaxed);
        i.kv_usage_ppm.store((kv_usage * 1e6) as u64, Relaxed);
        i.prefix_queries.store(prefix.queries, Relaxed);
        i.prefix_hits.store(prefix.hits, Relaxed);
    }

    pub fn snapshot(&self) -> StatsSnapshot {
        let i = &self.0;
        let l = |a: &AtomicU64| a.load(Relaxed);
        StatsSnapshot {
            num_running: l(&i.num_running),
            num_waiting: l(&i.num_waiting),
            kv_usage: l(&i.kv_usage_ppm) as f64 / 1e6,
            num_kv_blocks: l(&i.num_kv_blocks),
            prefix_cache: PrefixCacheStats {
                queries: l(&i.prefix_queries),
                hits: l(&i.prefix_hits),
            },
            seqs_added: l(&i.seqs_added),
            finished_stop: l(&i.finished_stop),
            finished_length: l(&i.finished_length),
            finished_abort: l(&i.finished_abort),
            generation_tokens: l(&i.generation_tokens),
            batched_tokens: l(&i.batched_tokens),
            preemptions: l(&i.preemptions),
            steps: l(&i.steps),
            schedule_time: Duration::from_nanos(l(&i.schedule_ns)),
            model_time: Duration::from_nanos(l(&i.model_ns)),
            update_time: Duration::from_nanos(l(&i.update_ns)),
        }
    }
}
