//! The scheduler: which sequences run in the next step, and how many tokens each.
//!
//! One model, no prefill/decode phases (vLLM v1's): each step has a token budget.
//! Running sequences go first, decodes before prefill chunks, in priority order; then
//! waiting sequences are admitted while the budget, `max_num_seqs` and free KV blocks
//! allow, their prompts chunked to fit (chunked prefill). When a running sequence can't
//! get a block, the lowest-priority (newest) running sequence is preempted: its blocks are
//! released and it waits to be recomputed (prefix caching usually makes that cheap).
//! Waiting sequences are ordered by (priority, arrival), so a preempted sequence keeps its
//! place and nothing starves within a priority level.

mod queue;
#[cfg(test)]
mod tests;

use crate::kv::KvManager;
use crate::sequence::{SeqId, Sequence};

pub use queue::WaitQueue;

#[derive(Debug, Clone)]
pub struct SchedulerConfig {
    /// Token budget of one step (prefill chunks plus decodes).
    pub max_num_batched_tokens: usize,
    /// Sequences running at once.
    pub max_num_seqs: usize,
    /// Longest sequence (prompt plus output) the model accepts.
    pub max_model_len: usize,
    /// Prompt rows per step that may need logits for prompt log-probabilities; bounds
    /// the chunks of sequences that ask for them (the logits buffer is sized for it).
    pub max_prompt_logprob_rows: usize,
}

/// One sequence's share of a step: rows `num_computed_tokens..+num_new_tokens`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScheduledSeq {
    pub seq_id: SeqId,
    /// Index into [`Scheduler::running`] after scheduling.
    pub running_index: usize,
    pub num_new_tokens: usize,
}

/// The plan for one step; its buffers are reused between steps.
#[derive(Debug, Default)]
pub struct SchedulerOutput {
    pub scheduled: Vec<ScheduledSeq>,
    pub preempted: Vec<SeqId>,
    pub num_batched_tokens: usize,
}

pub struct Scheduler {
    pub config: SchedulerConfig,
    pub kv: KvManager,
    waiting: WaitQueue,
    /// Kept sorted by (priority, arrival).
    running: Vec<Sequence>,
    next_arrival: u64,
    /// Per running index: tokens scheduled this step (0 = not scheduled).
    step_tokens: Vec<usize>,
}

impl Scheduler {
    pub fn new(config: SchedulerConfig, kv: KvManager) -> Self {
        Self {
            config,
            kv,
            waiting: WaitQueue::default(),
            running: Vec::new(),
            next_arrival: 0,
            step_tokens: Vec::new(),
        }
    }

    /// Queues a new sequence (its `arrival` is assigned here).
    pub fn add(&mut self, mut seq: Sequence) {
        seq.arrival = self.next_arrival;
        self.next_arrival += 1;
        self.waiting.push(seq);
    }

    pub fn num_waiting(&self) -> usize {
        self.waiting.len()
    }

    pub fn num_running(&self) -> usize {
        self.running.len()
    }

    pub fn has_work(&self) -> bool {
        !self.running.is_empty() || !self.waiting.is_empty()
    }

    pub fn running(&self) -> &[Sequence] {
        &self.running
    }

    pub fn running_mut(&mut self) -> &mut [Sequence] {
        &mut self.running
    }

    /// The KV manager and the running sequences, borrowed together.
    pub fn kv_and_running(&mut self) -> (&mut KvManager, &mut [Sequence]) {
        (&mut self.kv, &mut self.running)
    }

    /// Removes a sequence wherever it is, releasing its blocks; None if unknown.
    pub fn remove(&mut self, id: SeqId) -> Option<Sequence> {
        if let Some(i) = self.running.iter().position(|s| s.id == id) {
            return Some(self.running.remove(i));
        }
        self.waiting.remove(id)
    }

