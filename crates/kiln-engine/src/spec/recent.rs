//! The outputs of recently finished sequences, as a second draft source: an agent or a
//! batch job that produces the same structure request after request (the same JSON
//! shape, the same boilerplate) drafts it from its earlier outputs.
//!
//! A fixed ring of tokens, written once per finished sequence, and a direct-mapped
//! n-gram table into it, sized at start-up (no allocation while serving). Every entry is
//! tagged with the hash of its request's prefix-cache key (the cache salt plus the
//! adapter), and only a sequence with the same key may draft from it: acceptance shows in
//! timing, and one tenant's speed must not reveal another's outputs, the same rule the
//! prefix cache follows. Like [`super::NgramIndex`], the table is lossy and every match
//! is checked against the ring's tokens.

use std::hash::{DefaultHasher, Hash, Hasher};

use super::index::gram_hash;

/// Tokens kept (4 bytes each, plus 8 for the key tag).
const CAPACITY: usize = 1 << 16;
/// The n-gram looked up; shorter matches across requests are mostly coincidences.
const GRAM: usize = 4;
/// Longest match measured.
const MAX_MATCH: usize = 64;
/// Written between outputs, so no n-gram or draft spans two of them.
const SEPARATOR: u32 = u32::MAX;

/// Where a match in the ring starts its draft, and how long the match is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecentMatch {
    /// Absolute position (tokens ever written) of the first proposed token.
    pub next: u64,
    pub len: usize,
}

pub struct RecentOutputs {
    tokens: Vec<u32>,
    keys: Vec<u64>,
    /// Tokens ever written; position `p` lives at `p % CAPACITY` while `p` is among the
    /// last `CAPACITY`.
    written: u64,
    /// Absolute position + 1 of the token that followed an n-gram (0: empty).
    slots: Vec<u64>,
}

impl Default for RecentOutputs {
    fn default() -> Self {
        Self {
            tokens: vec![SEPARATOR; CAPACITY],
            keys: vec![0; CAPACITY],
            written: 0,
            slots: vec![0; 2 * CAPACITY],
        }
    }
}

/// The tag of a prefix-cache key.
pub fn key_tag(cache_key: &[u8]) -> u64 {
    let mut h = DefaultHasher::new();
    cache_key.hash(&mut h);
    h.finish()
}

impl RecentOutputs {
    /// Appends a finished sequence's output, tagged with its key's tag.
    pub fn record(&mut self, output: &[u32], tag: u64) {
        // A very long output keeps its end: that is what a next one would follow.
        let output = &output[output.len().saturating_sub(CAPACITY / 2)..];
        if output.len() <= GRAM {
            return;
        }
        self.push(SEPARATOR, tag);
        let start = self.written;
        for &t in output {
            self.push(t, tag);
        }
        for end in start + GRAM as u64..self.written {
            let slot = self.slot(end - GRAM as u64, tag);
            self.slots[slot] = end + 1;
        }
    }

    /// The latest recorded occurrence, under the same tag, of the last [`GRAM`] tokens of
    /// `tokens`, if one is still in the ring and followed by at least one token.
    pub fn find(&self, tokens: &[u32], tag: u64) -> Option<RecentMatch> {
        let len = tokens.len();
        if len < GRAM {
            return None;
        }
        let suffix = &tokens[len - GRAM..];
        let h = gram_hash(tag, suffix);
        let next = self.slots[h & (self.slots.len() - 1)].checked_sub(1)?;
        let oldest = self.written.saturating_sub(CAPACITY as u64);
        if next < oldest + GRAM as u64 || next >= self.written {
            return None;
        }
        // The slot may be stale or a collision: the tokens and tags decide.
        let at = |p: u64| (p % CAPACITY as u64) as usize;
        let matches = |j: usize| {
            let p = at(next - j as u64);
            self.keys[p] == tag && self.tokens[p] == tokens[len - j]
        };
        if !(1..=GRAM).all(matches) || self.tokens[at(next)] == SEPARATOR {
            return None;
        }
        let reach = MAX_MATCH.min(len).min((next - oldest) as usize);
        let len = (1..=reach).take_while(|&j| matches(j)).count();
        Some(RecentMatch { next, len })
    }

    /// Appends up to `max` tokens from `next` on to `out`, stopping at the end of that
    /// output.
    pub fn draft(&self, next: u64, max: usize, out: &mut Vec<u32>) {
        for p in next..(next + max as u64).min(self.written) {
            let t = self.tokens[(p % CAPACITY as u64) as usize];
            if t == SEPARATOR {
                break;
            }
            out.push(t);
        }
    }

    fn push(&mut self, token: u32, tag: u64) {
        let i = (self.written % CAPACITY as u64) as usize;
        self.tokens[i] = token;
        self.keys[i] = tag;
        self.written += 1;
    }

    /// The table slot of the n-gram starting at absolute position `start`.
    fn slot(&self, start: u64, tag: u64) -> usize {
        let gram: [u32; GRAM] =
            std::array::from_fn(|j| self.tokens[((start + j as u64) % CAPACITY as u64) as usize]);
        gram_hash(tag, &gram) & (self.slots.len() - 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_later_sequence_drafts_an_earlier_output() {
        let mut r = RecentOutputs::default();
        let out: Vec<u32> = (100..140).collect();
        r.record(&out, 7);
        // A new sequence has produced 100..110 so far.
        let toks: Vec<u32> = [1, 2, 3].into_iter().chain(100..110).collect();
        let m = r.find(&toks, 7).expect("a match");
        assert_eq!(m.len, 10);
        let mut draft = vec![];
        r.draft(m.next, 5, &mut draft);
        assert_eq!(draft, [110, 111, 112, 113, 114]);
        // A draft stops at the end of the recorded output.
        draft.clear();
        r.draft(m.next, 100, &mut draft);
        assert_eq!(draft, (110..140).collect::<Vec<_>>());
    }

    #[test]
    fn another_key_never_sees_it() {
        let mut r = RecentOutputs::default();
        r.record(&(100..140).collect::<Vec<_>>(), 7);
        let toks: Vec<u32> = (100..110).collect();
        assert_eq!(r.find(&toks, 8), None);
    }

    #[test]
    fn overwritten_outputs_are_not_matched() {
        let mut r = RecentOutputs::default();
        r.record(&(100..140).collect::<Vec<_>>(), 7);
        let toks: Vec<u32> = (100..110).collect();
        assert!(r.find(&toks, 7).is_some());
        // Fill the ring with other outputs until the first is gone.
        for i in 0..5 {
            let other: Vec<u32> = (0..CAPACITY as u32 / 4)
                .map(|t| 1000 + i * 100_000 + t)
                .collect();
            r.record(&other, 7);
        }
        assert_eq!(r.find(&toks, 7), None);
    }

    #[test]
    fn no_draft_spans_two_outputs() {
        let mut r = RecentOutputs::default();
        r.record(&[1, 2, 3, 4, 5, 6], 0);
        r.record(&[9, 9, 9, 9, 9, 9], 0);
        let m = r.find(&[1, 2, 3, 4, 5, 6], 0);
        assert_eq!(m, None, "6 was the last token of its output");
        let m = r.find(&[0, 2, 3, 4, 5], 0).expect("a match");
        let mut draft = vec![];
        r.draft(m.next, 10, &mut draft);
        assert_eq!(draft, [6]);
    }
}
