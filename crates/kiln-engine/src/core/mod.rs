//! `EngineCore::step`: schedule → build the batch → run the model → sample → update.
//!
//! The core owns every piece of mutable engine state and runs on one thread (see
//! [`crate::handle`]); nothing here is shared or locked.

use std::collections::HashMap;
use std::time::Instant;

use kiln_backend::{Backend, CpuBackend};
use kiln_model::Model;
use tokio::sync::mpsc::UnboundedSender;

use crate::config::EngineConfig;
use crate::kv::{DiskTier, KvManager};
use crate::masks::{self, SeqConstraint};
use crate::plan::{StepPlan, SAMPLE_ROW};
use crate::request::{EngineEvent, FinishReason, GenerateRequest, SeqTimings, StopConditions};
use crate::sample::{Sampler, SamplingParams, SeqSamplingState};
use crate::scheduler::{Scheduler, SchedulerConfig, SchedulerOutput};
use crate::sequence::{SeqId, Sequence};
use crate::spec::{key_tag, DraftCounts, SeqSpec, MAX_DRAFT};
use crate::stats::EngineStats;
use crate::{Error, Result};

mod draft;
mod rows;
use draft::Speculator;
use rows::{sample_one, score_prompt_row};

/// Prompt rows per step that may be scored for prompt log-probabilities. Their logits
/// are a vocabulary-sized row each, so this bounds the logits buffer (a long prompt that
/// wants them is prefilled this many rows a step).
const PROMPT_LOGPROB_ROWS: usize = 32;

/// Caller-chosen request id (unique among live requests).
pub type RequestId = u64;

/// Per-sequence state the scheduler doesn't need.
struct SeqMeta {
    req_id: RequestId,
    index: usize,
    sampling: SamplingParams,
    sampler_state: SeqSamplingState,
    stop: std::sync::Arc<StopConditions>,
    events: UnboundedSender<EngineEvent>,
    arrived: Instant,
    scheduled: Option<Instant>,
    first_token: Option<Instant>,
    /// The sequence's grammar, if its request has one.
    constraint: Option<SeqConstraint>,
    /// Its speculation state, unless its request opted out.
    spec: Option<SeqSpec>,
}

pub struct EngineCore<B: Backend = CpuBackend> {
    model: Model<B>,
    kv_cache: B::Kv,
    scheduler: Scheduler,
    plan: StepPlan<B>,
    sched_out: SchedulerOutput,
    sampler: Sampler,
    spec: Speculator,
    meta: HashMap<SeqId, SeqMeta>,
    seqs_of: HashMap<RequestId, Vec<SeqId>>,
    next_seq_id: SeqId,
    eos_ids: Vec<u32>,
    /// Reused per step: sequences that finished, and the tokens banned for one sample.
    finished: Vec<(SeqId, FinishReason)>,
    banned: Vec<u32>,
    /// Whether non-finite logits were already reported (they are logged once).
    non_finite_logged: bool,
    pub stats: EngineStats,
}

