//! llama.cpp behaviours the bundled models do not exercise: other `gpt2` pre-tokenizers
//! (GPT-2, Llama 3, the default one, StarCoder, StableLM 2), detokenizer space clean-up,
//! BOS/EOS insertion and SentencePiece's `add_space_prefix`.
//!
//! Each variant is a real model's tokenizer metadata with a few keys overridden, written
//! to a temporary GGUF; the expected ids and texts come from llama.cpp on the same files.

use std::path::PathBuf;

use kiln_formats::GgufFile;
use kiln_testkit::gguf_copy::meta_value;
use kiln_testkit::gguf_writer::{GgufWriter, Value};
use kiln_tokenizer::Tokenizer;
use serde::Deserialize;

#[derive(Deserialize)]
struct Fixture {
    variants: Vec<Variant>,
}

#[derive(Deserialize)]
struct Variant {
    model: String,
    overrides: serde_json::Map<String, serde_json::Value>,
    cases: Vec<Case>,
}

#[derive(Deserialize)]
struct Case {
    text: String,
    add_special: bool,
    parse_special: bool,
    ids: Vec<u32>,
    detokenized: String,
    detokenized_skip: String,
}

/// The model's `tokenizer.*` metadata with `overrides` applied, as a tokenizer.
fn variant_tokenizer(
    model: &str,
    overrides: &serde_json::Map<String, serde_json::Value>,
) -> Tokenizer {
    let spec = kiln_catalog::find(model).expect("model is in the catalogue");
    let source = GgufFile::open(kiln_testkit::model_file(
        model,
        spec.primary_file().file_name,
    ))
    .expect("open gguf");
    let mut w = GgufWriter::new();
    for (key, value) in source.metadata() {
        if !key.starts_with("tokenizer.")
            || overrides.contains_key(key)
            || key == "tokenizer.chat_template"
        {
            continue;
        }
        let value = meta_value(value);
        w.kv(key, value);
    }
    for (key, value) in overrides {
        let value = match value {
            serde_json::Value::Bool(b) => Value::Bool(*b),
            serde_json::Value::String(s) => Value::str(s),
            other => panic!("unsupported override {key} = {other}"),
        };
        w.kv(key, value);
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("variant.gguf");
    w.write(&path).expect("write gguf");
    Tokenizer::from_gguf(&GgufFile::open(&path).expect("open variant")).expect("build tokenizer")
}

#[test]
fn variants_match_llama_cpp() {
    let path =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/llamacpp/variants.json");
    let fixture: Fixture =
        serde_json::from_str(&std::fs::read_to_string(&path).expect("read fixture"))
            .expect("parse fixture");
    let mut failures = Vec::new();
    let mut total = 0;
    for variant in &fixture.variants {
        let tokenizer = variant_tokenizer(&variant.model, &variant.overrides);
        let label = format!("{} {:?}", variant.model, variant.overrides);
        for case in &variant.cases {
            total += 1;
            let ids = tokenizer
                .encode(&case.text, case.add_special, case.parse_special)
                .expect("encode");
            if ids != case.ids {
                failures.push(format!(
                    "{label}: encode({:?}, {}, {}):\n  ours:      {ids:?}\n  llama.cpp: {:?}",
                    case.text, case.add_special, case.parse_special, case.ids
                ));
            }
            for (skip, expected) in [(false, &case.detokenized), (true, &case.detokenized_skip)] {
                let text = tokenizer.decode(&case.ids, skip);
                if &text != expected {
                    failures.push(format!("{label}: decode({:?}, {skip}):\n  ours:      {text:?}\n  llama.cpp: {expected:?}", case.ids));
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} mismatches over {total} cases:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
