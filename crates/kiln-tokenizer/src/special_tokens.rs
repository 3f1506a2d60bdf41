//! llama.cpp's rules that find special tokens by their text: end-of-turn, fill-in-the-middle
//! and end-of-generation tokens, and which tokens get split out of raw text.
//!
//! GGUF files rarely list these roles, so llama.cpp recognises well-known texts and marks
//! the tokens as control tokens. The same marks change encoding (control tokens are only
//! split out when parsing specials) and decoding (they render empty unless asked for), so
//! they are reproduced here. Where llama.cpp picks "the first match" of a hash map, this
//! picks the lowest id.

use crate::vocab::{TokenAttr, Vocab};

const EOT: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<|end_of_text|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "<｜end▁of▁sentence｜>",
    "<end_of_utterance>",
];
const EOM: &[&str] = &["<|eom_id|>"];
const FIM_PRE: &[&str] = &[
    "<|fim_prefix|>",
    "<fim-prefix>",
    "<fim_prefix>",
    "<｜fim▁begin｜>",
    "<PRE>",
    "▁<PRE>",
    "<|code_prefix|>",
    "<|prefix|>",
];
const FIM_SUF: &[&str] = &[
    "<|fim_suffix|>",
    "<fim-suffix>",
    "<fim_suffix>",
    "<｜fim▁hole｜>",
    "<SUF>",
    "▁<SUF>",
    "<|code_suffix|>",
    "<|suffix|>",
];
const FIM_MID: &[&str] = &[
    "<|fim_middle|>",
    "<fim-middle>",
    "<fim_middle>",
    "<｜fim▁end｜>",
    "<MID>",
    "▁<MID>",
    "<|code_middle|>",
    "<|middle|>",
];
const FIM_PAD: &[&str] = &["<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"];
const FIM_REP: &[&str] = &[
    "<|fim_repo|>",
    "<|repo_name|>",
    "<fim-repo>",
    "<REPO>",
    "<reponame>",
];
const FIM_SEP: &[&str] = &["<|file_sep|>"];
const EOG: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<|return|>",
    "<|call|>",
    "<|flush|>",
    "<|calls|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "</s>",
    "<|eom_id|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "[EOS]",
    "<|end_of_text|>",
    "<end_of_utterance>",
    "<eos>",
    "<turn|>",
    "<|tool_response>",
    "<｜end▁of▁sentence｜>",
    "[e~[",
];
/// gpt-oss channel markers, always rendered as text.
const ALWAYS_RENDERED: &[&str] = &["<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"];

fn mark_control(vocab: &mut Vocab, id: u32) {
    if let Some(a) = vocab.attrs.get_mut(id as usize) {
        a.0 |= TokenAttr::CONTROL;
    }
}

/// The lowest id whose text is one of `texts`.
fn find(vocab: &Vocab, texts: &[&str]) -> Option<u32> {
    texts.iter().filter_map(|t| vocab.id(t)).min()
}

/// Fills a role from its well-known texts unless the file set it, marking it control.
fn detect(vocab: &mut Vocab, current: Option<u32>, texts: &[&str]) -> Option<u32> {
    if current.is_some() {
        return current;
    }
    let found = find(vocab, texts);
    if let Some(id) = found {
        mark_control(vocab, id);
    }
    found
}

/// Applies every rule, then computes the end-of-generation set and the partition order.
pub(crate) fn resolve(vocab: &mut Vocab) {
    let s = vocab.special.clone();
    vocab.special.eot = detect(vocab, s.eot, EOT);
    vocab.special.eom = detect(vocab, s.eom, EOM);
    vocab.special.fim_pre = detect(vocab, s.fim_pre, FIM_PRE);
    vocab.special.fim_suf = detect(vocab, s.fim_suf, FIM_SUF);
    vocab.special.fim_mid = detect(vocab, s.fim_mid, FIM_MID);
    vocab.special.fim_pad = detect(vocab, s.fim_pad, FIM_PAD);
    vocab.special.fim_rep = detect(vocab, s.fim_rep, FIM_REP);
    vocab.special.fim_sep = detect(vocab, s.fim_sep, FIM_SEP);

    // Control tokens named "unused..." are unused.
    for (text, attr) in vocab.texts.iter().zip(vocab.attrs.iter_mut()) {
        if attr.has(TokenAttr::CONTROL) && text.contains("unused") {
            attr.0 |= TokenAttr::UNUSED;
        }
    }

    let s = vocab.special.clone();
    let mut eog: Vec<u32> = [s.fim_pad, s.fim_rep, s.fim_sep]
        .into_iter()
        .flatten()
        .collect();
    for text in EOG {
        if let Some(id) = vocab.id(text) {
            eog.push(id);
            mark_control(vocab, id);
        }
    }
    for text in ALWAYS_RENDERED {
        if let Some(id) = vocab.id(text) {
            vocab.attrs[id as usize] = TokenAttr(TokenAttr::USER_DEFINED);
        }
    }
    eog.extend([s.eos, s.eot, s.eom].into_iter().flatten());
    eog.sort_unstable();
    eog.dedup();

    let has = |vocab: &Vocab, eog: &[u32], text: &str| vocab.id(text).filter(|id| eog.contains(id));
    // Harmony / Solar Open: "<|end|>" ends a message, not the generation.
    if let Some(end) = has(vocab, &eog, "<|end|>") {
        let ret = has(vocab, &eog, "<|return|>").is_some();
        let call =
            has(vocab, &eog, "<|call|>").is_some() || has(vocab, &eog, "<|calls|>").is_some();
        let flush = has(vocab, &eog, "<|flush|>").is_some();
        if call && (ret || flush) {
            eog.retain(|&id| id != end);
            vocab.attrs[end as usize] = TokenAttr(TokenAttr::USER_DEFINED);
        }
    }
    // Gemma 4 / PLaMo: "</s>" is an ordinary token there.
    if let Some(s_id) = has(vocab, &eog, "</s>") {
        if has(vocab, &eog, "<|tool_response>").is_some()
            || has(vocab, &eog, "<|plamo:eos|>").is_some()
        {
            eog.retain(|&id| id != s_id);
            vocab.attrs[s_id as usize] = TokenAttr(TokenAttr::NORMAL);
        }
    }
    vocab.eog = eog;

    let split_out = TokenAttr::CONTROL | TokenAttr::USER_DEFINED | TokenAttr::UNKNOWN;
    let mut order: Vec<u32> = (0..vocab.len() as u32)
        .filter(|&id| vocab.attr(id).has(split_out))
        .collect();
    // Stable: equal lengths keep ascending ids.
    order.sort_by_key(|&id| std::cmp::Reverse(vocab.texts[id as usize].len()));
    vocab.partition_order = order;
}
