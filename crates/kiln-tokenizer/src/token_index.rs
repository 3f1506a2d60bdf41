//! Text -> id over the vocabulary's own token texts.
//!
//! A table of ids, hashed by the text each id names, instead of a map owning a second
//! copy of every text: a start builds it in a few milliseconds for a 152k-token
//! vocabulary, where a `HashMap<String, u32>` allocated 152k strings again.

use hashbrown::{DefaultHashBuilder, HashTable};
use std::hash::BuildHasher;

#[derive(Debug, Default)]
pub(crate) struct TokenIndex {
    table: HashTable<u32>,
    hasher: DefaultHashBuilder,
}

impl TokenIndex {
    /// Indexes `texts` by position. `Err((later, earlier))` names the first text that
    /// repeats an earlier one.
    pub(crate) fn build(texts: &[String]) -> Result<Self, (u32, u32)> {
        let hasher = DefaultHashBuilder::default();
        let mut table = HashTable::with_capacity(texts.len());
        for (i, text) in texts.iter().enumerate() {
            let hash = hasher.hash_one(text.as_str());
            match table.entry(
                hash,
                |&id: &u32| texts[id as usize] == *text,
                |&id: &u32| hasher.hash_one(texts[id as usize].as_str()),
            ) {
                hashbrown::hash_table::Entry::Occupied(e) => return Err((i as u32, *e.get())),
                hashbrown::hash_table::Entry::Vacant(e) => {
                    e.insert(i as u32);
                }
            }
        }
        Ok(TokenIndex { table, hasher })
    }

    /// The id of `text` among the `texts` this index was built over.
    pub(crate) fn get(&self, texts: &[String], text: &str) -> Option<u32> {
        let hash = self.hasher.hash_one(text);
        self.table
            .find(hash, |&id| texts[id as usize] == text)
            .copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_every_text_and_refuses_repeats() {
        let texts: Vec<String> = ["a", "b", "ab", "", "é"].map(String::from).to_vec();
        let index = TokenIndex::build(&texts).expect("distinct");
        for (i, t) in texts.iter().enumerate() {
            assert_eq!(index.get(&texts, t), Some(i as u32));
        }
        assert_eq!(index.get(&texts, "ba"), None);
        let repeated: Vec<String> = ["x", "y", "x"].map(String::from).to_vec();
        assert_eq!(TokenIndex::build(&repeated).err(), Some((2, 0)));
    }
}
