//! Perplexity of a model over a tokenized text, with the semantics of llama.cpp's
//! `llama-perplexity` so the two tools' numbers compare.
//!
//! The tokens are cut into consecutive chunks of `ctx` tokens (a tail shorter than
//! `ctx` is dropped). Each chunk is evaluated alone, from an empty KV cache, in pieces
//! of at most `batch` tokens; when the tokenizer adds BOS, the chunk's first token is
//! replaced by BOS for the evaluation. Only the second half of a chunk is scored, so
//! every prediction has at least `ctx / 2` tokens of context: the logits at positions
//! `ctx/2 ..= ctx-2` predict the tokens at `ctx/2 + 1 ..= ctx-1`, each scored as
//! `-log softmax` ([`score::nll`]). Perplexity is `exp` of the mean over all scored
//! tokens so far ([`Estimate`]).
//!
//! This runs the model directly, without the engine's scheduler: one sequence, one
//! block table over its own small KV cache.

mod score;

use kiln_backend::KvDtype;

use crate::{BatchInput, LoraBatch, Model, SeqSpan};

pub use score::{nll, Estimate};

/// Tokens per KV block of the chunk's cache (any size works; this is the engine's).
const BLOCK_SIZE: usize = 16;
/// The smallest context that scores at least one token per chunk.
const MIN_CTX: usize = 4;

/// How to cut and evaluate the text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PerplexityParams {
    /// Tokens per chunk (llama.cpp's `-c`); even, at least 4, within the model's context.
    pub ctx: usize,
    /// Most tokens per forward pass (llama.cpp's `-b`); larger values are cut to `ctx`.
    pub batch: usize,
    /// Evaluate at most this many chunks (`None`: every whole chunk of the text).
    pub max_chunks: Option<usize>,
    /// The token each chunk starts with instead of its own (the BOS token, when the
    /// tokenizer adds one).
    pub bos: Option<u32>,
}

/// Why perplexity can't be computed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PerplexityError {
    #[error("the context must be an even number of tokens, at least {MIN_CTX}; got {0}")]
    BadContext(usize),
    #[error("a context of {ctx} tokens exceeds the model's context of {max} tokens")]
    ContextTooLong { ctx: usize, max: usize },
    #[error("the batch size must be at least 1")]
    ZeroBatch,
    #[error("the number of chunks must be at least 1")]
    ZeroChunks,
    #[error(
        "the text has {tokens} tokens, but a context of {ctx} needs at least {needed} \
         (two chunks, as llama-perplexity requires)"
    )]
    TextTooShort {
        tokens: usize,
        ctx: usize,
        needed: usize,
    },
    #[error(transparent)]
    Model(#[from] crate::Error),
}

impl PerplexityParams {
    /// Checks what can be checked without the model (before loading it).
    pub fn check(&self) -> Result<(), PerplexityError> {
        if self.ctx < MIN_CTX || !self.ctx.is_multiple_of(2) {
            return Err(PerplexityError::BadContext(self.ctx));
        }
        if self.batch == 0 {
            return Err(PerplexityError::ZeroBatch);
        }
        if self.max_chunks == Some(0) {
            return Err(PerplexityError::ZeroChunks);
        }
        Ok(())
    }

    /// Checks the settings, also against `model`'s context length.
    pub fn validate(&self, model: &Model) -> Result<(), PerplexityError> {
        self.check()?;
        let max = model.config().context_length;
        if self.ctx > max {
            return Err(PerplexityError::ContextTooLong { ctx: self.ctx, max });
        }
        Ok(())
    }

    /// Chunks evaluated for a text of `n_tokens` tokens. Like llama-perplexity, a text
    /// of fewer than two chunks' worth of tokens is refused.
    pub fn n_chunks(&self, n_tokens: usize) -> Result<usize, PerplexityError> {
        let needed = 2 * self.ctx;
        if n_tokens < needed {
            return Err(PerplexityError::TextTooShort {
                tokens: n_tokens,
                ctx: self.ctx,
                needed,
            });
        }
        let whole = n_tokens / self.ctx;
        Ok(self.max_chunks.map_or(whole, |m| m.min(whole)))
    }
}

