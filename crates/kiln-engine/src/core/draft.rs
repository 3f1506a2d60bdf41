//! The engine's side of speculation (see [`crate::spec`]): before a step, give decoding
//! sequences drafts; while sampling, follow each sequence's rows until one rejects; after
//! it, keep the accepted rows' K/V and drop the rest.
//!
//! Every buffer here is sized at start-up; a sequence's n-gram table is built the first
//! time it drafts. Steps stay allocation-free.

use std::collections::HashMap;

use super::SeqMeta;
use crate::scheduler::{Scheduler, SchedulerOutput};
use crate::sequence::SeqId;
use crate::spec::{
    allot, bucket, Candidate, GlobalAcceptance, NgramIndex, RecentOutputs, SpecMode, StepCosts,
    BUCKETS, MAX_DRAFT,
};

/// Where a candidate's draft comes from.
#[derive(Debug, Clone, Copy)]
enum Source {
    /// Its own tokens, from this position.
    Own(usize),
    /// The recent outputs, from this absolute position.
    Recent(u64),
}
use crate::stats::EngineStats;

/// How far one scheduled sequence got through its rows this step.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Verify {
    /// Sample rows seen.
    rows: usize,
    /// Draft tokens the sampler matched.
    accepted: usize,
    /// A row rejected its draft token or the sequence ended: later rows are ignored.
    stopped: bool,
}

pub(super) struct Speculator {
    mode: SpecMode,
    costs: StepCosts,
    global: GlobalAcceptance,
    recent: RecentOutputs,
    candidates: Vec<Candidate>,
    /// Per candidate: its running index and where its draft comes from.
    sources: Vec<(usize, Source)>,
    lens: Vec<usize>,
    /// Per scheduled sequence of the current step.
    verify: Vec<Verify>,
}

impl Speculator {
    pub(super) fn new(mode: SpecMode, max_seqs: usize) -> Self {
        Self {
            mode,
            costs: StepCosts::default(),
            global: GlobalAcceptance::default(),
            recent: RecentOutputs::default(),
            candidates: Vec::with_capacity(max_seqs),
            sources: Vec::with_capacity(max_seqs),
            lens: Vec::with_capacity(max_seqs),
            verify: Vec::with_capacity(max_seqs),
        }
    }

    pub(super) fn enabled(&self) -> bool {
        self.mode == SpecMode::Auto
    }

    /// Acceptance a new sequence starts from.
    pub(super) fn prior(&self) -> [f32; BUCKETS] {
        self.global.get()
    }

    /// Keeps a finished sequence's output as a draft source for later ones.
    pub(super) fn remember(&mut self, output: &[u32], tag: u64) {
        if self.enabled() {
            self.recent.record(output, tag);
        }
    }

    /// Records a decode-only step's forward time (every row sampled).
    pub(super) fn observe_step(&mut self, rows: usize, ns: f64) {
        self.costs.observe(rows, ns);
    }

