//! Building the `tokenizers` BPE models for GGUF vocabularies.
//!
//! * `gpt2` files carry their merges; they are used in file order as ranks.
//! * `llama` (SentencePiece) files carry scores instead. llama.cpp merges any two adjacent
//!   pieces whose concatenation is a token, best score of the result first. That is BPE
//!   with one merge `(a, b)` for every way of writing a token as two tokens, ranked by the
//!   merged token's score; leftover characters fall back to `<0xXX>` byte tokens.

use std::collections::HashSet;
use std::path::Path;

use kiln_formats::{GgufFile, MetaArray};
use tokenizers::models::bpe::BPE;

use crate::error::{Error, Result};
use crate::vocab::Vocab;

const KEY_MERGES: &str = "tokenizer.ggml.merges";

fn build_error(path: &Path, what: &'static str, reason: impl ToString) -> Error {
    Error::Build {
        path: path.to_path_buf(),
        what,
        reason: reason.to_string(),
    }
}

/// Byte-level BPE from the file's merges. Merges naming texts outside the vocabulary (or
/// whose result is not a token) can never apply and are skipped; repeated pairs keep
/// their first rank, as in llama.cpp.
pub(crate) fn gpt2_model(gguf: &GgufFile, vocab: &mut Vocab) -> Result<BPE> {
    let path = gguf.path();
    let merges = match gguf.get_array(KEY_MERGES)? {
        Some(MetaArray::String(m)) => m,
        Some(_) => {
            return Err(Error::InvalidMetadata {
                path: path.to_path_buf(),
                key: KEY_MERGES.to_string(),
                reason: "expected an array of strings".to_string(),
            })
        }
        None => {
            return Err(kiln_formats::Error::MissingKey {
                path: path.to_path_buf(),
                key: KEY_MERGES.to_string(),
            }
            .into())
        }
    };
    let mut seen = HashSet::with_capacity(merges.len());
    let mut pairs = Vec::with_capacity(merges.len());
    for merge in merges {
        // llama.cpp splits at the first space after the first byte.
        let Some(at) = merge.bytes().skip(1).position(|b| b == b' ').map(|p| p + 1) else {
            continue;
        };
        let (a, b) = (&merge[..at], &merge[at + 1..]);
        let known = |t: &str| vocab.ids.contains_key(t);
        if !known(a) || !known(b) || !known(&format!("{a}{b}")) {
            continue;
        }
        if seen.insert((a, b)) {
            pairs.push((a.to_string(), b.to_string()));
        }
    }
    BPE::builder()
        .vocab_and_merges(vocab.take_ids(), pairs)
        .ignore_merges(vocab.ignore_merges)
        .build()
        .map_err(|e| build_error(path, "byte-level BPE", e))
}

/// SentencePiece as BPE: merges derived from the scores.
pub(crate) fn spm_model(path: &Path, vocab: &mut Vocab) -> Result<BPE> {
    // (score, merged id, split byte offset)
    let mut splits: Vec<(f32, u32, usize)> = Vec::new();
    for (id, text) in vocab.texts.iter().enumerate() {
        for (at, _) in text.char_indices().skip(1) {
            if vocab.ids.contains_key(&text[..at]) && vocab.ids.contains_key(&text[at..]) {
                splits.push((vocab.scores[id], id as u32, at));
            }
        }
    }
    // Best score first. llama.cpp breaks score ties by position in the text, which BPE
    // ranks cannot express; ids order them instead (only tokens with equal scores can
    // differ, which in practice are control tokens and byte tokens).
    splits.sort_unstable_by(|x, y| y.0.total_cmp(&x.0).then(x.1.cmp(&y.1)).then(x.2.cmp(&y.2)));
    let merges = splits
        .into_iter()
        .map(|(_, id, at)| {
            let text = &vocab.texts[id as usize];
            (text[..at].to_string(), text[at..].to_string())
        })
        .collect();
    BPE::builder()
        .vocab_and_merges(vocab.take_ids(), merges)
        .byte_fallback(true)
        .build()
        .map_err(|e| build_error(path, "SentencePiece", e))
}
