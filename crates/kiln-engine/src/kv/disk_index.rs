//! Which blocks the disk tier holds, in least-recently-used order, against its byte
//! budget. Shared by the engine thread (lookups, reads) and the writer thread (new
//! blocks, eviction) under one mutex; every operation is O(log n).

use std::collections::{BTreeMap, HashMap, HashSet};

use super::prefix_hash::BlockHash;

#[derive(Default)]
pub(super) struct DiskIndex {
    /// Stored blocks: their place in `order` and their file's size.
    entries: HashMap<BlockHash, (u64, u64)>,
    /// Stored blocks by last use, oldest first.
    order: BTreeMap<u64, BlockHash>,
    /// Blocks handed to the writer and not yet stored (so none is written twice).
    pending: HashSet<BlockHash>,
    tick: u64,
    bytes: u64,
}

impl DiskIndex {
    pub fn contains(&self, h: &BlockHash) -> bool {
        self.entries.contains_key(h)
    }

    /// Whether `h` is stored or on its way.
    pub fn known(&self, h: &BlockHash) -> bool {
        self.entries.contains_key(h) || self.pending.contains(h)
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Marks `h` as on its way to disk; false if it already is or is stored.
    pub fn begin_write(&mut self, h: BlockHash) -> bool {
        !self.contains(&h) && self.pending.insert(h)
    }

    /// `h`'s write did not happen.
    pub fn abandon_write(&mut self, h: &BlockHash) {
        self.pending.remove(h);
    }

    /// Records a stored block of `size` bytes as the most recently used.
    pub fn insert(&mut self, h: BlockHash, size: u64) {
        self.pending.remove(&h);
        self.remove(&h);
        self.tick += 1;
        self.entries.insert(h, (self.tick, size));
        self.order.insert(self.tick, h);
        self.bytes += size;
    }

    /// Marks a stored block as just used.
    pub fn touch(&mut self, h: &BlockHash) {
        if let Some(&(tick, size)) = self.entries.get(h) {
            self.order.remove(&tick);
            self.tick += 1;
            self.entries.insert(*h, (self.tick, size));
            self.order.insert(self.tick, *h);
        }
    }

    pub fn remove(&mut self, h: &BlockHash) -> bool {
        match self.entries.remove(h) {
            Some((tick, size)) => {
                self.order.remove(&tick);
                self.bytes -= size;
                true
            }
            None => false,
        }
    }

    /// Removes and returns the least recently used blocks until at most `budget` bytes
    /// are stored.
    pub fn evict_to(&mut self, budget: u64) -> Vec<BlockHash> {
        let mut out = Vec::new();
        while self.bytes > budget {
            let Some((_, h)) = self.order.pop_first() else {
                break;
            };
            if let Some((_, size)) = self.entries.remove(&h) {
                self.bytes -= size;
            }
            out.push(h);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evicts_least_recently_used_first_down_to_the_budget() {
        let mut ix = DiskIndex::default();
        for i in 0..4u8 {
            assert!(ix.begin_write([i; 16]));
            assert!(!ix.begin_write([i; 16]), "already on its way");
            ix.insert([i; 16], 10);
        }
        assert!(!ix.begin_write([0; 16]), "already stored");
        ix.touch(&[0; 16]);
        assert_eq!(ix.bytes(), 40);
        assert_eq!(ix.evict_to(20), vec![[1; 16], [2; 16]]);
        assert!(ix.contains(&[0; 16]) && ix.contains(&[3; 16]));
        assert_eq!((ix.len(), ix.bytes()), (2, 20));
        assert!(ix.remove(&[3; 16]));
        assert_eq!(ix.evict_to(0), vec![[0; 16]]);
        assert_eq!(ix.bytes(), 0);
    }
}
