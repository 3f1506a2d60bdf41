//! Reference-counted KV blocks, a prefix cache over full blocks, and LRU eviction.
//!
//! Free blocks (ref count 0) sit in one queue ordered by eviction priority: allocation
//! takes from the front, freeing appends at the back. A free block may still hold a cached
//! prefix; it stays findable by hash until allocation evicts it, and a cache hit pulls it
//! back out of the queue. The queue is an intrusive doubly linked list over block ids, so
//! every operation is O(1) and nothing allocates after construction. A growing sequence
//! takes the block after its last one when that is free, to keep its blocks adjacent.

use std::collections::HashMap;

use super::prefix_hash::BlockHash;

const NIL: u32 = u32::MAX;

/// How many evenly spaced places fresh blocks are first handed out from (about the most
/// sequences that run at once).
const START_REGIONS: usize = 64;

pub struct BlockPool {
    ref_cnt: Vec<u32>,
    hash: Vec<Option<BlockHash>>,
    cached: HashMap<BlockHash, u32>,
    prev: Vec<u32>,
    next: Vec<u32>,
    head: u32,
    tail: u32,
    num_free: usize,
}

impl BlockPool {
    pub fn new(num_blocks: usize) -> Self {
        assert!(
            num_blocks < NIL as usize,
            "block ids must fit below u32::MAX"
        );
        let n = num_blocks as u32;
        let mut pool = Self {
            ref_cnt: vec![0; num_blocks],
            hash: vec![None; num_blocks],
            cached: HashMap::with_capacity(num_blocks),
            prev: vec![NIL; num_blocks],
            next: vec![NIL; num_blocks],
            head: NIL,
            tail: NIL,
            num_free: 0,
        };
        // Fresh blocks are handed out from evenly spaced regions (0, S, 2S, …, then 1,
        // S + 1, …), so new sequences start far apart and each can grow into the blocks
        // after its own (see `allocate`).
        let stride = n.div_ceil(START_REGIONS as u32).max(1);
        for offset in 0..stride {
            for b in (offset..n).step_by(stride as usize) {
                pool.push_back(b);
            }
        }
        pool
    }

    pub fn num_blocks(&self) -> usize {
        self.ref_cnt.len()
    }

    /// Blocks that can be allocated now (free, possibly holding evictable cache).
    pub fn num_free(&self) -> usize {
        self.num_free
    }

    /// Share of blocks in use by live sequences.
    pub fn usage(&self) -> f64 {
        if self.ref_cnt.is_empty() {
            return 0.0;
        }
        1.0 - self.num_free as f64 / self.ref_cnt.len() as f64
    }

    /// Whether `block` exists and no sequence holds it (it may hold a cached prefix).
    fn is_free(&self, block: u32) -> bool {
        self.ref_cnt.get(block as usize) == Some(&0)
    }

    pub fn ref_count(&self, block: u32) -> u32 {
        self.ref_cnt[block as usize]
    }

    /// Appends `n` blocks to the block table `out` (evicting cached prefixes, least
    /// recently used first), or takes none if fewer than `n` are free.
    ///
    /// The block after the table's last one is taken first when it is free (even if that
    /// evicts its cached prefix out of LRU order): a sequence whose blocks are adjacent in
    /// memory is read by attention as one stream, while scattered blocks cost a TLB miss
    /// and a prefetcher restart each. On a VM (nested page walks) attention over scattered
    /// blocks of 16 ran at a quarter of its speed over contiguous ones.
    pub fn allocate(&mut self, n: usize, out: &mut Vec<u32>) -> bool {
        if n > self.num_free {
            return false;
        }
        for _ in 0..n {
            let b = match out.last() {
                Some(&last) if self.is_free(last.wrapping_add(1)) => last + 1,
                _ => self.head,
            };
            self.unlink(b);
            if let Some(h) = self.hash[b as usize].take() {
                if self.cached.get(&h) == Some(&b) {
                    self.cached.remove(&h);
                }
            }
            self.ref_cnt[b as usize] = 1;
            out.push(b);
        }
        true
    }

    /// Adds a reference to a block found in the cache (or shared by a sibling sequence).
    pub fn touch(&mut self, block: u32) {
        let r = &mut self.ref_cnt[block as usize];
        if *r == 0 {
            self.unlink(block);
        }
        self.ref_cnt[block as usize] += 1;
    }

    /// Drops one reference from each block; blocks reaching zero become evictable, the
    /// last of `blocks` first (a sequence's tail is the least likely to be shared).
    pub fn release(&mut self, blocks: &[u32]) {
        for &b in blocks.iter().rev() {
            let r = &mut self.ref_cnt[b as usize];
            debug_assert!(*r > 0, "double free of block {b}");
            if *r == 0 {
                continue;
            }
            *r -= 1;
            if *r == 0 {
                self.push_back(b);
            }
        }
    }

