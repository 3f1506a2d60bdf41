//! Tokenizer facts and round trips on the real models, and streaming detokenization.
//!
//! The end-of-generation sets, token bytes and hidden-token flags asserted here were
//! checked against llama.cpp (`llama_vocab_is_eog`, `llama_token_to_piece`) over the whole
//! vocabularies.

use std::sync::OnceLock;

use kiln_formats::GgufFile;
use kiln_tokenizer::{IncrementalDecoder, Tokenizer};
use proptest::prelude::*;

const MODELS: [&str; 3] = [
    "smollm2-135m-instruct",
    "qwen2.5-coder-0.5b-instruct",
    "gemma3-270m",
];

fn load(model: &str) -> Tokenizer {
    let spec = kiln_catalog::find(model).expect("model is in the catalogue");
    let path = kiln_testkit::model_file(model, spec.primary_file().file_name);
    Tokenizer::from_gguf(&GgufFile::open(path).expect("open gguf")).expect("build tokenizer")
}

/// Each model's tokenizer, built once per test binary.
fn tokenizer(model: &str) -> &'static Tokenizer {
    static CELLS: [OnceLock<Tokenizer>; 3] = [OnceLock::new(), OnceLock::new(), OnceLock::new()];
    let i = MODELS
        .iter()
        .position(|m| *m == model)
        .expect("known model");
    CELLS[i].get_or_init(|| load(model))
}

#[test]
fn special_tokens_and_end_of_generation_sets() {
    let smol = tokenizer("smollm2-135m-instruct");
    assert_eq!((smol.bos_id(), smol.eos_id()), (Some(1), Some(2)));
    assert_eq!(smol.token_id("<|im_end|>"), Some(2));
    // <|endoftext|>, <|im_end|> and <reponame> (llama.cpp's FIM repo marker).
    assert_eq!(smol.eos_ids(), [0, 2, 4]);
    assert_eq!(smol.vocab_size(), 49152);
    assert!(!smol.adds_bos());

    let qwen = tokenizer("qwen2.5-coder-0.5b-instruct");
    assert_eq!((qwen.bos_id(), qwen.eos_id()), (Some(151643), Some(151645)));
    // "</s>", <|endoftext|>, <|im_end|>, <|fim_pad|>, <|repo_name|>, <|file_sep|>.
    assert_eq!(
        qwen.eos_ids(),
        [128247, 151643, 151645, 151662, 151663, 151664]
    );
    assert_eq!(qwen.token_id("<tool_call>"), Some(151657));
    assert!(qwen.is_special(151644) && !qwen.is_special(151657) && !qwen.is_special(9707));

    let gemma = tokenizer("gemma3-270m");
    assert_eq!((gemma.bos_id(), gemma.eos_id()), (Some(2), Some(1)));
    // <eos>, <end_of_turn> and the HTML tag "</s>" (llama.cpp treats it as end of text).
    assert_eq!(gemma.eos_ids(), [1, 106, 212]);
    assert!(gemma.is_eog(106) && !gemma.is_eog(105));
    assert!(gemma.adds_bos());
    assert_eq!(gemma.vocab_size(), 262144);
    assert!(gemma.chat_template().is_none());
    assert!(smol.chat_template().is_some_and(|t| t.contains("SmolLM")));
}

#[test]
fn token_bytes_are_exact() {
    let qwen = tokenizer("qwen2.5-coder-0.5b-instruct");
    assert_eq!(qwen.token_bytes(9707), b"Hello");
    assert_eq!(qwen.token_bytes(151645), b"<|im_end|>");
    // Byte-level tokens for single bytes of a multi-byte character.
    assert_eq!(qwen.token_bytes(107), [0xaf]);
    let gemma = tokenizer("gemma3-270m");
    assert_eq!(gemma.token_bytes(248), b"\n"); // <0x0A>
    assert_eq!(gemma.token_bytes(493), [0xff]); // <0xFF>
    assert_eq!(gemma.token_bytes(128247), b" Leuk"); // "▁Leuk"
    assert_eq!(gemma.token_bytes(105), b"<start_of_turn>");
    assert_eq!(gemma.token_bytes(u32::MAX), b"");
}

