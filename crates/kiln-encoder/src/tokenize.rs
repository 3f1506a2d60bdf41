//! Text to token ids through a `tokenizer.json`, with length limits Kiln enforces itself.
//!
//! A `tokenizer.json` may carry its own truncation and padding (all-MiniLM-L6-v2's pads
//! and cuts everything to 128 tokens); both are switched off here. Kiln measures each
//! input against the model's limit, then either reports it as too long or truncates it
//! the way Hugging Face does: words are cut so that words plus special tokens fit.

use std::path::Path;

use tokenizers::{PostProcessor, Tokenizer, TruncationDirection};

use crate::error::{Error, Result};

/// A loaded tokenizer and how many special tokens it adds around a single text.
pub(crate) struct TextTokenizer {
    inner: Tokenizer,
    n_special: usize,
}

/// One tokenized input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Tokens {
    /// Ids fed to the model, special tokens included, at most the model's limit.
    pub ids: Vec<u32>,
    /// Tokens the full text has (special tokens included), before any truncation.
    pub full_len: usize,
}

impl TextTokenizer {
    /// Loads `path`. With `literal_specials`, special-token text inside an input is
    /// tokenized as ordinary text (tiktoken's `encode_ordinary`), never as the token.
    pub fn load(path: &Path, literal_specials: bool) -> Result<Self> {
        let fail = |message: String| Error::Tokenizer {
            path: path.to_path_buf(),
            message,
        };
        let mut inner = Tokenizer::from_file(path).map_err(|e| fail(e.to_string()))?;
        inner
            .with_truncation(None)
            .map_err(|e| fail(e.to_string()))?;
        inner.with_padding(None);
        inner.set_encode_special_tokens(literal_specials);
        let n_special = inner
            .get_post_processor()
            .map_or(0, |p| p.added_tokens(false));
        Ok(Self { inner, n_special })
    }

    /// Id of a token in the vocabulary.
    pub fn token_id(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
    }

    /// Special tokens added around one text.
    pub fn n_special(&self) -> usize {
        self.n_special
    }

    /// The byte range in `text` of each of its tokens, special tokens left out.
    pub fn spans(&self, text: &str) -> Result<Vec<std::ops::Range<usize>>> {
        let words = self
            .inner
            .encode(text, false)
            .map_err(|e| Error::Tokenize {
                index: 0,
                message: e.to_string(),
            })?;
        Ok(words.get_offsets().iter().map(|&(a, b)| a..b).collect())
    }

    /// Tokenizes input `index`; an input over `max` tokens is an error unless `truncate`.
    pub fn encode(&self, index: usize, text: &str, max: usize, truncate: bool) -> Result<Tokens> {
        let fail = |e: tokenizers::Error| Error::Tokenize {
            index,
            message: e.to_string(),
        };
        let mut words = self.inner.encode_fast(text, false).map_err(fail)?;
        let full_len = words.len() + self.n_special;
        if full_len > max {
            if !truncate {
                return Err(Error::InputTooLong {
                    index,
                    tokens: full_len,
                    max,
                });
            }
            words.truncate(
                max.saturating_sub(self.n_special),
                0,
                TruncationDirection::Right,
            );
            // The cut-off tail is not wanted; keep post-processing from handling it.
            drop(words.take_overflowing());
        }
        let ids = self
            .inner
            .post_process(words, None, true)
            .map_err(fail)?
            .get_ids()
            .to_vec();
        Ok(Tokens { ids, full_len })
    }
}