/// Computes the perplexity of `model` over `tokens`, calling `on_chunk(i, &estimate)`
/// after chunk `i` (from 0) with the estimate over every chunk so far.
pub fn perplexity(
    model: &Model,
    tokens: &[u32],
    params: &PerplexityParams,
    mut on_chunk: impl FnMut(usize, &Estimate),
) -> Result<Estimate, PerplexityError> {
    params.validate(model)?;
    let n_chunks = params.n_chunks(tokens.len())?;
    let mut eval = ChunkEval::new(model, params);
    let mut estimate = Estimate::default();
    for (i, chunk) in tokens.chunks_exact(params.ctx).take(n_chunks).enumerate() {
        eval.score(chunk, &mut estimate)?;
        on_chunk(i, &estimate);
    }
    Ok(estimate)
}

/// Buffers for evaluating chunks of one size: a KV cache for one chunk, the workspace,
/// and the per-piece batch arrays.
struct ChunkEval<'m> {
    model: &'m Model,
    batch: usize,
    bos: Option<u32>,
    kv: kiln_backend::KvCache,
    ws: crate::Workspace,
    block_table: Vec<u32>,
    input: Vec<u32>,
    positions: Vec<u32>,
    logits_rows: Vec<u32>,
}

impl<'m> ChunkEval<'m> {
    fn new(model: &'m Model, params: &PerplexityParams) -> Self {
        let ctx = params.ctx;
        let batch = params.batch.min(ctx);
        let n_blocks = ctx.div_ceil(BLOCK_SIZE);
        // Logits are needed for at most `ctx / 2 - 1` rows of a piece.
        let max_logits = batch.min(ctx / 2 - 1);
        Self {
            model,
            batch,
            bos: params.bos,
            kv: model.new_kv_cache(n_blocks, BLOCK_SIZE, KvDtype::F16),
            ws: model.new_workspace(batch, max_logits, ctx),
            block_table: (0..n_blocks as u32).collect(),
            input: Vec::with_capacity(ctx),
            positions: Vec::with_capacity(batch),
            logits_rows: Vec::with_capacity(max_logits),
        }
    }

    /// Evaluates `chunk` from position 0 (the cache's old contents are never read: every
    /// position is written before a query can see it) and adds its scored tokens.
    fn score(&mut self, chunk: &[u32], estimate: &mut Estimate) -> Result<(), PerplexityError> {
        let ctx = chunk.len();
        let first = ctx / 2;
        self.input.clear();
        self.input.extend_from_slice(chunk);
        if let (Some(bos), Some(t)) = (self.bos, self.input.first_mut()) {
            *t = bos;
        }
        let vocab = self.model.config().vocab_size;
        for start in (0..ctx).step_by(self.batch) {
            let end = (start + self.batch).min(ctx);
            self.positions.clear();
            self.positions.extend(start as u32..end as u32);
            // With one block table from block 0, a position's slot is the position.
            let slots = &self.positions;
            self.logits_rows.clear();
            self.logits_rows
                .extend((start.max(first)..end.min(ctx - 1)).map(|p| (p - start) as u32));
            let seqs = [SeqSpan {
                start: 0,
                len: end - start,
                table_start: 0,
                table_len: self.block_table.len(),
            }];
            let batch = BatchInput {
                token_ids: &self.input[start..end],
                positions: &self.positions,
                slot_mapping: slots,
                seqs: &seqs,
                block_tables: &self.block_table,
                logits_rows: &self.logits_rows,
                lora: LoraBatch::default(),
            };
            let logits = self.model.forward(&batch, &mut self.kv, &mut self.ws)?;
            for (row, &r) in logits.chunks_exact(vocab).zip(&self.logits_rows) {
                let target = chunk[start + r as usize + 1] as usize;
                if target >= vocab {
                    return Err(crate::Error::InvalidBatch(format!(
                        "token id {target} is outside the vocabulary of {vocab}"
                    ))
                    .into());
                }
                estimate.add(nll(row, target));
            }
        }
        Ok(())
    }
}