impl<B: Backend> EngineCore<B> {
    /// Builds the KV cache and all step buffers up front.
    pub fn new(model: Model<B>, config: EngineConfig, eos_ids: Vec<u32>) -> Result<Self> {
        if config.num_kv_blocks < config.blocks_per_full_seq() {
            return Err(Error::Config(format!(
                "{} KV blocks can't hold one sequence of {} tokens ({} blocks of {}); \
                 raise the KV-cache memory or lower the maximum model length",
                config.num_kv_blocks,
                config.max_model_len,
                config.blocks_per_full_seq(),
                config.block_size
            )));
        }
        if !config.kv_dtype.supports_head_dim(model.config().head_dim) {
            return Err(Error::Config(format!(
                "a {:?} KV cache needs a head size that is a multiple of 32; this model's is {}",
                config.kv_dtype,
                model.config().head_dim
            )));
        }
        let kv_cache = model.new_kv_cache(config.num_kv_blocks, config.block_size, config.kv_dtype);
        let stats = EngineStats::new(config.num_kv_blocks);
        let mut kv = KvManager::new(
            config.num_kv_blocks,
            config.block_size,
            config.enable_prefix_caching,
        );
        if let Some(disk) = config
            .kv_disk
            .as_ref()
            .filter(|_| config.enable_prefix_caching)
        {
            // A cache: a tier that cannot open costs its hits, not the model.
            match DiskTier::open(disk, stats.clone()) {
                Ok(tier) => kv.set_disk_tier(tier),
                Err(e) => {
                    tracing::warn!(dir = %disk.root.display(), error = %e, "KV disk tier unavailable; prefixes are cached in RAM only")
                }
            }
        }
        let scheduler = Scheduler::new(
            SchedulerConfig {
                max_num_batched_tokens: config.max_num_batched_tokens,
                max_num_seqs: config.max_num_seqs,
                background_step_tokens: config.background_step_tokens,
                max_model_len: config.max_model_len,
                max_prompt_logprob_rows: PROMPT_LOGPROB_ROWS,
            },
            kv,
        );
        let max_logits =
            config.max_num_seqs + PROMPT_LOGPROB_ROWS + crate::spec::policy::MAX_STEP_DRAFT;
        let ws = model.new_workspace(
            config.max_num_batched_tokens,
            max_logits,
            config.max_model_len,
        );
        let max_table = config.max_num_seqs * config.blocks_per_full_seq();
        let plan = StepPlan::new(
            config.max_num_batched_tokens,
            config.max_num_seqs,
            max_table,
            max_logits,
            ws,
        );
        Ok(Self {
            model,
            kv_cache,
            scheduler,
            plan,
            sched_out: SchedulerOutput::default(),
            sampler: Sampler::new(),
            spec: Speculator::new(config.speculative, config.max_num_seqs),
            meta: HashMap::new(),
            seqs_of: HashMap::new(),
            next_seq_id: 0,
            eos_ids,
            // Sized for every sequence: a step that finishes one must not allocate.
            finished: Vec::with_capacity(config.max_num_seqs),
            banned: Vec::new(),
            non_finite_logged: false,
            stats,
        })
    }

    pub fn max_model_len(&self) -> usize {
        self.scheduler.config.max_model_len
    }

    pub fn model(&self) -> &Model<B> {
        &self.model
    }

    pub fn has_work(&self) -> bool {
        self.scheduler.has_work()
    }

    pub fn kv(&self) -> &KvManager {
        &self.scheduler.kv
    }

    /// Queues a request's `n` sequences; events go to `events`.
    pub fn add_request(
        &mut self,
        req_id: RequestId,
        req: GenerateRequest,
        events: UnboundedSender<EngineEvent>,
        arrived: Instant,
    ) -> Result<()> {
        validate(&req, self.scheduler.config.max_model_len)?;
        if let Some(a) = req
            .adapter
            .as_ref()
            .filter(|a| !a.fits(self.model.config()))
        {
            return Err(Error::Validation(format!(
                "adapter `{}` was loaded for another model",
                a.name
            )));
        }
        let cache_key = cache_key(&req);
        if self.seqs_of.contains_key(&req_id) {
            return Err(Error::Validation(format!(
                "request id {req_id} is already live"
            )));
        }
        // Every completion gets its own constraint; start them all before queueing any.
        let vocab = self.model.config().vocab_size;
        let mut constraints = Vec::with_capacity(req.n.max(1));
        if let Some(factory) = &req.constraint {
            for _ in 0..req.n.max(1) {
                let c = factory
                    .start()
                    .map_err(|e| Error::Validation(format!("cannot start the constraint: {e}")))?;
                constraints.push(SeqConstraint::new(c, vocab));
            }
            self.stats.constrained(req.n.max(1));
        }
        let mut constraints = constraints.into_iter();
        let stop = std::sync::Arc::new(req.stop);
        let base_seed = req.sampling.seed.unwrap_or_else(rand::random);
        let mut ids = Vec::with_capacity(req.n);
        for index in 0..req.n.max(1) {
            let id = self.next_seq_id;
            self.next_seq_id += 1;
            let seed = base_seed.wrapping_add(index as u64);
            self.meta.insert(
                id,
                SeqMeta {
                    req_id,
                    index,
                    sampler_state: SeqSamplingState::new(&req.sampling, seed, &req.prompt),
                    sampling: req.sampling.clone(),
                    stop: stop.clone(),
                    events: events.clone(),
                    arrived,
                    scheduled: None,
                    first_token: None,
                    constraint: constraints.next(),
                    spec: req
                        .speculative
                        .then(|| SeqSpec::new(self.spec.prior(), key_tag(&cache_key))),
                },
            );
            self.scheduler.add(Sequence {
                id,
                priority: req.priority,
                arrival: 0,
                tokens: {
                    let mut t = Vec::with_capacity(req.prompt.len() + stop.max_tokens);
                    t.extend_from_slice(&req.prompt);
                    t
                },
                num_prompt_tokens: req.prompt.len(),
                num_computed_tokens: 0,
                cache_key: cache_key.clone(),
                adapter: req.adapter.clone(),
                blocks: {
                    let mut b = self
                        .scheduler
                        .kv
                        .new_seq(req.prompt.len() + stop.max_tokens);
                    if req.adapter.is_some() {
                        b.keep_off_disk();
                    }
                    b
                },
                num_cached_tokens: 0,
                num_preemptions: 0,
                prompt_leader: ids.first().copied(),
                // Completions share the prompt: the first one reports its logprobs.
                prompt_logprobs: req.sampling.prompt_logprobs.filter(|_| index == 0),
                prompt_logprob_next: 1,
                draft: Vec::with_capacity(MAX_DRAFT),
            });
            ids.push(id);
        }
        self.seqs_of.insert(req_id, ids);
        self.stats.requests_added(req.n.max(1));
        Ok(())
    }

