//! [`Bpe`] against the `tokenizers` crate's BPE, given the same vocabulary and merges
//! (the real models' ones), on random words: the same ids, or the merger is wrong.
//! Building the tables from a file is checked against llama.cpp's own ids elsewhere
//! (`tests/llamacpp_ids.rs`).

use std::sync::OnceLock;

use kiln_formats::GgufFile;
use proptest::prelude::*;
use tokenizers::models::bpe::BPE;
use tokenizers::Model;

use super::*;
use crate::bpe_build;
use crate::vocab::VocabKind;

struct Pair {
    vocab: Vocab,
    ours: Bpe,
    reference: BPE,
}

fn build(model: &str) -> Pair {
    let spec = kiln_catalog::find(model).expect("model is in the catalogue");
    let path = kiln_testkit::model_file(model, spec.primary_file().file_name);
    let gguf = GgufFile::open(path).expect("open gguf");
    let vocab = Vocab::from_gguf(&gguf).expect("vocab");
    let ours = match vocab.kind {
        VocabKind::BytePairs(_) => bpe_build::gpt2_model(&gguf, &vocab).expect("merges"),
        VocabKind::SentencePiece => bpe_build::spm_model(&vocab),
    };
    let mut by_rank: Vec<_> = ours.merges.iter().collect();
    by_rank.sort_unstable_by_key(|(_, &(rank, _))| rank);
    let text = |id: u32| vocab.texts[id as usize].clone();
    let merges = by_rank
        .into_iter()
        .map(|(&(a, b), _)| (text(a), text(b)))
        .collect();
    let ids: tokenizers::models::bpe::Vocab =
        (0..vocab.len() as u32).map(|id| (text(id), id)).collect();
    let reference = BPE::builder()
        .vocab_and_merges(ids, merges)
        .byte_fallback(ours.byte_tokens.is_some())
        .ignore_merges(ours.ignore_merges)
        .build()
        .expect("reference BPE");
    Pair {
        vocab,
        ours,
        reference,
    }
}

fn pair(model: &'static str) -> &'static Pair {
    static QWEN: OnceLock<Pair> = OnceLock::new();
    static GEMMA: OnceLock<Pair> = OnceLock::new();
    let cell = if model == "gemma3-270m" {
        &GEMMA
    } else {
        &QWEN
    };
    cell.get_or_init(|| build(model))
}

fn check(model: &'static str, word: &str) -> Result<(), TestCaseError> {
    let p = pair(model);
    let mut ours = Vec::new();
    p.ours.tokenize(&p.vocab, word, &mut ours);
    let reference: Vec<u32> = p
        .reference
        .tokenize(word)
        .expect("reference tokenizes")
        .into_iter()
        .map(|t| t.id)
        .collect();
    prop_assert_eq!(ours, reference, "word {:?}", word);
    Ok(())
}

/// Words glued from token texts (so long merges happen) and stray characters (so
/// partial merges, and for SentencePiece byte fallback, do).
fn words(model: &'static str) -> impl Strategy<Value = String> {
    let n = pair(model).vocab.len() as u32;
    let piece = prop_oneof![
        3 => (0..n).prop_map(move |id| pair(model).vocab.texts[id as usize].clone()),
        1 => any::<char>().prop_map(String::from),
        1 => "[a-z ▁Ġ]{1,4}",
    ];
    proptest::collection::vec(piece, 1..12).prop_map(|parts| parts.concat())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn byte_level_words_merge_as_the_tokenizers_crate_does(word in words("qwen2.5-coder-0.5b-instruct")) {
        check("qwen2.5-coder-0.5b-instruct", &word)?;
    }

    #[test]
    fn sentencepiece_words_merge_as_the_tokenizers_crate_does(word in words("gemma3-270m")) {
        check("gemma3-270m", &word)?;
    }
}

#[test]
fn long_runs_merge_as_the_tokenizers_crate_does() {
    for word in ["a".repeat(5000), "ĠĠ".repeat(3000), "▁".repeat(4000)] {
        check("qwen2.5-coder-0.5b-instruct", &word).expect("qwen");
        check("gemma3-270m", &word).expect("gemma");
    }
}
