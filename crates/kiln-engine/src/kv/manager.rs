//! Per-sequence block tables over the shared pool, with prefix-cache lookups.
//!
//! A sequence's blocks are owned by a [`SeqBlocks`] value: dropping it (finish, abort,
//! preemption, a panic unwinding the engine) returns every block to the pool, so no path
//! can leak one. The engine thread is the only user, hence `Rc<RefCell<_>>`.

use std::cell::RefCell;
use std::rc::Rc;

use super::block_pool::BlockPool;
use super::disk::DiskTier;
use super::prefix_hash::{hash_blocks, BlockHash};

/// Prefix-cache counters in tokens, as vLLM reports them.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct PrefixCacheStats {
    /// Prompt tokens looked up.
    pub queries: u64,
    /// Prompt tokens found cached.
    pub hits: u64,
}

/// The blocks of one sequence, released to the pool on drop.
pub struct SeqBlocks {
    pool: Rc<RefCell<BlockPool>>,
    ids: Vec<u32>,
    /// Hashes of this sequence's full blocks, chained from the start.
    hashes: Vec<BlockHash>,
    /// Leading blocks already registered in the prefix cache.
    num_cached: usize,
    /// Whether its blocks may go to and come from the disk tier (see [`DiskTier`]).
    disk: bool,
    /// Whether the disk tier was already asked for its prompt's blocks.
    disk_checked: bool,
}

impl SeqBlocks {
    pub fn block_table(&self) -> &[u32] {
        &self.ids
    }

    /// Keeps this sequence's blocks off the disk tier (their key is only valid in this
    /// process, like a LoRA adapter's load id).
    pub fn keep_off_disk(&mut self) {
        self.disk = false;
    }

    /// Returns every block (keeps the buffers for reuse).
    pub fn clear(&mut self) {
        self.pool.borrow_mut().release(&self.ids);
        self.ids.clear();
        self.hashes.clear();
        self.num_cached = 0;
    }
}

impl Drop for SeqBlocks {
    fn drop(&mut self) {
        self.clear();
    }
}

pub struct KvManager {
    pool: Rc<RefCell<BlockPool>>,
    block_size: usize,
    prefix_caching: bool,
    stats: PrefixCacheStats,
    disk: Option<DiskTier>,
    /// Blocks hashed since the last [`write_to_disk`](Self::write_to_disk).
    to_disk: Vec<(u32, BlockHash)>,
    /// Reused by disk reads and hash chains.
    disk_buf: Vec<u8>,
    disk_hashes: Vec<BlockHash>,
}

impl KvManager {
    pub fn new(num_blocks: usize, block_size: usize, prefix_caching: bool) -> Self {
        Self {
            pool: Rc::new(RefCell::new(BlockPool::new(num_blocks))),
            block_size,
            prefix_caching,
            stats: PrefixCacheStats::default(),
            disk: None,
            to_disk: Vec::new(),
            disk_buf: Vec::new(),
            disk_hashes: Vec::new(),
        }
    }

    /// Backs the prefix cache with `tier` (only with prefix caching on).
    pub fn set_disk_tier(&mut self, tier: DiskTier) {
        if self.prefix_caching {
            self.disk = Some(tier);
            // Enough for a step's new full blocks; growth past it is amortised.
            self.to_disk.reserve(1024);
        }
    }

    pub fn block_size(&self) -> usize {
        self.block_size
    }

    pub fn num_blocks(&self) -> usize {
        self.pool.borrow().num_blocks()
    }

    pub fn num_free_blocks(&self) -> usize {
        self.pool.borrow().num_free()
    }

    /// Share of blocks held by live sequences (0..=1).
    pub fn usage(&self) -> f64 {
        self.pool.borrow().usage()
    }

    pub fn prefix_stats(&self) -> PrefixCacheStats {
        self.stats
    }

    /// An empty block table with room for a sequence of up to `max_tokens` tokens, so it
    /// never reallocates while the sequence grows.
    pub fn new_seq(&self, max_tokens: usize) -> SeqBlocks {
        let blocks = max_tokens.div_ceil(self.block_size);
        SeqBlocks {
            pool: self.pool.clone(),
            ids: Vec::with_capacity(blocks),
            hashes: Vec::with_capacity(blocks),
            num_cached: 0,
            disk: true,
            disk_checked: false,
        }
    }

