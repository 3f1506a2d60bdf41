//! Hugging Face `tokenizer.json` models: all-MiniLM-L6-v2's WordPiece tokenizer.

use kiln_tokenizer::{IncrementalDecoder, Tokenizer};

fn minilm() -> Tokenizer {
    Tokenizer::from_tokenizer_json(kiln_testkit::model_file(
        "all-minilm-l6-v2",
        "tokenizer.json",
    ))
    .expect("load tokenizer.json")
}

#[test]
fn wordpiece_ids_and_specials() {
    let t = minilm();
    assert_eq!(t.vocab_size(), 30522);
    assert_eq!((t.bos_id(), t.eos_id()), (Some(101), Some(102)));
    assert_eq!(t.eos_ids(), [102]);
    assert!(t.is_special(101) && t.is_special(102) && !t.is_special(7592));
    assert!(t.chat_template().is_none());

    // Lower-cased, punctuation split, [CLS] ... [SEP] added.
    let ids = t.encode("Hello, World!", true, false).expect("encode");
    assert_eq!(ids, [101, 7592, 1010, 2088, 999, 102]);
    assert_eq!(
        t.encode("Hello, World!", false, false).expect("encode"),
        [7592, 1010, 2088, 999]
    );
    assert_eq!(t.decode(&ids, true), "hello, world!");
    assert_eq!(t.decode(&ids, false), "[CLS] hello, world! [SEP]");
    // Sub-words.
    let ids = t.encode("tokenization", false, false).expect("encode");
    assert_eq!(ids.len(), 2);
    assert_eq!(t.token_bytes(ids[1]), b"##ization");
    assert_eq!(t.token_id("[SEP]"), Some(102));
}

#[test]
fn special_text_is_parsed_only_when_asked() {
    let t = minilm();
    assert_eq!(
        t.encode("a [SEP] b", false, true).expect("encode"),
        [1037, 102, 1038]
    );
    let literal = t.encode("a [SEP] b", false, false).expect("encode");
    assert!(!literal.contains(&102), "{literal:?}");
}

#[test]
fn streaming_matches_decode() {
    let t = minilm();
    let ids = t
        .encode("Streaming tokenization works, mostly.", false, false)
        .expect("encode");
    let mut d = IncrementalDecoder::new(&t, true);
    let mut out: String = ids.iter().map(|&id| d.push(id)).collect();
    out.push_str(&d.finish());
    assert_eq!(out, t.decode(&ids, true));
}
