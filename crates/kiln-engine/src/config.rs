//! Engine limits and KV-cache sizing.

use kiln_backend::KvDtype;

use crate::kv::DiskTierConfig;
use crate::spec::SpecMode;

#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// Tokens per KV block.
    pub block_size: usize,
    /// KV blocks in the pool (see [`EngineConfig::blocks_for_budget`]).
    pub num_kv_blocks: usize,
    pub kv_dtype: KvDtype,
    /// Token budget of one step.
    pub max_num_batched_tokens: usize,
    /// Sequences running at once.
    pub max_num_seqs: usize,
    /// Tokens per step for background sequences (positive priority) while interactive
    /// ones are about: keeps steps short, so an interactive request waits little for
    /// the step in flight (see the scheduler).
    pub background_step_tokens: usize,
    /// Longest sequence (prompt plus output).
    pub max_model_len: usize,
    pub enable_prefix_caching: bool,
    /// Speculative decoding from the sequences' own tokens (see [`crate::spec`]).
    pub speculative: SpecMode,
    /// The prefix cache's disk tier, if any (see [`crate::kv::disk`]).
    pub kv_disk: Option<DiskTierConfig>,
}

impl EngineConfig {
    /// KV blocks that fit in `bytes`, given one block's size in bytes.
    pub fn blocks_for_budget(bytes: usize, block_bytes: usize) -> usize {
        bytes / block_bytes.max(1)
    }

    /// Blocks one sequence of `max_model_len` tokens needs.
    pub fn blocks_per_full_seq(&self) -> usize {
        self.max_model_len.div_ceil(self.block_size)
    }
}
