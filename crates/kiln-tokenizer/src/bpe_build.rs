//! Building the merge tables of GGUF vocabularies ([`Bpe`]).
//!
//! * `gpt2` files carry their merges; they are used in file order as ranks.
//! * `llama` (SentencePiece) files carry scores instead. llama.cpp merges any two adjacent
//!   pieces whose concatenation is a token, best score of the result first. That is BPE
//!   with one merge `(a, b)` for every way of writing a token as two tokens, ranked by the
//!   merged token's score; leftover characters fall back to `<0xXX>` byte tokens.

use kiln_formats::{GgufFile, MetaArray};

use crate::bpe::{Bpe, MergeTable};
use crate::error::{Error, Result};
use crate::vocab::Vocab;

const KEY_MERGES: &str = "tokenizer.ggml.merges";

/// Byte-level BPE from the file's merges. Merges naming texts outside the vocabulary (or
/// whose result is not a token) can never apply and are skipped; repeated pairs keep
/// their first rank, as in llama.cpp.
pub(crate) fn gpt2_model(gguf: &GgufFile, vocab: &Vocab) -> Result<Bpe> {
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
    let mut table = MergeTable::with_capacity(merges.len());
    let mut joined = String::new();
    for (rank, merge) in merges.iter().enumerate() {
        // llama.cpp splits at the first space after the first byte.
        let Some(at) = merge.bytes().skip(1).position(|b| b == b' ').map(|p| p + 1) else {
            continue;
        };
        let (a, b) = (&merge[..at], &merge[at + 1..]);
        let (Some(a_id), Some(b_id)) = (vocab.id(a), vocab.id(b)) else {
            continue;
        };
        joined.clear();
        joined.push_str(a);
        joined.push_str(b);
        if let Some(merged) = vocab.id(&joined) {
            table.entry((a_id, b_id)).or_insert((rank as u32, merged));
        }
    }
    Ok(Bpe::new(table, vocab, false, vocab.ignore_merges))
}

/// SentencePiece as BPE: merges derived from the scores.
pub(crate) fn spm_model(vocab: &Vocab) -> Bpe {
    // (score, merged id, split byte offset, left id, right id)
    let mut splits: Vec<(f32, u32, usize, u32, u32)> = Vec::new();
    for (id, text) in vocab.texts.iter().enumerate() {
        for (at, _) in text.char_indices().skip(1) {
            if let (Some(a), Some(b)) = (vocab.id(&text[..at]), vocab.id(&text[at..])) {
                splits.push((vocab.scores[id], id as u32, at, a, b));
            }
        }
    }
    // Best score first. llama.cpp breaks score ties by position in the text, which BPE
    // ranks cannot express; ids order them instead (only tokens with equal scores can
    // differ, which in practice are control tokens and byte tokens).
    splits.sort_unstable_by(|x, y| y.0.total_cmp(&x.0).then(x.1.cmp(&y.1)).then(x.2.cmp(&y.2)));
    let table = splits
        .into_iter()
        .enumerate()
        .map(|(rank, (_, merged, _, a, b))| ((a, b), (rank as u32, merged)))
        .collect();
    Bpe::new(table, vocab, true, false)
}