    /// Registers a full block's content hash so later sequences can reuse it.
    pub fn cache(&mut self, block: u32, hash: BlockHash) {
        if self.hash[block as usize].is_some() {
            return;
        }
        self.hash[block as usize] = Some(hash);
        self.cached.entry(hash).or_insert(block);
    }

    /// The block caching `hash`, if any.
    pub fn lookup(&self, hash: &BlockHash) -> Option<u32> {
        self.cached.get(hash).copied()
    }

    /// Drops every cached prefix that no live sequence uses.
    pub fn reset_prefix_cache(&mut self) {
        let mut b = self.head;
        while b != NIL {
            if let Some(h) = self.hash[b as usize].take() {
                if self.cached.get(&h) == Some(&b) {
                    self.cached.remove(&h);
                }
            }
            b = self.next[b as usize];
        }
    }

    fn push_back(&mut self, b: u32) {
        self.prev[b as usize] = self.tail;
        self.next[b as usize] = NIL;
        if self.tail == NIL {
            self.head = b;
        } else {
            self.next[self.tail as usize] = b;
        }
        self.tail = b;
        self.num_free += 1;
    }

    fn unlink(&mut self, b: u32) {
        let (p, n) = (self.prev[b as usize], self.next[b as usize]);
        if p == NIL {
            self.head = n;
        } else {
            self.next[p as usize] = n;
        }
        if n == NIL {
            self.tail = p;
        } else {
            self.prev[n as usize] = p;
        }
        self.prev[b as usize] = NIL;
        self.next[b as usize] = NIL;
        self.num_free -= 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocate_release_roundtrip() {
        let mut p = BlockPool::new(4);
        let mut got = vec![];
        assert!(p.allocate(3, &mut got));
        assert_eq!(p.num_free(), 1);
        assert!(!p.allocate(2, &mut got), "all or nothing");
        assert_eq!(got.len(), 3);
        p.release(&got);
        assert_eq!(p.num_free(), 4);
    }

    #[test]
    fn cached_blocks_are_evicted_lru() {
        let mut p = BlockPool::new(3);
        let mut a = vec![];
        p.allocate(3, &mut a);
        p.cache(a[0], [1; 16]);
        p.cache(a[1], [2; 16]);
        // Release a[1] first, then a[0]: a[1] becomes least recently used.
        p.release(&[a[1]]);
        p.release(&[a[0]]);
        assert_eq!(p.lookup(&[1; 16]), Some(a[0]));
        let mut b = vec![];
        p.allocate(1, &mut b);
        assert_eq!(b, vec![a[1]], "LRU evicted first");
        assert_eq!(p.lookup(&[2; 16]), None);
        assert_eq!(p.lookup(&[1; 16]), Some(a[0]), "still cached");
        // A hit pulls the block out of the free queue.
        p.touch(a[0]);
        assert_eq!(p.ref_count(a[0]), 1);
        assert_eq!(p.num_free(), 0);
    }

    #[test]
    fn sequences_grow_into_adjacent_blocks() {
        let mut p = BlockPool::new(640);
        let (mut a, mut b) = (vec![], vec![]);
        // Interleaved growth, as when many sequences decode at once.
        for _ in 0..5 {
            assert!(p.allocate(1, &mut a));
            assert!(p.allocate(1, &mut b));
        }
        assert_eq!(a, (0..5).collect::<Vec<_>>());
        assert_eq!(
            b,
            (10..15).collect::<Vec<_>>(),
            "second sequence starts a region away"
        );
        // A free neighbour is taken even when it holds a cached prefix (which it loses);
        // a held one falls back to the queue's front (the next region's start).
        p.cache(5, [7; 16]);
        let mut c = vec![4];
        assert!(p.allocate(1, &mut c));
        assert_eq!(c, [4, 5]);
        assert_eq!(p.lookup(&[7; 16]), None);
        let mut d = vec![9];
        assert!(p.allocate(1, &mut d));
        assert_eq!(d, [9, 20], "block 10 is held by the second sequence");
    }

    #[test]
    fn shared_blocks_need_every_release() {
        let mut p = BlockPool::new(2);
        let mut a = vec![];
        p.allocate(1, &mut a);
        p.touch(a[0]);
        p.release(&a);
        assert_eq!(p.num_free(), 1);
        p.release(&a);
        assert_eq!(p.num_free(), 2);
    }
}