    /// Plans the next step into `out`.
    pub fn schedule(&mut self, out: &mut SchedulerOutput) {
        out.scheduled.clear();
        out.preempted.clear();
        let mut budget = self.config.max_num_batched_tokens;
        let mut logit_rows = self.config.max_prompt_logprob_rows;
        self.step_tokens.clear();
        self.step_tokens.resize(self.running.len(), 0);

        // Running sequences: decodes first, then partial prefills, each in priority order.
        for decodes in [true, false] {
            let mut i = 0;
            while i < self.running.len() && budget > 0 {
                let s = &self.running[i];
                if self.step_tokens[i] > 0 || s.is_decoding() != decodes {
                    i += 1;
                    continue;
                }
                let wants_logits = s.wants_prompt_logprobs();
                let mut n = s.num_pending().min(budget);
                if wants_logits {
                    n = n.min(logit_rows);
                    if n == 0 {
                        i += 1;
                        continue;
                    }
                }
                // If `i` itself was preempted, the next sequence has moved into slot `i`.
                if self.reserve(i, n, &mut budget, out) {
                    if wants_logits {
                        logit_rows -= n;
                    }
                    i += 1;
                }
            }
        }

        // Waiting sequences, unless this step already had to preempt.
        while out.preempted.is_empty()
            && budget > 0
            && self.running.len() < self.config.max_num_seqs
        {
            if self.waiting.peek().is_some_and(|s| self.leader_pending(s)) {
                // A sibling's prompt is still being computed; admitting now would
                // recompute it instead of sharing its blocks. Keep FCFS: wait a step.
                break;
            }
            let wants_logits = self
                .waiting
                .peek()
                .is_some_and(Sequence::wants_prompt_logprobs);
            if wants_logits && logit_rows == 0 {
                break;
            }
            let Some(mut seq) = self.waiting.pop() else {
                break;
            };
            if seq.blocks.block_table().is_empty() {
                seq.num_computed_tokens = 0;
                // Prompt log-probabilities need every prompt row computed.
                let hit = if wants_logits {
                    0
                } else {
                    let (kv, toks, key) = (&mut self.kv, &seq.tokens, &seq.cache_key);
                    kv.attach_cached_prefix(&mut seq.blocks, toks, key)
                };
                seq.num_computed_tokens = hit;
                if seq.num_preemptions == 0 {
                    seq.num_cached_tokens = hit;
                }
            }
            let mut n = seq.num_pending().min(budget);
            if wants_logits {
                n = n.min(logit_rows);
            }
            let total = seq.num_computed_tokens + n;
            if !self.kv.allocate(&mut seq.blocks, total) {
                // Admission is by free blocks: wait for some to be released.
                seq.blocks.clear();
                seq.num_computed_tokens = 0;
                self.waiting.push(seq);
                break;
            }
            budget -= n;
            if wants_logits {
                logit_rows -= n;
            }
            self.running.push(seq);
            self.step_tokens.push(n);
        }

        // Keep running sorted (admissions may have lower priority values than the tail).
        if self
            .running
            .windows(2)
            .any(|w| w[0].order_key() > w[1].order_key())
        {
            let mut idx: Vec<usize> = (0..self.running.len()).collect();
            idx.sort_by_key(|&i| self.running[i].order_key());
            let mut tokens = vec![0; idx.len()];
            for (new, &old) in idx.iter().enumerate() {
                tokens[new] = self.step_tokens[old];
            }
            self.running.sort_by_key(|s| s.order_key());
            self.step_tokens = tokens;
        }
        for (i, (s, &n)) in self.running.iter().zip(&self.step_tokens).enumerate() {
            if n > 0 {
                out.scheduled.push(ScheduledSeq {
                    seq_id: s.id,
                    running_index: i,
                    num_new_tokens: n,
                });
            }
        }
        out.num_batched_tokens = out.scheduled.iter().map(|s| s.num_new_tokens).sum();
    }

    /// Whether `seq` should wait for its prompt leader to finish computing the prompt.
    fn leader_pending(&self, seq: &Sequence) -> bool {
        let Some(leader) = seq.prompt_leader else {
            return false;
        };
        if self.waiting.contains(leader) {
            return true;
        }
        self.running
            .iter()
            .find(|s| s.id == leader)
            .is_some_and(|s| s.num_computed_tokens < s.num_prompt_tokens)
    }

    /// Reserves blocks for `n` more tokens of running sequence `i`, preempting
    /// lower-priority sequences (from the back) until it fits. False if `i` itself had to
    /// be preempted.
    fn reserve(
        &mut self,
        i: usize,
        n: usize,
        budget: &mut usize,
        out: &mut SchedulerOutput,
    ) -> bool {
        loop {
            let total = self.running[i].num_computed_tokens + n;
            let (kv, seq) = (&mut self.kv, &mut self.running[i]);
            if kv.allocate(&mut seq.blocks, total) {
                self.step_tokens[i] = n;
                *budget -= n;
                return true;
            }
            // The victim is the last (lowest-priority) sequence, never before `i`.
            let victim = self.running.len() - 1;
            *budget += self.step_tokens[victim];
            self.preempt(victim, out);
            if victim == i {
                return false;
            }
        }
    }

    fn preempt(&mut self, i: usize, out: &mut SchedulerOutput) {
        let mut seq = self.running.remove(i);
        self.step_tokens.remove(i);
        seq.blocks.clear();
        seq.num_computed_tokens = 0;
        seq.num_preemptions += 1;
        out.preempted.push(seq.id);
        self.waiting.push(seq);
    }
}