    /// Ends every sequence of a request (their blocks go back to the pool now).
    pub fn abort_request(&mut self, req_id: RequestId) {
        let Some(ids) = self.seqs_of.get(&req_id).cloned() else {
            return;
        };
        for id in ids {
            self.finish(id, FinishReason::Abort);
        }
    }

    /// Ends one completion of a request (a stop string matched on the consumer side).
    pub fn abort_seq(&mut self, req_id: RequestId, index: usize) {
        let id = self.seqs_of.get(&req_id).and_then(|ids| {
            ids.iter()
                .copied()
                .find(|id| self.meta.get(id).is_some_and(|m| m.index == index))
        });
        if let Some(id) = id {
            self.finish(id, FinishReason::Abort);
        }
    }

    /// Runs one step; returns false if there was nothing to do.
    pub fn step(&mut self) -> bool {
        let t0 = Instant::now();
        self.spec.propose(&mut self.scheduler, &mut self.meta);
        self.promote_from_disk();
        self.scheduler.schedule(&mut self.sched_out);
        if self.sched_out.scheduled.is_empty() {
            return false;
        }
        let now = Instant::now();
        for sc in &self.sched_out.scheduled {
            let seq = &self.scheduler.running()[sc.running_index];
            if let Some(m) = self.meta.get_mut(&seq.id) {
                if m.scheduled.is_none() {
                    m.scheduled = Some(now);
                    let _ = m.events.send(EngineEvent::Scheduled {
                        index: m.index,
                        cached_tokens: seq.num_cached_tokens,
                    });
                }
            }
        }
        self.stats.preemptions(self.sched_out.preempted.len());
        let block_size = self.scheduler.kv.block_size();
        self.plan
            .build(&self.sched_out, self.scheduler.running(), block_size);
        let masks_due = mark_masks_due(
            &mut self.meta,
            &self.plan,
            &self.sched_out,
            self.scheduler.running(),
        );
        // Every row sampled: a decode-only step, whose time prices draft rows.
        let decode_only = self.plan.logits_rows.len() == self.plan.token_ids.len()
            && self.plan.logits_target.iter().all(|&t| t == SAMPLE_ROW);
        self.spec.start_verify(self.sched_out.scheduled.len());
        let t_sched = Instant::now();
        let (batch, ws, logits_owner, logits_target) = self.plan.input();
        let (model, kv_cache, meta) = (&self.model, &mut self.kv_cache, &mut self.meta);
        let result = if masks_due {
            // Masks of the sequences sampled this step, beside the forward pass.
            std::thread::scope(|s| {
                let masks = s.spawn(|| {
                    masks::fill_due(meta.values_mut().filter_map(|m| m.constraint.as_mut()))
                });
                let result = model.forward(&batch, kv_cache, ws);
                let t_forward = Instant::now();
                // A panicked mask thread leaves its masks to be computed when sampling.
                let mask_time = masks.join().unwrap_or_default();
                self.stats.masks(mask_time, t_forward.elapsed());
                result
            })
        } else {
            model.forward(&batch, kv_cache, ws)
        };
        let t_model = Instant::now();
        if decode_only && result.is_ok() {
            let rows = self.sched_out.num_batched_tokens;
            self.spec
                .observe_step(rows, (t_model - t_sched).as_nanos() as f64);
        }
        let vocab = self.model.config().vocab_size;
        let mut n_sampled = 0;
        match result {
            Ok(logits) => {
                // Score prompt rows; sample for every sequence that caught up.
                for (row, (&k, &target)) in logits_owner.iter().zip(logits_target).enumerate() {
                    let sc = self.sched_out.scheduled[k];
                    let logits_row = &mut logits[row * vocab..(row + 1) * vocab];
                    if target != SAMPLE_ROW {
                        score_prompt_row(
                            &mut self.scheduler,
                            &self.meta,
                            &mut self.sampler,
                            &mut self.finished,
                            sc.running_index,
                            target as usize,
                            logits_row,
                        );
                        continue;
                    }
                    // Past a rejected draft token, a sequence's rows are stale.
                    let Some(j) = self.spec.next_row(k) else {
                        continue;
                    };
                    n_sampled += 1;
                    let sampled = sample_one(
                        &mut self.scheduler,
                        &mut self.meta,
                        &mut self.sampler,
                        &mut self.banned,
                        &mut self.finished,
                        &self.eos_ids,
                        sc.running_index,
                        logits_row,
                    );
                    let draft = &self.scheduler.running()[sc.running_index].draft;
                    self.spec.verified(k, j, sampled, draft);
                }
            }
            Err(e) => {
                // A failed step ends the sequences in it; the loop keeps running.
                tracing_error(&e);
                for sc in &self.sched_out.scheduled {
                    let id = self.scheduler.running()[sc.running_index].id;
                    self.finished.push((id, FinishReason::Abort));
                }
            }
        }
        let t_sampled = Instant::now();
        let forward_profile = self.plan.workspace.profile();
        // Advance computed tokens past the accepted rows, and publish full blocks to the
        // prefix cache.
        self.spec.settle(
            &self.sched_out,
            &mut self.scheduler,
            &mut self.meta,
            &self.stats,
        );
        let (kv, running) = self.scheduler.kv_and_running();
        for sc in &self.sched_out.scheduled {
            let seq = &mut running[sc.running_index];
            kv.commit(
                &mut seq.blocks,
                &seq.tokens,
                seq.num_computed_tokens,
                &seq.cache_key,
            );
        }
        let kv_cache = &self.kv_cache;
        kv.write_to_disk(|b, out| B::export_kv_block(kv_cache, b as usize, out));
        self.stats.sampled(n_sampled);
        self.stats.step_parts(
            forward_profile.matmul,
            forward_profile.attention,
            t_sampled - t_model,
        );
        while let Some((id, reason)) = self.finished.pop() {
            self.finish(id, reason);
        }
        let t_end = Instant::now();
        self.stats.step(
            self.sched_out.num_batched_tokens,
            t_sched - t0,
            t_model - t_sched,
            t_end - t_model,
        );
        self.publish_gauges();
        true
    }