    /// Gives drafts to decoding sequences when nothing else is pending (a prefill chunk
    /// makes the step compute-bound, where a draft row costs what it could gain).
    pub(super) fn propose(
        &mut self,
        scheduler: &mut Scheduler,
        metas: &mut HashMap<SeqId, SeqMeta>,
    ) {
        let waiting = scheduler.num_waiting();
        let max_model_len = scheduler.config.max_model_len;
        let running = scheduler.running_mut();
        // A draft a step didn't run (no room in its budget) is not carried over.
        running.iter_mut().for_each(|s| s.draft.clear());
        if !self.enabled() || waiting > 0 || running.iter().any(|s| !s.is_decoding()) {
            return;
        }
        self.candidates.clear();
        self.sources.clear();
        for (i, seq) in running.iter().enumerate() {
            let Some(m) = metas.get_mut(&seq.id) else {
                continue;
            };
            let Some(spec) = m.spec.as_mut() else {
                continue;
            };
            // All accepted plus the bonus token must fit `max_tokens` and the context.
            let room = (m.stop.max_tokens.saturating_sub(seq.num_output_tokens()))
                .min(max_model_len.saturating_sub(seq.tokens.len()))
                .saturating_sub(1)
                .min(MAX_DRAFT);
            if room == 0 {
                continue;
            }
            let index = spec
                .index
                .get_or_insert_with(|| NgramIndex::new(seq.num_prompt_tokens + m.stop.max_tokens));
            index.extend(&seq.tokens);
            // The longer match wins; how much of a recent output is left to copy is
            // seen when copying.
            let own = index.find(&seq.tokens);
            let recent = self.recent.find(&seq.tokens, spec.tag);
            let (len, max_len, source) = match (own, recent) {
                (Some(o), r) if r.is_none_or(|r| r.len <= o.len) => {
                    (o.len, seq.tokens.len() - o.next, Source::Own(o.next))
                }
                (_, Some(r)) => (r.len, room, Source::Recent(r.next)),
                _ => continue,
            };
            spec.bucket = bucket(len);
            self.candidates.push(Candidate {
                rate: spec.acceptance.rate(spec.bucket),
                max_len: room.min(max_len),
            });
            self.sources.push((i, source));
        }
        if self.candidates.is_empty() {
            return;
        }
        self.lens.clear();
        self.lens.resize(self.candidates.len(), 0);
        allot(&self.costs, running.len(), &self.candidates, &mut self.lens);
        for (&(i, source), &len) in self.sources.iter().zip(&self.lens) {
            let seq = &mut running[i];
            match source {
                Source::Own(next) => seq.draft.extend_from_slice(&seq.tokens[next..next + len]),
                Source::Recent(next) => self.recent.draft(next, len, &mut seq.draft),
            }
        }
    }

    /// Starts following the sample rows of this step's `n` scheduled sequences.
    pub(super) fn start_verify(&mut self, n: usize) {
        self.verify.clear();
        self.verify.resize(n, Verify::default());
    }

    /// Which draft row the next sample row of scheduled sequence `k` is, or None if the
    /// sequence already stopped this step (its remaining rows are discarded).
    pub(super) fn next_row(&mut self, k: usize) -> Option<usize> {
        let v = self.verify.get_mut(k).filter(|v| !v.stopped)?;
        v.rows += 1;
        Some(v.rows - 1)
    }

    /// Records what sample row `j` of sequence `k` produced: `Some(token)` if the
    /// sequence goes on; it keeps verifying only if that token is its draft's `j`th.
    pub(super) fn verified(&mut self, k: usize, j: usize, sampled: Option<u32>, draft: &[u32]) {
        let Some(v) = self.verify.get_mut(k) else {
            return;
        };
        match (sampled, draft.get(j)) {
            (Some(t), Some(&d)) if t == d => v.accepted += 1,
            _ => v.stopped = true,
        }
    }

    /// After sampling: advances each scheduled sequence past its accepted rows, frees the
    /// blocks of rejected ones, and records acceptance.
    pub(super) fn settle(
        &mut self,
        out: &SchedulerOutput,
        scheduler: &mut Scheduler,
        metas: &mut HashMap<SeqId, SeqMeta>,
        stats: &EngineStats,
    ) {
        let (kv, running) = scheduler.kv_and_running();
        for (k, sc) in out.scheduled.iter().enumerate() {
            let seq = &mut running[sc.running_index];
            let drafted = seq.draft.len();
            let accepted = self.verify.get(k).map_or(0, |v| v.accepted).min(drafted);
            seq.num_computed_tokens += sc.num_new_tokens - (drafted - accepted);
            if drafted == 0 {
                continue;
            }
            seq.draft.clear();
            kv.truncate(&mut seq.blocks, seq.tokens.len());
            stats.drafted(drafted, accepted);
            if let Some(spec) = metas.get_mut(&seq.id).and_then(|m| m.spec.as_mut()) {
                spec.acceptance.record(spec.bucket, drafted, accepted);
                self.global.record(spec.bucket, drafted, accepted);
            }
        }
    }
}
