//! The latest events, bounded: pushing past the capacity drops the oldest.

use std::collections::VecDeque;
use std::sync::Mutex;

use crate::event::Event;

#[derive(Debug)]
pub struct Ring {
    cap: usize,
    inner: Mutex<(VecDeque<Event>, u64)>,
}

impl Ring {
    /// A ring of `cap` events whose next sequence number is `next_seq`.
    pub fn new(cap: usize, next_seq: u64) -> Self {
        Self {
            cap: cap.max(1),
            inner: Mutex::new((VecDeque::with_capacity(cap.min(1 << 16)), next_seq)),
        }
    }

    /// Numbers `e` and keeps it; returns its number.
    pub fn push(&self, mut e: Event) -> (u64, Event) {
        let mut g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let (events, next) = &mut *g;
        e.seq = *next;
        *next += 1;
        if events.len() == self.cap {
            events.pop_front();
        }
        events.push_back(e.clone());
        (e.seq, e)
    }

    /// Restores `e` as stored (its number kept), at start.
    pub fn restore(&self, e: Event) {
        let mut g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let (events, next) = &mut *g;
        *next = (*next).max(e.seq + 1);
        if events.len() == self.cap {
            events.pop_front();
        }
        events.push_back(e);
    }

    /// Up to `limit` events numbered above `after`, oldest first.
    pub fn since(&self, after: Option<u64>, limit: usize) -> Vec<Event> {
        let g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let newer = g.0.iter().filter(|e| after.is_none_or(|a| e.seq > a));
        let n = newer.clone().count();
        newer.skip(n.saturating_sub(limit)).cloned().collect()
    }

    pub fn len(&self) -> usize {
        self.inner.lock().unwrap_or_else(|p| p.into_inner()).0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ring_keeps_the_latest_in_order() {
        let r = Ring::new(3, 10);
        for _ in 0..5 {
            r.push(Event::default());
        }
        let seqs: Vec<u64> = r.since(None, 10).iter().map(|e| e.seq).collect();
        assert_eq!(seqs, [12, 13, 14]);
        let seqs: Vec<u64> = r.since(Some(12), 10).iter().map(|e| e.seq).collect();
        assert_eq!(seqs, [13, 14]);
        let seqs: Vec<u64> = r.since(None, 1).iter().map(|e| e.seq).collect();
        assert_eq!(seqs, [14]);
    }
}