    /// Reads from the disk tier the blocks of `tokens`' prefix that follow those cached
    /// in RAM, into free blocks that `import` fills (false: it could not), and caches
    /// them as if computed; `seq`, still waiting, then finds them at admission. Runs once
    /// per sequence, before it is scheduled, while the engine owns the KV store; returns
    /// the tokens brought in.
    pub fn promote_from_disk(
        &mut self,
        seq: &mut SeqBlocks,
        tokens: &[u32],
        extra: &[u8],
        mut import: impl FnMut(u32, &[u8]) -> bool,
    ) -> usize {
        let Some(disk) = &self.disk else {
            return 0;
        };
        if !seq.disk || seq.disk_checked || !seq.ids.is_empty() || tokens.len() < 2 {
            return 0;
        }
        seq.disk_checked = true;
        self.disk_hashes.clear();
        hash_blocks(
            &tokens[..tokens.len() - 1],
            self.block_size,
            extra,
            &mut self.disk_hashes,
        );
        let mut pool = self.pool.borrow_mut();
        // The prefix already in RAM is held while blocks are taken for the rest, so
        // taking them cannot evict it (which would cut the chain admission follows).
        let in_ram: Vec<u32> = self
            .disk_hashes
            .iter()
            .map_while(|h| pool.lookup(h))
            .collect();
        for &b in &in_ram {
            pool.touch(b);
        }
        let wanted = &self.disk_hashes[in_ram.len()..];
        let on_disk = wanted.iter().take_while(|h| disk.contains(h)).count();
        let mut blocks = Vec::new();
        let n = on_disk.min(pool.num_free());
        let mut brought = 0;
        if n > 0 && pool.allocate(n, &mut blocks) {
            for (&b, h) in blocks.iter().zip(wanted) {
                if !disk.read(h, &mut self.disk_buf) || !import(b, &self.disk_buf) {
                    break;
                }
                pool.cache(b, *h);
                brought += 1;
            }
            // Free again, and most recently used: admission takes them back by hash.
            pool.release(&blocks);
        }
        pool.release(&in_ram);
        let bs = self.block_size;
        disk.stats()
            .kv_disk_lookup(brought * bs, (wanted.len() - brought) * bs);
        brought * bs
    }

    /// Hands the blocks hashed since the last call to the disk tier, each exported by
    /// `export` unless the tier has it already.
    pub fn write_to_disk(&mut self, mut export: impl FnMut(u32, &mut Vec<u8>)) {
        let Some(disk) = &self.disk else {
            self.to_disk.clear();
            return;
        };
        for (b, h) in self.to_disk.drain(..) {
            if disk.wants(&h) {
                let mut bytes = disk.buffer();
                export(b, &mut bytes);
                disk.write(h, bytes);
            }
        }
    }

    /// Attaches the longest cached prefix of `tokens` to an empty `seq`; returns how many
    /// tokens it covers. At least one token is always left to compute, since the last
    /// prompt position must run to produce logits.
    pub fn attach_cached_prefix(
        &mut self,
        seq: &mut SeqBlocks,
        tokens: &[u32],
        extra: &[u8],
    ) -> usize {
        debug_assert!(seq.ids.is_empty());
        if !self.prefix_caching || tokens.is_empty() {
            return 0;
        }
        self.stats.queries += tokens.len() as u64;
        let usable = tokens.len() - 1;
        hash_blocks(&tokens[..usable], self.block_size, extra, &mut seq.hashes);
        let mut pool = self.pool.borrow_mut();
        for h in &seq.hashes {
            match pool.lookup(h) {
                Some(b) => {
                    pool.touch(b);
                    seq.ids.push(b);
                }
                None => break,
            }
        }
        seq.num_cached = seq.ids.len();
        seq.hashes.truncate(seq.num_cached);
        let hit = seq.ids.len() * self.block_size;
        self.stats.hits += hit as u64;
        hit
    }

