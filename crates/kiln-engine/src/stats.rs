//! Engine counters and gauges, written by the engine thread and read by anyone (metrics
//! endpoints, benchmarks) through atomics: no lock on the hot path.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use crate::kv::PrefixCacheStats;
use crate::request::FinishReason;
use crate::spec::MAX_DRAFT;

/// Steps of at least this many tokens price a computed prompt token (decode steps cost
/// far more per token, and would overstate what a disk hit saves).
const PREFILL_STEP: usize = 64;

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
    finished_non_finite: AtomicU64,
    generation_tokens: AtomicU64,
    batched_tokens: AtomicU64,
    preemptions: AtomicU64,
    steps: AtomicU64,
    schedule_ns: AtomicU64,
    model_ns: AtomicU64,
    update_ns: AtomicU64,
    matmul_ns: AtomicU64,
    attention_ns: AtomicU64,
    sample_ns: AtomicU64,
    detokenize_ns: AtomicU64,
    constrained_seqs: AtomicU64,
    mask_ns: AtomicU64,
    mask_wait_ns: AtomicU64,
    spec_drafts: AtomicU64,
    spec_draft_tokens: AtomicU64,
    spec_accepted_tokens: AtomicU64,
    spec_accepted_per_pos: [AtomicU64; MAX_DRAFT],
    /// Forward time and tokens of prefill-sized steps (see `PREFILL_STEP`).
    prefill_ns: AtomicU64,
    prefill_tokens: AtomicU64,
    disk_hit_tokens: AtomicU64,
    disk_miss_tokens: AtomicU64,
    disk_read_bytes: AtomicU64,
    disk_written_bytes: AtomicU64,
    disk_stored_bytes: AtomicU64,
    disk_bad_blocks: AtomicU64,
    disk_skipped_blocks: AtomicU64,
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
    /// Sequences ended because the model's logits held a NaN or an infinity.
    pub finished_non_finite: u64,
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
    /// Parts of `model_time`: weight matmuls and paged attention (the rest is norms,
    /// RoPE, activations, residuals and the embedding lookup).
    pub matmul_time: Duration,
    pub attention_time: Duration,
    /// Part of `update_time`: sampling and prompt logprobs.
    pub sample_time: Duration,
    /// Detokenization and stop-string matching, on the consumers' threads.
    pub detokenize_time: Duration,
    /// Sequences started with a constraint (a grammar).
    pub constrained_seqs: u64,
    /// Time computing constraint masks, on a thread beside the forward pass.
    pub mask_time: Duration,
    /// Part of `model_time`: the step waiting for masks after its forward pass ended
    /// (what masks cost the step's critical path).
    pub mask_wait_time: Duration,
    pub spec_decode: SpecDecodeStats,
    pub kv_disk: KvDiskStats,
}

/// The KV disk tier's counters (all zero without one).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct KvDiskStats {
    /// Prompt tokens whose blocks were read from disk instead of computed.
    pub hit_tokens: u64,
    /// Prompt tokens looked up on disk (past the RAM cache) and not found.
    pub miss_tokens: u64,
    pub read_bytes: u64,
    pub written_bytes: u64,
    /// Bytes of block files the tier holds now.
    pub stored_bytes: u64,
    /// Block files that failed their checks (deleted, never used).
    pub bad_blocks: u64,
    /// Blocks not written because the writer was behind or the disk failed.
    pub skipped_blocks: u64,
    /// Forward-pass time the hits saved, estimated at the mean time per token of the
    /// prefill-sized steps run so far (0 until one has run).
    pub saved_time: Duration,
}

/// Speculative decoding counters, with vLLM's meanings.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SpecDecodeStats {
    /// Drafts verified (one per drafting sequence per step).
    pub drafts: u64,
    pub draft_tokens: u64,
    pub accepted_tokens: u64,
    /// Drafts whose token at each position was accepted.
    pub accepted_per_pos: [u64; MAX_DRAFT],
}

/// One phase's share of the time accounted for, for the per-step profile.
#[derive(Debug, Clone, PartialEq)]
pub struct ProfileEntry {
    pub phase: &'static str,
    pub time: Duration,
}

