//! Token ids and detokenized text must be identical to llama.cpp's on the real models.
//!
//! The fixtures were produced by llama.cpp itself (`llama_tokenize` /
//! `llama_detokenize`) on the same GGUF files; see each file's header for the build.

use std::path::PathBuf;

use kiln_formats::GgufFile;
use kiln_tokenizer::Tokenizer;
use serde::Deserialize;

#[derive(Deserialize)]
struct Fixture {
    llama_cpp_commit: String,
    gguf_sha256: String,
    bos_id: u32,
    eos_id: u32,
    add_bos_token: bool,
    detokenize_flags: DetokenizeFlags,
    cases: Vec<Case>,
}

#[derive(Deserialize)]
struct DetokenizeFlags {
    remove_special: bool,
    unparse_special: bool,
}

#[derive(Deserialize)]
struct Case {
    text: String,
    add_special: bool,
    parse_special: bool,
    ids: Vec<u32>,
    detokenized: String,
}

fn fixture(model: &str) -> Fixture {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/llamacpp")
        .join(format!("{model}.json"));
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("cannot parse {}: {e}", path.display()))
}

/// Encodes and decodes every case; reports all mismatches at once.
fn check(model: &str) {
    let fixture = fixture(model);
    let spec = kiln_catalog::find(model).expect("model is in the catalogue");
    let file = spec.primary_file();
    assert_eq!(
        file.sha256,
        Some(fixture.gguf_sha256.as_str()),
        "fixture was made from another file than the catalogue's"
    );
    let gguf = GgufFile::open(kiln_testkit::model_file(model, file.file_name)).expect("open gguf");
    let tokenizer = Tokenizer::from_gguf(&gguf).expect("build tokenizer");

    assert_eq!(tokenizer.bos_id(), Some(fixture.bos_id));
    assert_eq!(tokenizer.eos_id(), Some(fixture.eos_id));
    assert_eq!(tokenizer.adds_bos(), fixture.add_bos_token);
    // decode(ids, skip_special = false) is detokenize(remove_special = false,
    // unparse_special = true).
    assert!(!fixture.detokenize_flags.remove_special && fixture.detokenize_flags.unparse_special);

    let mut failures = Vec::new();
    for case in &fixture.cases {
        let ids = tokenizer
            .encode(&case.text, case.add_special, case.parse_special)
            .expect("encode");
        if ids != case.ids {
            failures.push(format!(
                "encode({:?}, add_special={}, parse_special={}):\n  ours:     {ids:?}\n  llama.cpp: {:?}",
                case.text, case.add_special, case.parse_special, case.ids
            ));
        }
        let text = tokenizer.decode(&case.ids, false);
        if text != case.detokenized {
            failures.push(format!(
                "decode({:?}):\n  ours:     {text:?}\n  llama.cpp: {:?}",
                case.ids, case.detokenized
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{model}: {} mismatches with llama.cpp {} over {} cases:\n{}",
        failures.len(),
        fixture.llama_cpp_commit,
        fixture.cases.len(),
        failures.join("\n")
    );
}

#[test]
fn smollm2_matches_llama_cpp() {
    check("smollm2-135m-instruct");
}

#[test]
fn qwen2_5_coder_matches_llama_cpp() {
    check("qwen2.5-coder-0.5b-instruct");
}

#[test]
fn gemma3_matches_llama_cpp() {
    check("gemma3-270m");
}
