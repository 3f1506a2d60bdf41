//! Byte-pair merging of one pre-split word, for GGUF vocabularies.
//!
//! Written here rather than taken from the `tokenizers` crate for start time. Its BPE
//! model owns a second and a third copy of every token text (text -> id, id -> text)
//! and builds its merge table by formatting each merged text anew: 200 ms for Qwen's
//! 151,936 tokens and 151,387 merges, on the critical path of every start. This one
//! keys merges by ids, looks texts up through the vocabulary's [`TokenIndex`], and is
//! built in a fraction of that. The merging itself is the textbook one, and the same
//! as the crate's: the lowest-ranked adjacent pair first, the leftmost among equals.
//! The unit tests hold it to the crate's BPE on random words.
//!
//! [`TokenIndex`]: crate::token_index::TokenIndex

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use crate::vocab::Vocab;

/// `(left id, right id)` -> `(rank, merged id)`; lower ranks merge first.
pub(crate) type MergeTable = hashbrown::HashMap<(u32, u32), (u32, u32)>;

#[derive(Debug)]
pub(crate) struct Bpe {
    merges: MergeTable,
    /// SentencePiece byte fallback: the `<0xXX>` token of each byte, where the
    /// vocabulary has one. `None`: a character outside the vocabulary is dropped.
    byte_tokens: Option<Box<[Option<u32>; 256]>>,
    /// Llama 3: a word that is itself a token skips the merges.
    ignore_merges: bool,
    /// The token of each character below [`CHAR_TABLE`] that is one (`u32::MAX`:
    /// none): every word starts as characters, and this spares hashing each of them.
    char_tokens: Vec<u32>,
}

/// Code points with a direct entry: the byte-level alphabet (up to U+0143), Latin,
/// Greek, Cyrillic and SentencePiece's `▁` (U+2581).
const CHAR_TABLE: usize = 0x2600;

/// One symbol of a word being merged, linked to its neighbours.
#[derive(Clone, Copy)]
struct Symbol {
    id: u32,
    /// Merged into its left neighbour.
    gone: bool,
    prev: usize,
    next: usize,
}

const NONE: usize = usize::MAX;

impl Bpe {
    pub(crate) fn new(
        merges: MergeTable,
        vocab: &Vocab,
        byte_fallback: bool,
        ignore_merges: bool,
    ) -> Self {
        let byte_tokens = byte_fallback.then(|| {
            let mut ids = Box::new([None; 256]);
            for (b, id) in ids.iter_mut().enumerate() {
                *id = vocab.id(&format!("<0x{b:02X}>"));
            }
            ids
        });
        let mut char_tokens = vec![u32::MAX; CHAR_TABLE];
        for (id, text) in vocab.texts.iter().enumerate() {
            let mut chars = text.chars();
            if let (Some(c), None) = (chars.next(), chars.next()) {
                if let Some(slot) = char_tokens.get_mut(c as usize) {
                    *slot = id as u32;
                }
            }
        }
        Bpe {
            merges,
            byte_tokens,
            ignore_merges,
            char_tokens,
        }
    }

    /// Appends the ids of `word` (already pre-split and escaped) to `out`.
    pub(crate) fn tokenize(&self, vocab: &Vocab, word: &str, out: &mut Vec<u32>) {
        if word.is_empty() {
            return;
        }
        if self.ignore_merges {
            if let Some(id) = vocab.id(word) {
                out.push(id);
                return;
            }
        }
        let mut symbols = self.symbols(vocab, word);
        self.merge(&mut symbols);
        let mut at = if symbols.is_empty() { NONE } else { 0 };
        while at != NONE {
            out.push(symbols[at].id);
            at = symbols[at].next;
        }
    }

    /// One symbol per character (or per byte, for a character only byte tokens spell).
    fn symbols(&self, vocab: &Vocab, word: &str) -> Vec<Symbol> {
        let mut ids: Vec<u32> = Vec::with_capacity(word.len());
        for (at, c) in word.char_indices() {
            let text = &word[at..at + c.len_utf8()];
            let id = match self.char_tokens.get(c as usize) {
                Some(&id) => (id != u32::MAX).then_some(id),
                None => vocab.id(text),
            };
            if let Some(id) = id {
                ids.push(id);
            } else if let Some(bytes) = &self.byte_tokens {
                let spelled: Option<Vec<u32>> = text.bytes().map(|b| bytes[b as usize]).collect();
                ids.extend(spelled.into_iter().flatten());
            }
        }
        let n = ids.len();
        ids.into_iter()
            .enumerate()
            .map(|(i, id)| Symbol {
                id,
                gone: false,
                prev: if i == 0 { NONE } else { i - 1 },
                next: if i + 1 == n { NONE } else { i + 1 },
            })
            .collect()
    }

    fn merge(&self, symbols: &mut [Symbol]) {
        // (rank, position of the left symbol, merged id), smallest first.
        let mut queue: BinaryHeap<Reverse<(u32, usize, u32)>> = symbols
            .windows(2)
            .enumerate()
            .filter_map(|(at, w)| {
                let &(rank, id) = self.merges.get(&(w[0].id, w[1].id))?;
                Some(Reverse((rank, at, id)))
            })
            .collect();
        while let Some(Reverse((_, at, merged))) = queue.pop() {
            let left = symbols[at];
            if left.gone || left.next == NONE {
                continue;
            }
            let right = symbols[left.next];
            // An entry is stale once either side has merged with something else.
            if self.merges.get(&(left.id, right.id)).map(|m| m.1) != Some(merged) {
                continue;
            }
            symbols[at].id = merged;
            symbols[at].next = right.next;
            symbols[left.next].gone = true;
            if right.next != NONE {
                symbols[right.next].prev = at;
            }
            if left.prev != NONE {
                if let Some(&(rank, id)) = self.merges.get(&(symbols[left.prev].id, merged)) {
                    queue.push(Reverse((rank, left.prev, id)));
                }
            }
            if right.next != NONE {
                if let Some(&(rank, id)) = self.merges.get(&(merged, symbols[right.next].id)) {
                    queue.push(Reverse((rank, at, id)));
                }
            }
        }
    }
}

#[cfg(test)]
#[path = "bpe_tests.rs"]
mod tests;