impl StatsSnapshot {
    /// Where step time went, by phase: scheduling (and batch building), matmul,
    /// attention, other model ops, sampling, the rest of the update, and detokenization.
    pub fn profile(&self) -> Vec<ProfileEntry> {
        let ops = self
            .model_time
            .saturating_sub(self.matmul_time + self.attention_time);
        let rest = self.update_time.saturating_sub(self.sample_time);
        [
            ("schedule", self.schedule_time),
            ("matmul", self.matmul_time),
            ("attention", self.attention_time),
            ("norm_rope_act", ops),
            ("sampling", self.sample_time),
            ("update", rest),
            ("detokenize", self.detokenize_time),
        ]
        .into_iter()
        .map(|(phase, time)| ProfileEntry { phase, time })
        .collect()
    }

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
            FinishReason::NonFinite => &self.0.finished_non_finite,
        };
        c.fetch_add(1, Relaxed);
    }

    /// Counts tokens sampled this step; called before any sequence of the step is
    /// reported finished, so a reader that saw a request end sees its tokens counted.
    pub(crate) fn sampled(&self, sampled: usize) {
        self.0.generation_tokens.fetch_add(sampled as u64, Relaxed);
    }

    pub(crate) fn step(
        &self,
        batched_tokens: usize,
        schedule: Duration,
        model: Duration,
        update: Duration,
    ) {
        let i = &self.0;
        i.steps.fetch_add(1, Relaxed);
        i.batched_tokens.fetch_add(batched_tokens as u64, Relaxed);
        i.schedule_ns.fetch_add(schedule.as_nanos() as u64, Relaxed);
        i.model_ns.fetch_add(model.as_nanos() as u64, Relaxed);
        i.update_ns.fetch_add(update.as_nanos() as u64, Relaxed);
        if batched_tokens >= PREFILL_STEP {
            i.prefill_ns.fetch_add(model.as_nanos() as u64, Relaxed);
            i.prefill_tokens.fetch_add(batched_tokens as u64, Relaxed);
        }
    }

    /// Adds one step's forward-pass breakdown and sampling time.
    pub(crate) fn step_parts(&self, matmul: Duration, attention: Duration, sample: Duration) {
        let i = &self.0;
        i.matmul_ns.fetch_add(matmul.as_nanos() as u64, Relaxed);
        i.attention_ns
            .fetch_add(attention.as_nanos() as u64, Relaxed);
        i.sample_ns.fetch_add(sample.as_nanos() as u64, Relaxed);
    }

    pub(crate) fn constrained(&self, n_seqs: usize) {
        self.0.constrained_seqs.fetch_add(n_seqs as u64, Relaxed);
    }

    /// Adds one step's mask computation time and how long the step waited for it.
    pub(crate) fn masks(&self, compute: Duration, wait: Duration) {
        let i = &self.0;
        i.mask_ns.fetch_add(compute.as_nanos() as u64, Relaxed);
        i.mask_wait_ns.fetch_add(wait.as_nanos() as u64, Relaxed);
    }

    /// Counts a verified draft of `drafted` tokens whose first `accepted` were accepted.
    pub(crate) fn drafted(&self, drafted: usize, accepted: usize) {
        let i = &self.0;
        i.spec_drafts.fetch_add(1, Relaxed);
        i.spec_draft_tokens.fetch_add(drafted as u64, Relaxed);
        i.spec_accepted_tokens.fetch_add(accepted as u64, Relaxed);
        for pos in &i.spec_accepted_per_pos[..accepted.min(MAX_DRAFT)] {
            pos.fetch_add(1, Relaxed);
        }
    }

    /// Adds time a consumer spent turning tokens into text.
    pub(crate) fn detokenized(&self, time: Duration) {
        self.0
            .detokenize_ns
            .fetch_add(time.as_nanos() as u64, Relaxed);
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

    pub(crate) fn kv_disk_lookup(&self, hit_tokens: usize, miss_tokens: usize) {
        self.0.disk_hit_tokens.fetch_add(hit_tokens as u64, Relaxed);
        self.0
            .disk_miss_tokens
            .fetch_add(miss_tokens as u64, Relaxed);
    }

    pub(crate) fn kv_disk_read(&self, bytes: u64) {
        self.0.disk_read_bytes.fetch_add(bytes, Relaxed);
    }

    pub(crate) fn kv_disk_written(&self, bytes: u64) {
        self.0.disk_written_bytes.fetch_add(bytes, Relaxed);
    }

    pub(crate) fn kv_disk_stored(&self, bytes: u64) {
        self.0.disk_stored_bytes.store(bytes, Relaxed);
    }

    pub(crate) fn kv_disk_bad_block(&self) {
        self.0.disk_bad_blocks.fetch_add(1, Relaxed);
    }

    pub(crate) fn kv_disk_skipped(&self) {
        self.0.disk_skipped_blocks.fetch_add(1, Relaxed);
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
            finished_non_finite: l(&i.finished_non_finite),
            generation_tokens: l(&i.generation_tokens),
            batched_tokens: l(&i.batched_tokens),
            preemptions: l(&i.preemptions),
            steps: l(&i.steps),
            schedule_time: Duration::from_nanos(l(&i.schedule_ns)),
            model_time: Duration::from_nanos(l(&i.model_ns)),
            update_time: Duration::from_nanos(l(&i.update_ns)),
            matmul_time: Duration::from_nanos(l(&i.matmul_ns)),
            attention_time: Duration::from_nanos(l(&i.attention_ns)),
            sample_time: Duration::from_nanos(l(&i.sample_ns)),
            detokenize_time: Duration::from_nanos(l(&i.detokenize_ns)),
            constrained_seqs: l(&i.constrained_seqs),
            mask_time: Duration::from_nanos(l(&i.mask_ns)),
            mask_wait_time: Duration::from_nanos(l(&i.mask_wait_ns)),
            spec_decode: SpecDecodeStats {
                drafts: l(&i.spec_drafts),
                draft_tokens: l(&i.spec_draft_tokens),
                accepted_tokens: l(&i.spec_accepted_tokens),
                accepted_per_pos: std::array::from_fn(|p| l(&i.spec_accepted_per_pos[p])),
            },
            kv_disk: KvDiskStats {
                hit_tokens: l(&i.disk_hit_tokens),
                miss_tokens: l(&i.disk_miss_tokens),
                read_bytes: l(&i.disk_read_bytes),
                written_bytes: l(&i.disk_written_bytes),
                stored_bytes: l(&i.disk_stored_bytes),
                bad_blocks: l(&i.disk_bad_blocks),
                skipped_blocks: l(&i.disk_skipped_blocks),
                saved_time: Duration::from_nanos(
                    (l(&i.prefill_ns) as f64 / l(&i.prefill_tokens).max(1) as f64
                        * l(&i.disk_hit_tokens) as f64) as u64,
                ),
            },
        }
    }
}