#[test]
fn plain_text_round_trips() {
    let texts = [
        "Hello world! It's 2024.",
        "  indented\n\tcode();\r\n\n\n",
        "naïve café 中文 😀 👨\u{200d}👩\u{200d}👧 مرحبا",
        "<|im_start|> and <start_of_turn> as plain text",
        "",
    ];
    for model in MODELS {
        let t = tokenizer(model);
        for text in texts {
            let ids = t.encode(text, false, false).expect("encode");
            assert_eq!(t.decode(&ids, false), text, "{model}: {text:?} -> {ids:?}");
        }
    }
}

#[test]
fn specials_parse_only_when_asked() {
    let smol = tokenizer("smollm2-135m-instruct");
    let ids = smol
        .encode("<|im_start|>user\nHi<|im_end|>", false, true)
        .expect("encode");
    assert_eq!(ids.first(), Some(&1));
    assert_eq!(ids.last(), Some(&2));
    assert_eq!(smol.decode(&ids, true), "user\nHi");
    let literal = smol.encode("<|im_start|>", false, false).expect("encode");
    assert!(literal.len() > 1 && !literal.contains(&1));

    let gemma = tokenizer("gemma3-270m");
    let ids = gemma
        .encode("<start_of_turn>user\nHi", true, true)
        .expect("encode");
    assert_eq!(&ids[..2], [2, 105]);
    assert_eq!(gemma.decode(&ids, false), "<bos><start_of_turn>user\nHi");
    assert_eq!(gemma.decode(&ids, true), "user\nHi");
}

/// Everything an incremental decoder returns for `ids`, concatenated.
fn stream(t: &Tokenizer, ids: &[u32], skip_special: bool) -> String {
    let mut d = IncrementalDecoder::new(t, skip_special);
    let mut out: String = ids.iter().map(|&id| d.push(id)).collect();
    out.push_str(&d.finish());
    out
}

#[test]
fn streaming_holds_partial_characters() {
    let qwen = tokenizer("qwen2.5-coder-0.5b-instruct");
    // The byte-level token of each single byte.
    let byte_token = |b: u8| {
        (0..qwen.vocab_size() as u32)
            .find(|&id| qwen.token_bytes(id) == [b])
            .expect("byte token")
    };
    let emoji: Vec<u32> = "😀".bytes().map(byte_token).collect();
    let mut d = IncrementalDecoder::new(qwen, false);
    assert_eq!(d.push(emoji[0]), "");
    assert_eq!(d.push(emoji[1]), "");
    assert_eq!(d.push(emoji[2]), "");
    assert_eq!(d.push(emoji[3]), "😀");
    // A lone continuation byte can never complete: replaced at once.
    assert_eq!(d.push(byte_token(0x80)), "\u{FFFD}");
    // A sequence cut off by the end of the stream is flushed as one replacement.
    assert_eq!(d.push(emoji[0]), "");
    assert_eq!(d.finish(), "\u{FFFD}");
}

/// Ids biased towards single-byte tokens so that partial and invalid UTF-8 are common.
fn ids_strategy(model: &'static str) -> impl Strategy<Value = Vec<u32>> {
    let t = tokenizer(model);
    let n = t.vocab_size() as u32;
    let single_bytes: Vec<u32> = (0..n).filter(|&id| t.token_bytes(id).len() == 1).collect();
    let any = (0..n).boxed();
    let byte = proptest::sample::select(single_bytes).boxed();
    proptest::collection::vec(prop_oneof![2 => any, 3 => byte], 0..40)
}

fn check_stream(model: &'static str, ids: &[u32]) -> Result<(), TestCaseError> {
    let t = tokenizer(model);
    let bytes: Vec<u8> = ids
        .iter()
        .flat_map(|&id| t.token_bytes(id).to_vec())
        .collect();
    let streamed = stream(t, ids, false);
    prop_assert_eq!(&streamed, &String::from_utf8_lossy(&bytes).into_owned());
    prop_assert_eq!(&streamed, &t.decode(ids, false));
    prop_assert_eq!(stream(t, ids, true), t.decode(ids, true));
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn streaming_equals_lossy_decoding_smollm2(ids in ids_strategy("smollm2-135m-instruct")) {
        check_stream("smollm2-135m-instruct", &ids)?;
    }

    #[test]
    fn streaming_equals_lossy_decoding_qwen(ids in ids_strategy("qwen2.5-coder-0.5b-instruct")) {
        check_stream("qwen2.5-coder-0.5b-instruct", &ids)?;
    }

    #[test]
    fn streaming_equals_lossy_decoding_gemma(ids in ids_strategy("gemma3-270m")) {
        check_stream("gemma3-270m", &ids)?;
    }
}
