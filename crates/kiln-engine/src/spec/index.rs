//! Where a sequence's recent tokens occurred before in its own prompt and output: the
//! source of draft tokens.
//!
//! A direct-mapped table from an n-gram's hash to the position that followed its latest
//! occurrence, for n = 8, 4 and 2: the longest n-gram that matches anchors the draft at
//! the right copy of a text that repeats in short runs (code's `}` lines, JSON keys).
//! It is lossy by design (a collision
//! overwrites) because every candidate is checked against the real tokens before use, so
//! a stale or colliding slot costs a missed draft, never a wrong one. The table is sized
//! once, when the sequence first drafts, so steps never allocate; a fixed size bounds
//! its memory whatever the context length.

/// The n-gram sizes, looked up longest first.
const GRAMS: [usize; 3] = [8, 4, 2];
const SHORTEST: usize = 2;
/// Slots at most (4 bytes each): 256 KiB a drafting sequence.
const MAX_SLOTS: usize = 1 << 16;
/// How far back a match is measured (longer matches all count as "long").
const MAX_MATCH: usize = 64;

/// A draft source found by [`NgramIndex::find`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Match {
    /// Position of the first token the match proposes (it follows the earlier occurrence).
    pub next: usize,
    /// Tokens before `next` that equal the tokens ending the sequence (at most
    /// [`MAX_MATCH`]).
    pub len: usize,
}

pub struct NgramIndex {
    /// `position + 1` of the token that followed an n-gram (0: empty), by hash.
    slots: Vec<u32>,
    /// Tokens indexed so far: every n-gram ending before this position is in the table.
    indexed: usize,
}

impl NgramIndex {
    /// A table for a sequence of up to `max_tokens` tokens.
    pub fn new(max_tokens: usize) -> Self {
        let slots = (2 * max_tokens).next_power_of_two().clamp(1024, MAX_SLOTS);
        Self {
            slots: vec![0; slots],
            indexed: 0,
        }
    }

    /// Indexes every n-gram of `tokens` that has a token after it and isn't indexed yet.
    pub fn extend(&mut self, tokens: &[u32]) {
        // An n-gram ending at `end` (exclusive) is followed by `tokens[end]`.
        let last = tokens.len().saturating_sub(1);
        for end in self.indexed.max(SHORTEST)..=last {
            for n in GRAMS {
                if end >= n {
                    let slot = self.slot(&tokens[end - n..end]);
                    self.slots[slot] = end as u32 + 1;
                }
            }
        }
        self.indexed = self.indexed.max(last + 1);
    }

    /// The latest earlier occurrence of the tokens ending `tokens`, longest n-gram first;
    /// None if not even the last two tokens occurred before.
    pub fn find(&self, tokens: &[u32]) -> Option<Match> {
        GRAMS.into_iter().find_map(|n| {
            let len = tokens.len();
            if len <= n {
                return None;
            }
            let next = self.slots[self.slot(&tokens[len - n..])].checked_sub(1)? as usize;
            // The slot may be stale or a collision: the tokens decide.
            if next < n || next >= len || tokens[next - n..next] != tokens[len - n..] {
                return None;
            }
            let len = (1..=MAX_MATCH.min(next))
                .take_while(|&j| tokens[next - j] == tokens[len - j])
                .count();
            Some(Match { next, len })
        })
    }

    fn slot(&self, gram: &[u32]) -> usize {
        // The length is mixed in so the n-gram sizes don't share slots by construction.
        gram_hash(gram.len() as u64, gram) & (self.slots.len() - 1)
    }
}

/// FNV-1a over `gram`'s tokens, started from `seed`, for the direct-mapped n-gram tables
/// here and in [`super::recent`].
pub(super) fn gram_hash(seed: u64, gram: &[u32]) -> usize {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325 ^ seed;
    for &t in gram {
        h = (h ^ u64::from(t)).wrapping_mul(0x0000_0100_0000_01b3);
    }
    // Fold the high bits in: FNV's low bits mix poorly.
    (h ^ (h >> 29)) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    fn indexed(tokens: &[u32]) -> NgramIndex {
        let mut ix = NgramIndex::new(tokens.len() + 64);
        ix.extend(tokens);
        ix
    }

    #[test]
    fn finds_the_latest_earlier_occurrence_and_its_length() {
        // "1 2 3 4 5 6 ... 9 1 2 3 4" → the 4-gram 1 2 3 4 occurred at 0..4, so 5 is next.
        let t = [1, 2, 3, 4, 5, 6, 7, 8, 9, 1, 2, 3, 4];
        let m = indexed(&t).find(&t).expect("a match");
        assert_eq!(m, Match { next: 4, len: 4 });
        // The 8-gram anchors at the copy whose context matches, not the latest 4-gram.
        let t = [
            9, 9, 9, 9, 1, 2, 3, 4, 5, 7, 7, 7, 7, 1, 2, 3, 4, 6, 9, 9, 9, 9, 1, 2, 3, 4,
        ];
        let m = indexed(&t).find(&t).expect("a match");
        assert_eq!(m, Match { next: 8, len: 8 });
    }

    #[test]
    fn falls_back_to_the_short_ngram() {
        let t = [7, 3, 4, 9, 9, 1, 3, 4];
        let m = indexed(&t).find(&t).expect("a 2-gram match");
        assert_eq!(m.next, 3);
        assert_eq!(m.len, 2);
    }

    #[test]
    fn no_match_without_an_earlier_occurrence() {
        let t = [1, 2, 3, 4, 5, 6, 7, 8];
        assert_eq!(indexed(&t).find(&t), None);
        assert_eq!(indexed(&[]).find(&[]), None);
        assert_eq!(indexed(&[5]).find(&[5]), None);
    }

    #[test]
    fn extends_incrementally_like_a_fresh_index() {
        let t: Vec<u32> = (0..300).map(|i| (i * 7 % 23) as u32).collect();
        let mut grown = NgramIndex::new(400);
        for end in 1..=t.len() {
            grown.extend(&t[..end]);
            assert_eq!(grown.find(&t[..end]), indexed(&t[..end]).find(&t[..end]));
        }
    }

    #[test]
    fn a_colliding_slot_never_yields_a_wrong_match() {
        // A tiny table collides constantly; every match must still be a real one.
        let mut ix = NgramIndex::new(1);
        let t: Vec<u32> = (0..5000).map(|i| (i * 31 % 97) as u32).collect();
        ix.extend(&t);
        for end in 3..t.len() {
            if let Some(m) = ix.find(&t[..end]) {
                assert!(m.len >= 2 && m.next < end);
                assert_eq!(t[m.next - m.len..m.next], t[end - m.len..end]);
            }
        }
    }
}
