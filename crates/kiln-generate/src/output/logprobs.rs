//! Engine logprobs → OpenAI's two formats: chat (`content: [{token, logprob, bytes,
//! top_logprobs}]`) and legacy completions (`tokens`, `token_logprobs`, `top_logprobs`,
//! `text_offset`).

use kiln_api::chat::{ChatLogprobs, ChatTokenLogprob, TopLogprob};
use kiln_api::completions::{CompletionLogprobs, TopLogprobMap};
use kiln_engine::TokenLogprobs;
use kiln_tokenizer::{IncrementalDecoder, Tokenizer};

/// A token's text (lossy when it holds part of a UTF-8 character) and exact bytes.
fn token_text(tok: &Tokenizer, id: u32) -> (String, Vec<u8>) {
    let bytes = tok.token_bytes(id).to_vec();
    (String::from_utf8_lossy(&bytes).into_owned(), bytes)
}

/// Chat-format entries for `ids` (one logprob record per token, in order).
pub fn chat(tok: &Tokenizer, ids: &[u32], lps: &[TokenLogprobs]) -> ChatLogprobs {
    let content = ids
        .iter()
        .zip(lps)
        .map(|(&id, lp)| {
            let (token, bytes) = token_text(tok, id);
            ChatTokenLogprob {
                token,
                logprob: lp.logprob,
                bytes: Some(bytes),
                top_logprobs: lp
                    .top
                    .iter()
                    .map(|&(t, logprob)| {
                        let (token, bytes) = token_text(tok, t);
                        TopLogprob {
                            token,
                            logprob,
                            bytes: Some(bytes),
                        }
                    })
                    .collect(),
            }
        })
        .collect();
    ChatLogprobs {
        content: Some(content),
    }
}

/// Legacy entries for `ids`; `offsets[i]` is token `i`'s character offset in the choice's
/// text before `base` (the length of an echoed prompt) is added.
pub fn legacy(
    tok: &Tokenizer,
    ids: &[u32],
    lps: &[TokenLogprobs],
    offsets: &[usize],
    base: usize,
) -> CompletionLogprobs {
    let mut out = CompletionLogprobs::default();
    for (i, (&id, lp)) in ids.iter().zip(lps).enumerate() {
        out.tokens.push(token_text(tok, id).0);
        out.token_logprobs.push(Some(lp.logprob));
        out.top_logprobs.push(Some(top_map(tok, lp)));
        out.text_offset
            .push(base + offsets.get(i).copied().unwrap_or(0));
    }
    out
}

/// Each token's character offset in the decoded text of `ids` (for `text_offset`).
pub fn prompt_offsets(tok: &Tokenizer, ids: &[u32]) -> Vec<usize> {
    let mut decoder = IncrementalDecoder::new(tok, false);
    let mut offset = 0;
    ids.iter()
        .map(|&id| {
            let at = offset;
            offset += decoder.push(id).chars().count();
            at
        })
        .collect()
}

/// Legacy entries for an echoed prompt: `ids` are its tokens and `offsets` their
/// [`prompt_offsets`], `lps[i]` the logprobs of token `i + 1` (the first token has no
/// context, so its entries are null); positions `first..=lps.len()` are included.
pub fn legacy_prompt(
    tok: &Tokenizer,
    ids: &[u32],
    offsets: &[usize],
    lps: &[TokenLogprobs],
    first: usize,
) -> CompletionLogprobs {
    let mut out = CompletionLogprobs::default();
    for (pos, &id) in ids.iter().enumerate().take(lps.len() + 1).skip(first) {
        let lp = pos.checked_sub(1).and_then(|i| lps.get(i));
        out.tokens.push(token_text(tok, id).0);
        out.token_logprobs.push(lp.map(|lp| lp.logprob));
        out.top_logprobs.push(lp.map(|lp| top_map(tok, lp)));
        out.text_offset.push(offsets.get(pos).copied().unwrap_or(0));
    }
    out
}

/// Appends `more`'s entries to `out`.
pub fn extend_legacy(out: &mut CompletionLogprobs, more: CompletionLogprobs) {
    out.tokens.extend(more.tokens);
    out.token_logprobs.extend(more.token_logprobs);
    out.top_logprobs.extend(more.top_logprobs);
    out.text_offset.extend(more.text_offset);
}

fn top_map(tok: &Tokenizer, lp: &TokenLogprobs) -> TopLogprobMap {
    TopLogprobMap(
        lp.top
            .iter()
            .map(|&(t, l)| (token_text(tok, t).0, l))
            .collect(),
    )
}
