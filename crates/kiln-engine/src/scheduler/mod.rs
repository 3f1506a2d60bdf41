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
//!
//! Priorities keep background work (batch jobs) out of interactive latency: a step
//! serves only sequences at or above the most urgent level with prompt tokens pending,
//! so an interactive prompt is computed in a step with no batch work in it (batch
//! decodes skip that step); and a waiting sequence that finds every slot or block taken
//! preempts a less urgent running one. An urgent request therefore starts after at most
//! the step already running, whatever the batch load; and that step is short, because
//! while urgent sequences (priority 0 or less) run, wait, or did within the last
//! [`URGENT_WINDOW_STEPS`], background ones (positive priority) get at most
//! `background_step_tokens` per step. With no urgent work about, background work fills
//! whole steps.

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
    /// Tokens per step for background sequences (positive priority) while urgent ones
    /// (priority 0 or less) run, wait, or did within [`URGENT_WINDOW_STEPS`].
    pub background_step_tokens: usize,
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
    /// Steps since one had an urgent sequence running or waiting.
    steps_since_urgent: usize,
}

/// Steps after the last urgent sequence during which background steps stay short: a
/// client's next request usually follows within them.
pub const URGENT_WINDOW_STEPS: usize = 64;

impl Scheduler {
    pub fn new(config: SchedulerConfig, kv: KvManager) -> Self {
        Self {
            config,
            kv,
            waiting: WaitQueue::default(),
            running: Vec::new(),
            next_arrival: 0,
            step_tokens: Vec::new(),
            steps_since_urgent: usize::MAX,
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

    /// The KV manager, and the waiting sequences next in line (at most `n`).
    pub fn kv_and_next_waiting(
        &mut self,
        n: usize,
    ) -> (&mut KvManager, impl Iterator<Item = &mut Sequence>) {
        (&mut self.kv, self.waiting.iter_mut().take(n))
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

        // The most urgent priority level with prompt tokens pending: the step serves
        // nothing less urgent, so an urgent prompt's step is as short as when the node
        // is idle (less urgent decodes wait that one step).
        let level = self.prefill_level();
        // Background tokens this step: few while urgent work is about, so a step in
        // flight when an urgent request arrives is short.
        let mut background = self.background_budget();

        // Running sequences at or above that level: decodes first, then partial
        // prefills, each in priority order.
        for decodes in [true, false] {
            let mut i = 0;
            while i < self.running.len() && budget > 0 {
                let s = &self.running[i];
                if self.step_tokens[i] > 0
                    || s.is_decoding() != decodes
                    || level.is_some_and(|l| s.priority > l)
                {
                    i += 1;
                    continue;
                }
                let (wants_logits, bg) = (s.wants_prompt_logprobs(), s.priority > 0);
                let mut n = (s.num_pending() + s.draft.len()).min(budget);
                if wants_logits {
                    n = n.min(logit_rows);
                }
                if bg {
                    n = n.min(background);
                }
                if n == 0 {
                    i += 1;
                    continue;
                }
                n = self.fit_draft(i, n);
                // If `i` itself was preempted, the next sequence has moved into slot `i`.
                if self.reserve(i, n, &mut budget, out) {
                    if wants_logits {
                        logit_rows -= n;
                    }
                    if bg {
                        background -= n;
                    }
                    i += 1;
                }
            }
        }

        // Waiting sequences at that level, unless this step already had to preempt for
        // lack of blocks. A waiting sequence that finds no slot or no blocks takes them
        // from a less urgent running one.
        let short_of_blocks = !out.preempted.is_empty();
        while !short_of_blocks && budget > 0 {
            let Some(head) = self.waiting.peek() else {
                break;
            };
            if level.is_some_and(|l| head.priority > l) {
                break;
            }
            if self.leader_pending(head) {
                // A sibling's prompt is still being computed; admitting now would
                // recompute it instead of sharing its blocks. Keep FCFS: wait a step.
                break;
            }
            let (wants_logits, priority) = (head.wants_prompt_logprobs(), head.priority);
            if (wants_logits && logit_rows == 0) || (priority > 0 && background == 0) {
                break;
            }
            if self.running.len() >= self.config.max_num_seqs
                && !self.preempt_less_urgent(priority, &mut budget, out)
            {
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
            if priority > 0 {
                n = n.min(background);
            }
            let total = seq.num_computed_tokens + n;
            let mut admitted = self.kv.allocate(&mut seq.blocks, total);
            while !admitted && self.preempt_less_urgent(priority, &mut budget, out) {
                admitted = self.kv.allocate(&mut seq.blocks, total);
            }
            if !admitted {
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
            if priority > 0 {
                background -= n;
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

    /// This step's token budget for background sequences: `background_step_tokens`
    /// while urgent work runs, waits, or did within the window; else no limit.
    fn background_budget(&mut self) -> usize {
        let urgent = self.running.iter().any(|s| s.priority <= 0)
            || self.waiting.peek().is_some_and(|s| s.priority <= 0);
        self.steps_since_urgent = if urgent {
            0
        } else {
            self.steps_since_urgent.saturating_add(1)
        };
        if self.steps_since_urgent <= URGENT_WINDOW_STEPS {
            self.config.background_step_tokens.max(1)
        } else {
            usize::MAX
        }
    }

    /// The most urgent priority (lowest value) among sequences with prompt tokens to
    /// compute: running prefills and the head of the wait queue.
    fn prefill_level(&self) -> Option<i32> {
        let running = self
            .running
            .iter()
            .filter(|s| !s.is_decoding())
            .map(|s| s.priority);
        running.chain(self.waiting.peek().map(|s| s.priority)).min()
    }

    /// Preempts the least urgent running sequence if it is less urgent than `priority`
    /// (returning its step tokens to the budget): false if there is none.
    fn preempt_less_urgent(
        &mut self,
        priority: i32,
        budget: &mut usize,
        out: &mut SchedulerOutput,
    ) -> bool {
        let victim = (0..self.running.len()).max_by_key(|&i| self.running[i].order_key());
        let Some(victim) = victim.filter(|&i| self.running[i].priority > priority) else {
            return false;
        };
        *budget += self.step_tokens[victim];
        self.preempt(victim, out);
        true
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

    /// Cuts running sequence `i`'s draft to the `n` rows it got (a draft is what follows
    /// its pending tokens), or drops it if its blocks can't be had while leaving a block
    /// for every running sequence's next token: a guess never displaces real work.
    /// Returns the rows to schedule.
    fn fit_draft(&mut self, i: usize, n: usize) -> usize {
        let reserve = self.running.len();
        let (kv, seq) = (&mut self.kv, &mut self.running[i]);
        let pending = seq.num_pending();
        let total = seq.num_computed_tokens + n;
        let spare = kv.num_free_blocks() >= kv.blocks_needed(&seq.blocks, total) + reserve;
        if n <= pending || !spare || !kv.allocate(&mut seq.blocks, total) {
            seq.draft.clear();
            return n.min(pending);
        }
        seq.draft.truncate(n - pending);
        n
    }

    fn preempt(&mut self, i: usize, out: &mut SchedulerOutput) {
        let mut seq = self.running.remove(i);
        self.step_tokens.remove(i);
        seq.draft.clear();
        seq.blocks.clear();
        seq.num_computed_tokens = 0;
        seq.num_preemptions += 1;
        out.preempted.push(seq.id);
        self.waiting.push(seq);
    }
}
