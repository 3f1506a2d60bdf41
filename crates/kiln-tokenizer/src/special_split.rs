//! Splitting special tokens out of raw text before tokenization, as llama.cpp does.
//!
//! llama.cpp takes the special tokens longest text first and, for each, splits every
//! remaining text fragment at all its occurrences. This is not the same as a leftmost-longest
//! scan when special texts overlap, so the same order is kept. A byte trie over the special
//! texts first finds which of them occur at all, so only those are searched for.

use crate::vocab::{TokenAttr, Vocab};

/// A piece of input: plain text to tokenize or a special token taken verbatim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fragment<'t> {
    Text(&'t str),
    Token(u32),
}

#[derive(Debug, Default)]
struct Node {
    /// Sorted by byte.
    children: Vec<(u8, u32)>,
    token: Option<u32>,
}

/// The special texts, and a trie over them for finding which occur in a text.
#[derive(Debug)]
pub(crate) struct SpecialSplitter {
    nodes: Vec<Node>,
    /// `(id, rank in the partition order)`, by id for lookups.
    rank: Vec<(u32, u32)>,
}

impl SpecialSplitter {
    pub(crate) fn new(vocab: &Vocab) -> Self {
        let mut nodes = vec![Node::default()];
        for &id in &vocab.partition_order {
            let mut at = 0usize;
            for &b in vocab.texts[id as usize].as_bytes() {
                let next = match nodes[at].children.binary_search_by_key(&b, |c| c.0) {
                    Ok(i) => nodes[at].children[i].1 as usize,
                    Err(i) => {
                        let new = nodes.len();
                        nodes.push(Node::default());
                        nodes[at].children.insert(i, (b, new as u32));
                        new
                    }
                };
                at = next;
            }
            nodes[at].token = Some(id);
        }
        let mut rank: Vec<(u32, u32)> = vocab
            .partition_order
            .iter()
            .enumerate()
            .map(|(r, &id)| (id, r as u32))
            .collect();
        rank.sort_unstable();
        SpecialSplitter { nodes, rank }
    }

    /// Special tokens occurring anywhere in `text`, in partition order.
    fn occurring(&self, text: &str) -> Vec<u32> {
        let bytes = text.as_bytes();
        let mut found = Vec::new();
        for start in 0..bytes.len() {
            let mut at = 0usize;
            for &b in &bytes[start..] {
                match self.nodes[at].children.binary_search_by_key(&b, |c| c.0) {
                    Ok(i) => at = self.nodes[at].children[i].1 as usize,
                    Err(_) => break,
                }
                if let Some(id) = self.nodes[at].token {
                    found.push(id);
                }
            }
        }
        found.sort_unstable();
        found.dedup();
        let rank_of = |id: u32| {
            self.rank
                .binary_search_by_key(&id, |r| r.0)
                .map_or(u32::MAX, |i| self.rank[i].1)
        };
        found.sort_by_key(|&id| rank_of(id));
        found
    }

    /// Splits `text` into fragments. Control and unknown tokens are only recognised with
    /// `parse_special`; user-defined tokens always are.
    pub(crate) fn split<'t>(
        &self,
        vocab: &Vocab,
        text: &'t str,
        parse_special: bool,
    ) -> Vec<Fragment<'t>> {
        if text.is_empty() {
            return Vec::new();
        }
        let mut fragments = vec![Fragment::Text(text)];
        for id in self.occurring(text) {
            if !parse_special && vocab.attr(id).has(TokenAttr::CONTROL | TokenAttr::UNKNOWN) {
                continue;
            }
            let special = vocab.texts[id as usize].as_str();
            let mut next = Vec::with_capacity(fragments.len() + 2);
            for fragment in fragments {
                let Fragment::Text(mut rest) = fragment else {
                    next.push(fragment);
                    continue;
                };
                while let Some(at) = rest.find(special) {
                    if at > 0 {
                        next.push(Fragment::Text(&rest[..at]));
                    }
                    next.push(Fragment::Token(id));
                    rest = &rest[at + special.len()..];
                }
                if !rest.is_empty() {
                    next.push(Fragment::Text(rest));
                }
            }
            fragments = next;
        }
        fragments
    }
}
