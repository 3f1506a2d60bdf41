//! The workload on the real ShareGPT V3 file (fetched through the catalogue) and the
//! real SmolLM2 tokenizer: repair counts, sampling determinism, save/load identity.

use std::path::PathBuf;
use std::sync::OnceLock;

use kiln_bench::{
    fetch_sharegpt, request_body, Endpoint, GgufTokenCounter, LengthFilter, ShareGpt, TokenCounter,
    Workload,
};
use kiln_catalog::NoProgress;

fn dataset() -> &'static ShareGpt {
    static DATA: OnceLock<ShareGpt> = OnceLock::new();
    DATA.get_or_init(|| {
        let cache = kiln_testkit::cache().expect("model cache");
        let path = fetch_sharegpt(&cache, &NoProgress).expect("ShareGPT fetched");
        ShareGpt::load(&path).expect("ShareGPT loads")
    })
}

fn smollm2() -> PathBuf {
    kiln_testkit::model_file("smollm2-135m-instruct", "SmolLM2-135M-Instruct.Q4_1.gguf")
}

fn counter() -> &'static GgufTokenCounter {
    static COUNTER: OnceLock<GgufTokenCounter> = OnceLock::new();
    COUNTER.get_or_init(|| {
        GgufTokenCounter::open(&smollm2(), Some("smollm2-135m-instruct")).expect("tokenizer")
    })
}

#[test]
fn repaired_file_has_the_known_shape() {
    let d = dataset();
    // ASSETS.md: 17,671 complete conversations, 17,400 with two turns or more.
    assert_eq!(d.stats.records, 17_671);
    assert_eq!(d.stats.multi_turn, 17_400);
    // Most of the rest start with the model's turn: continuations of split conversations.
    assert_eq!(d.stats.human_then_gpt, 11_135);
    assert_eq!(d.conversations.len(), 11_135);
    assert!(d.stats.bytes_cut > 0 && d.stats.bytes_cut < 1 << 20);
    let first = &d.conversations[0];
    assert!(first
        .prompt
        .starts_with("Summarize the main ideas of Jeff Walker's Product Launch Formula"));
    assert!(first
        .reply
        .starts_with("Here are the main ideas of Jeff Walker's Product Launch Formula"));
}

#[test]
fn token_counts_use_the_model_tokenizer() {
    let c = counter();
    assert_eq!(c.name(), "smollm2-135m-instruct");
    assert_eq!(c.count("").expect("count"), 0);
    // SmolLM2's pre-tokenizer splits digits one by one.
    assert_eq!(c.count("2024").expect("count"), 4);
    // Special-token text is plain text here, so it is several tokens, not one.
    assert!(c.count("<|im_start|>").expect("count") > 1);
}

#[test]
fn sample_is_deterministic_and_filtered() {
    let d = dataset();
    let filter = LengthFilter::default();
    let a = Workload::sample(&d.conversations, counter(), 200, 0, filter).expect("sample");
    let b = Workload::sample(&d.conversations, counter(), 200, 0, filter).expect("sample");
    assert_eq!(a, b);
    assert_eq!(a.requests.len(), 200);
    assert_eq!(a.seed, 0);
    assert_eq!(a.tokenizer, "smollm2-135m-instruct");
    for r in &a.requests {
        assert!(filter.accepts(r.prompt_tokens, r.output_tokens), "{r:?}");
        assert_eq!(r.prompt_tokens, counter().count(&r.prompt).expect("count"));
        assert!(d.conversations.iter().any(|c| c.prompt == r.prompt));
    }
    // A longer sample with the same seed starts with the shorter one.
    let longer = Workload::sample(&d.conversations, counter(), 250, 0, filter).expect("sample");
    assert_eq!(longer.requests[..200], a.requests[..]);
    // Another seed gives another sample.
    let other = Workload::sample(&d.conversations, counter(), 200, 1, filter).expect("sample");
    assert_ne!(other.requests, a.requests);
    // Tighter limits are honoured.
    let tight = LengthFilter {
        min_tokens: 10,
        max_prompt_tokens: 100,
        max_total_tokens: 300,
    };
    let t = Workload::sample(&d.conversations, counter(), 50, 0, tight).expect("sample");
    assert!(t.requests.iter().all(|r| r.prompt_tokens >= 10
        && r.prompt_tokens <= 100
        && r.prompt_tokens + r.output_tokens <= 300));
}

#[test]
fn saved_workload_reloads_identically() {
    let d = dataset();
    let w = Workload::sample(&d.conversations, counter(), 40, 7, LengthFilter::default())
        .expect("sample");
    let dir = tempfile::tempdir().expect("temp dir");
    let p1 = dir.path().join("w1.json");
    let p2 = dir.path().join("w2.json");
    w.save(&p1).expect("save");
    let back = Workload::load(&p1).expect("load");
    assert_eq!(back, w);
    back.save(&p2).expect("save again");
    assert_eq!(
        std::fs::read(&p1).expect("read"),
        std::fs::read(&p2).expect("read"),
        "save(load(save(w))) is byte-identical"
    );
    // Identical workloads make identical request bodies.
    let extra = serde_json::Map::new();
    for (x, y) in w.requests.iter().zip(&back.requests) {
        assert_eq!(
            request_body(Endpoint::Chat, "m", x, x.output_tokens, &extra),
            request_body(Endpoint::Chat, "m", y, y.output_tokens, &extra)
        );
    }
}

#[test]
fn bad_workload_files_are_refused() {
    let dir = tempfile::tempdir().expect("temp dir");
    let p = dir.path().join("w.json");
    std::fs::write(&p, br#"{"format":"other/9","dataset":"x","tokenizer":"t","seed":0,"sampler":"s","filter":{"min_tokens":4,"max_prompt_tokens":1024,"max_total_tokens":2048},"requests":[]}"#).expect("write");
    let err = Workload::load(&p).expect_err("wrong format");
    assert!(err.to_string().contains("other/9"), "{err}");
    std::fs::write(&p, b"{").expect("write");
    assert!(Workload::load(&p).is_err());
    assert!(Workload::load(&dir.path().join("missing.json")).is_err());
}