    /// Brings the disk tier's blocks of the next waiting prompts into RAM, so the
    /// scheduler admits them with those blocks cached (each sequence is looked up once).
    fn promote_from_disk(&mut self) {
        let n = self.scheduler.config.max_num_seqs;
        let kv_cache = &mut self.kv_cache;
        let (kv, waiting) = self.scheduler.kv_and_next_waiting(n);
        for seq in waiting.filter(|s| !s.wants_prompt_logprobs()) {
            kv.promote_from_disk(&mut seq.blocks, &seq.tokens, &seq.cache_key, |b, bytes| {
                B::import_kv_block(kv_cache, b as usize, bytes)
            });
        }
    }

    /// Updates the running/waiting/KV gauges readers see.
    pub fn publish_gauges(&self) {
        self.stats.set_gauges(
            self.scheduler.num_running(),
            self.scheduler.num_waiting(),
            self.scheduler.kv.usage(),
            self.scheduler.kv.prefix_stats(),
        );
    }

    fn finish(&mut self, id: SeqId, reason: FinishReason) {
        if reason == FinishReason::NonFinite && !self.non_finite_logged {
            self.non_finite_logged = true;
            let tensor = self.model.first_non_finite_tensor();
            tracing::error!(
                first_bad_tensor = tensor
                    .as_deref()
                    .unwrap_or("none (overflow in the computation)"),
                "the model produced non-finite logits; failing the sequences that got them"
            );
        }
        let Some(m) = self.meta.remove(&id) else {
            return;
        };
        let seq = self.scheduler.remove(id);
        if let Some(ids) = self.seqs_of.get_mut(&m.req_id) {
            ids.retain(|&s| s != id);
            if ids.is_empty() {
                self.seqs_of.remove(&m.req_id);
            }
        }
        let n_out = seq.as_ref().map_or(0, |s| s.num_output_tokens());
        self.stats.seq_finished(reason, n_out);
        if let (Some(s), Some(spec), FinishReason::Stop | FinishReason::Length) =
            (&seq, &m.spec, reason)
        {
            self.spec
                .remember(&s.tokens[s.num_prompt_tokens..], spec.tag);
        }
        let _ = m.events.send(EngineEvent::Finished {
            index: m.index,
            reason,
            timings: SeqTimings {
                arrived: m.arrived,
                scheduled: m.scheduled,
                first_token: m.first_token,
                finished: Instant::now(),
            },
            drafts: m.spec.map_or_else(DraftCounts::default, |s| DraftCounts {
                drafted: s.acceptance.drafted,
                accepted: s.acceptance.accepted,
            }),
        });
        // `seq` drops here, returning its blocks to the pool.
    }
}

