//! Waiting sequences ordered by (priority, arrival).

use std::collections::{BTreeMap, HashMap};

use crate::sequence::{SeqId, Sequence};

#[derive(Default)]
pub struct WaitQueue {
    by_order: BTreeMap<(i32, u64), Sequence>,
    key_of: HashMap<SeqId, (i32, u64)>,
}

impl WaitQueue {
    pub fn push(&mut self, seq: Sequence) {
        let key = seq.order_key();
        self.key_of.insert(seq.id, key);
        self.by_order.insert(key, seq);
    }

    /// The first sequence in (priority, arrival) order.
    pub fn pop(&mut self) -> Option<Sequence> {
        let (_, seq) = self.by_order.pop_first()?;
        self.key_of.remove(&seq.id);
        Some(seq)
    }

    /// The first sequence in (priority, arrival) order, left in the queue.
    pub fn peek(&self) -> Option<&Sequence> {
        self.by_order.first_key_value().map(|(_, s)| s)
    }

    /// Every waiting sequence in (priority, arrival) order.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = &mut Sequence> {
        self.by_order.values_mut()
    }

    pub fn contains(&self, id: SeqId) -> bool {
        self.key_of.contains_key(&id)
    }

    pub fn remove(&mut self, id: SeqId) -> Option<Sequence> {
        let key = self.key_of.remove(&id)?;
        self.by_order.remove(&key)
    }

    pub fn len(&self) -> usize {
        self.by_order.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_order.is_empty()
    }
}
