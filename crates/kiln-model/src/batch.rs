//! The input of one forward step: a flat batch of tokens from many sequences.
//!
//! This is vLLM's model-runner input: rows are tokens (prefill chunks and single decode
//! tokens mixed), each with its position and the KV slot it writes; each sequence names
//! its rows and its block table.

use kiln_backend::SeqSpan;

use crate::config::ModelConfig;
use crate::lora::LoraBatch;
use crate::{Error, Result};

pub struct BatchInput<'a> {
    pub token_ids: &'a [u32],
    /// Position of each row within its sequence.
    pub positions: &'a [u32],
    /// KV slot (`block * block_size + offset`) each row's K/V are written to.
    pub slot_mapping: &'a [u32],
    /// Sequences in row order; their rows must tile `0..token_ids.len()`.
    pub seqs: &'a [SeqSpan],
    /// Every sequence's block table, back to back (see [`SeqSpan::table_start`]).
    pub block_tables: &'a [u32],
    /// Rows whose logits are wanted, in output order.
    pub logits_rows: &'a [u32],
    /// Each row's LoRA adapter (empty: none in this step).
    pub lora: LoraBatch<'a>,
}

impl BatchInput<'_> {
    pub fn n_rows(&self) -> usize {
        self.token_ids.len()
    }

    /// Checks every index the forward pass will use, so a bad batch is an error rather
    /// than a panic or a write into another sequence's blocks.
    pub(crate) fn validate(
        &self,
        cfg: &ModelConfig,
        block_size: usize,
        num_blocks: usize,
    ) -> Result<()> {
        let (n, vocab) = (self.token_ids.len(), cfg.vocab_size);
        let bad = |m: String| Err(Error::InvalidBatch(m));
        if !self.lora.is_empty() {
            if self.lora.rows.len() != n {
                return bad(format!(
                    "{n} tokens but {} adapter rows",
                    self.lora.rows.len()
                ));
            }
            if let Some(a) = self.lora.adapters.iter().find(|a| !a.fits(cfg)) {
                return bad(format!("adapter {:?} was loaded for another model", a.name));
            }
            let k = self.lora.adapters.len();
            if let Some(i) = self.lora.rows.iter().find(|&&i| i as usize > k) {
                return bad(format!("a row names adapter {i} of {k}"));
            }
        }
        if self.positions.len() != n || self.slot_mapping.len() != n {
            return bad(format!(
                "{n} tokens but {} positions and {} slots",
                self.positions.len(),
                self.slot_mapping.len()
            ));
        }
        if let Some(t) = self.token_ids.iter().find(|&&t| t as usize >= vocab) {
            return bad(format!("token id {t} is outside the vocabulary of {vocab}"));
        }
        let mut next_row = 0;
        for (i, s) in self.seqs.iter().enumerate() {
            if s.start != next_row || s.len == 0 {
                return bad(format!("sequence {i} does not continue at row {next_row}"));
            }
            next_row += s.len;
            if next_row > n {
                return bad(format!("sequence {i} runs past the {n} rows"));
            }
            if s.table_start + s.table_len > self.block_tables.len() {
                return bad(format!("sequence {i}'s block table is out of range"));
            }
            let table = s.block_table(self.block_tables);
            if let Some(b) = table.iter().find(|&&b| b as usize >= num_blocks) {
                return bad(format!("sequence {i} names block {b} of {num_blocks}"));
            }
            for r in s.start..s.start + s.len {
                let pos = self.positions[r] as usize;
                let Some(&block) = table.get(pos / block_size) else {
                    return bad(format!(
                        "row {r} at position {pos} is past sequence {i}'s block table"
                    ));
                };
                let want = block as usize * block_size + pos % block_size;
                if self.slot_mapping[r] as usize != want {
                    return bad(format!(
                        "row {r} writes slot {} but its position maps to slot {want}",
                        self.slot_mapping[r]
                    ));
                }
            }
        }
        if next_row != n {
            return bad(format!("sequences cover {next_row} of {n} rows"));
        }
        if let Some(r) = self.logits_rows.iter().find(|&&r| r as usize >= n) {
            return bad(format!("logits wanted for row {r} of {n}"));
        }
        Ok(())
    }
}