/// Checks what the engine can't serve: an empty prompt, or prompt plus `max_tokens`
/// past the context.
pub fn validate(req: &GenerateRequest, max_model_len: usize) -> Result<()> {
    if req.prompt.is_empty() {
        return Err(Error::Validation("the prompt has no tokens".into()));
    }
    if req.prompt.len() + req.stop.max_tokens > max_model_len {
        return Err(Error::ContextLength {
            prompt: req.prompt.len(),
            max_tokens: req.stop.max_tokens,
            max_model_len,
        });
    }
    Ok(())
}

/// The prefix-cache key of a request's sequences: its own key, plus the adapter's load
/// id (the same tokens under another adapter have other K/V).
fn cache_key(req: &GenerateRequest) -> Vec<u8> {
    let mut key = req.cache_key.clone();
    if let Some(a) = &req.adapter {
        key.extend_from_slice(b"\0lora:");
        key.extend_from_slice(&a.id().to_le_bytes());
    }
    key
}

/// Marks the constraints of the sequences this step samples, so their masks are computed
/// beside the forward pass; returns whether there are any.
fn mark_masks_due<B: Backend>(
    metas: &mut HashMap<SeqId, SeqMeta>,
    plan: &StepPlan<B>,
    out: &SchedulerOutput,
    running: &[Sequence],
) -> bool {
    let mut any = false;
    for (&k, _) in plan
        .logits_owner
        .iter()
        .zip(&plan.logits_target)
        .filter(|(_, &t)| t == SAMPLE_ROW)
    {
        let id = running[out.scheduled[k].running_index].id;
        if let Some(c) = metas.get_mut(&id).and_then(|m| m.constraint.as_mut()) {
            c.mark_due();
            any = true;
        }
    }
    any
}

fn tracing_error(e: &kiln_model::Error) {
    tracing::error!(error = %e, "step failed; ending the sequences in it");
}
