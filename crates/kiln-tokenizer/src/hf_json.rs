//! Hugging Face `tokenizer.json` models (used for the BERT-style embedding models).

use std::path::Path;

use crate::error::{Error, Result};
use crate::gguf_backend::PieceTable;

#[derive(Debug)]
pub(crate) struct JsonBackend {
    /// Splits special-token text out of the input.
    pub(crate) parsing: tokenizers::Tokenizer,
    /// The same model treating special-token text as plain text.
    pub(crate) literal: tokenizers::Tokenizer,
    pub(crate) special: Vec<bool>,
    pub(crate) bos: Option<u32>,
    pub(crate) eos: Option<u32>,
    pub(crate) pieces: PieceTable,
    pub(crate) vocab_size: usize,
}

/// Conventional names of the sequence-start and sequence-end tokens, by preference.
const BOS_NAMES: &[&str] = &["[CLS]", "<s>", "<bos>", "<|begin_of_text|>"];
const EOS_NAMES: &[&str] = &["[SEP]", "</s>", "<eos>", "<|endoftext|>", "<|end_of_text|>"];

impl JsonBackend {
    pub(crate) fn load(path: &Path) -> Result<Self> {
        let fail = |reason: String| Error::TokenizerJson {
            path: path.to_path_buf(),
            reason,
        };
        let mut parsing =
            tokenizers::Tokenizer::from_file(path).map_err(|e| fail(e.to_string()))?;
        // Padding and truncation are batching policy, left to the caller: encode returns
        // every id of one text.
        parsing.with_padding(None);
        parsing
            .with_truncation(None)
            .map_err(|e| fail(e.to_string()))?;
        let mut literal = parsing.clone();
        literal.set_encode_special_tokens(true);

        let vocab_size = parsing.get_vocab_size(true);
        let mut special = vec![false; vocab_size];
        for (id, token) in parsing.get_added_tokens_decoder() {
            if token.special {
                if let Some(s) = special.get_mut(id as usize) {
                    *s = true;
                }
            }
        }
        let pieces = PieceTable::new((0..vocab_size as u32).map(|id| {
            parsing
                .id_to_token(id)
                .map(String::into_bytes)
                .unwrap_or_default()
        }));
        let find = |names: &[&str]| names.iter().find_map(|n| parsing.token_to_id(n));
        Ok(JsonBackend {
            bos: find(BOS_NAMES),
            eos: find(EOS_NAMES),
            parsing,
            literal,
            special,
            pieces,
            vocab_size,
        })
    }

    pub(crate) fn encode(
        &self,
        text: &str,
        add_special: bool,
        parse_special: bool,
    ) -> Result<Vec<u32>> {
        let tokenizer = if parse_special {
            &self.parsing
        } else {
            &self.literal
        };
        let encoding = tokenizer
            .encode(text, add_special)
            .map_err(|e| Error::Encode {
                len: text.len(),
                reason: e.to_string(),
            })?;
        Ok(encoding.get_ids().to_vec())
    }

    pub(crate) fn decode(&self, ids: &[u32], skip_special: bool) -> String {
        // Unknown ids are the only failure; decode what is known rather than nothing.
        let known: Vec<u32> = ids
            .iter()
            .copied()
            .filter(|&id| (id as usize) < self.vocab_size)
            .collect();
        self.parsing
            .decode(&known, skip_special)
            .unwrap_or_default()
    }
}
