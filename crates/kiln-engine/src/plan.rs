//! Step buffers built once at startup and reused by every step.
//!
//! This is Kiln's CPU analogue of Infire's per-batch-size CUDA graphs: the batch arrays
//! and the model workspace are sized for the largest step (`max_num_batched_tokens` rows,
//! `max_num_seqs` logits rows) before the first request, so the step loop only clears
//! and refills them — no heap allocation per step. Kernel choice is resolved once per
//! weight matrix at load (a function-pointer table), not per call.

use std::sync::Arc;

use kiln_backend::{Backend, CpuBackend};
use kiln_model::{BatchInput, LoraAdapter, LoraBatch, SeqSpan, Workspace};

use crate::scheduler::SchedulerOutput;

/// `logits_target` of a row that is sampled rather than scored.
pub const SAMPLE_ROW: u32 = u32::MAX;
use crate::sequence::Sequence;

pub struct StepPlan<B: Backend = CpuBackend> {
    pub token_ids: Vec<u32>,
    pub positions: Vec<u32>,
    pub slot_mapping: Vec<u32>,
    pub seqs: Vec<SeqSpan>,
    pub block_tables: Vec<u32>,
    pub logits_rows: Vec<u32>,
    /// For each logits row, the index into `SchedulerOutput::scheduled`.
    pub logits_owner: Vec<usize>,
    /// For each logits row, the prompt position whose log-probability it gives, or
    /// [`SAMPLE_ROW`] for a row the sequence samples its next token from.
    pub logits_target: Vec<u32>,
    /// The adapters of this step's sequences, and each row's index into them (from 1;
    /// 0: none). Both stay empty in a step without adapters.
    pub adapters: Vec<Arc<LoraAdapter>>,
    pub lora_rows: Vec<u16>,
    pub workspace: Workspace<B>,
}

impl<B: Backend> StepPlan<B> {
    /// Buffers for steps of up to `max_rows` tokens, `max_seqs` sequences, `max_blocks`
    /// block-table entries and `max_logits` logits rows.
    pub fn new(
        max_rows: usize,
        max_seqs: usize,
        max_blocks: usize,
        max_logits: usize,
        workspace: Workspace<B>,
    ) -> Self {
        Self {
            token_ids: Vec::with_capacity(max_rows),
            positions: Vec::with_capacity(max_rows),
            slot_mapping: Vec::with_capacity(max_rows),
            seqs: Vec::with_capacity(max_seqs),
            block_tables: Vec::with_capacity(max_blocks),
            logits_rows: Vec::with_capacity(max_logits),
            logits_owner: Vec::with_capacity(max_logits),
            logits_target: Vec::with_capacity(max_logits),
            adapters: Vec::with_capacity(max_seqs),
            lora_rows: Vec::with_capacity(max_rows),
            workspace,
        }
    }

    /// Fills the batch arrays for the scheduled sequences.
    pub fn build(&mut self, out: &SchedulerOutput, running: &[Sequence], block_size: usize) {
        self.token_ids.clear();
        self.positions.clear();
        self.slot_mapping.clear();
        self.seqs.clear();
        self.block_tables.clear();
        self.logits_rows.clear();
        self.logits_owner.clear();
        self.logits_target.clear();
        self.adapters.clear();
        self.lora_rows.clear();
        let any_adapter = out
            .scheduled
            .iter()
            .any(|sc| running[sc.running_index].adapter.is_some());
        for (k, sc) in out.scheduled.iter().enumerate() {
            let seq = &running[sc.running_index];
            let table = seq.blocks.block_table();
            let start_row = self.token_ids.len();
            let first = seq.num_computed_tokens;
            let scores_prompt = seq.wants_prompt_logprobs();
            // Rows past the sequence's tokens are its draft's (see `crate::spec`).
            let real = seq.tokens.len();
            for pos in first..first + sc.num_new_tokens {
                let token = match seq.tokens.get(pos) {
                    Some(&t) => t,
                    None => seq.draft[pos - real],
                };
                self.token_ids.push(token);
                self.positions.push(pos as u32);
                let slot = table[pos / block_size] as usize * block_size + pos % block_size;
                self.slot_mapping.push(slot as u32);
                // Row `pos` predicts prompt token `pos + 1`.
                let target = pos + 1;
                if scores_prompt
                    && target >= seq.prompt_logprob_next
                    && target < seq.num_prompt_tokens
                {
                    self.logits_rows.push((self.token_ids.len() - 1) as u32);
                    self.logits_owner.push(k);
                    self.logits_target.push(target as u32);
                }
            }
            self.seqs.push(SeqSpan {
                start: start_row,
                len: sc.num_new_tokens,
                table_start: self.block_tables.len(),
                table_len: table.len(),
            });
            self.block_tables.extend_from_slice(table);
            if any_adapter {
                let index = self.adapter_index(seq.adapter.as_ref());
                self.lora_rows
                    .extend(std::iter::repeat_n(index, sc.num_new_tokens));
            }
            // Only a sequence that catches up with its tokens samples this step: from its
            // last token's row, and from each draft row after it.
            let end = first + sc.num_new_tokens;
            if end >= real {
                for pos in real - 1..end {
                    self.logits_rows.push((start_row + pos - first) as u32);
                    self.logits_owner.push(k);
                    self.logits_target.push(SAMPLE_ROW);
                }
            }
        }
    }

    /// Row index of `adapter` in this step's list (added if new); 0 for none.
    fn adapter_index(&mut self, adapter: Option<&Arc<LoraAdapter>>) -> u16 {
        let Some(a) = adapter else { return 0 };
        let i = match self.adapters.iter().position(|b| Arc::ptr_eq(a, b)) {
            Some(i) => i,
            None => {
                self.adapters.push(a.clone());
                self.adapters.len() - 1
            }
        };
        // At most `max_num_seqs` adapters a step, far below u16::MAX.
        u16::try_from(i + 1).unwrap_or(u16::MAX)
    }

    /// The model input for the built batch, the workspace to run it in, and for each
    /// logits row the index of its sequence in the scheduler output and its target.
    pub fn input(&mut self) -> (BatchInput<'_>, &mut Workspace<B>, &[usize], &[u32]) {
        (
            BatchInput {
                token_ids: &self.token_ids,
                positions: &self.positions,
                slot_mapping: &self.slot_mapping,
                seqs: &self.seqs,
                block_tables: &self.block_tables,
                logits_rows: &self.logits_rows,
                lora: LoraBatch {
                    adapters: &self.adapters,
                    rows: &self.lora_rows,
                },
            },
            &mut self.workspace,
            &self.logits_owner,
            &self.logits_target,
        )
    }
}