    /// Number of blocks `seq` still needs to hold `total_tokens`.
    pub fn blocks_needed(&self, seq: &SeqBlocks, total_tokens: usize) -> usize {
        total_tokens
            .div_ceil(self.block_size)
            .saturating_sub(seq.ids.len())
    }

    /// Grows `seq` to hold `total_tokens`; false (and nothing taken) if blocks run out.
    pub fn allocate(&mut self, seq: &mut SeqBlocks, total_tokens: usize) -> bool {
        let need = self.blocks_needed(seq, total_tokens);
        need == 0 || self.pool.borrow_mut().allocate(need, &mut seq.ids)
    }

    /// Frees the blocks `seq` holds past the first `total_tokens` tokens (the rejected
    /// rows of a draft). They were never hashed: only computed blocks are.
    pub fn truncate(&mut self, seq: &mut SeqBlocks, total_tokens: usize) {
        let keep = total_tokens.div_ceil(self.block_size).max(seq.num_cached);
        if keep < seq.ids.len() {
            self.pool.borrow_mut().release(&seq.ids[keep..]);
            seq.ids.truncate(keep);
        }
    }

    /// Registers the full blocks among the first `num_computed` of `tokens` in the prefix
    /// cache, so later sequences can reuse them.
    pub fn commit(
        &mut self,
        seq: &mut SeqBlocks,
        tokens: &[u32],
        num_computed: usize,
        extra: &[u8],
    ) {
        if !self.prefix_caching {
            return;
        }
        let full = num_computed / self.block_size;
        if full <= seq.num_cached {
            return;
        }
        hash_blocks(
            &tokens[..full * self.block_size],
            self.block_size,
            extra,
            &mut seq.hashes,
        );
        let mut pool = self.pool.borrow_mut();
        for i in seq.num_cached..full {
            pool.cache(seq.ids[i], seq.hashes[i]);
            if seq.disk && self.disk.is_some() {
                self.to_disk.push((seq.ids[i], seq.hashes[i]));
            }
        }
        seq.num_cached = full;
    }

    /// Forgets every cached prefix not in use.
    pub fn reset_prefix_cache(&mut self) {
        self.pool.borrow_mut().reset_prefix_cache();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_reuse_and_raii() {
        let mut m = KvManager::new(8, 4, true);
        let toks: Vec<u32> = (0..10).collect();
        let mut a = m.new_seq(64);
        assert_eq!(m.attach_cached_prefix(&mut a, &toks, b""), 0);
        assert!(m.allocate(&mut a, 10));
        assert_eq!(a.block_table().len(), 3);
        m.commit(&mut a, &toks, 10, b"");
        let mut b = m.new_seq(64);
        assert_eq!(
            m.attach_cached_prefix(&mut b, &toks, b""),
            8,
            "two full blocks"
        );
        assert_eq!(b.block_table(), &a.block_table()[..2]);
        let mut c = m.new_seq(64);
        assert_eq!(m.attach_cached_prefix(&mut c, &toks, b"other-adapter"), 0);
        drop(a);
        drop(b);
        drop(c);
        assert_eq!(m.num_free_blocks(), 8, "all blocks back");
        // Still cached after release.
        let mut d = m.new_seq(64);
        assert_eq!(m.attach_cached_prefix(&mut d, &toks, b""), 8);
        let s = m.prefix_stats();
        assert_eq!((s.queries, s.hits), (40, 16));
    }

    #[test]
    fn fully_cached_prompt_leaves_one_token() {
        let mut m = KvManager::new(4, 4, true);
        let toks: Vec<u32> = (0..8).collect();
        let mut a = m.new_seq(64);
        m.allocate(&mut a, 8);
        m.commit(&mut a, &toks, 8, b"");
        let mut b = m.new_seq(64);
        assert_eq!(m.attach_cached_prefix(&mut b, &toks, b""), 4);
    }

    #[test]
    fn allocation_is_all_or_nothing() {
        let mut m = KvManager::new(2, 4, false);
        let mut a = m.new_seq(64);
        assert!(!m.allocate(&mut a, 12));
        assert!(a.block_table().is_empty());
        assert!(m.allocate(&mut a, 8));
        assert_eq!(m.num_free_blocks(), 0);
    }
}
