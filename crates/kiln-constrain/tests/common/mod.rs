//! Helpers for the tests on the real Qwen 2.5 tokenizer (151,936 tokens).
#![allow(dead_code)]

use std::sync::{Arc, OnceLock};

use kiln_constrain::{ConstraintEnv, GrammarSpec};
use kiln_engine::constraint::{mask_allows, mask_words};
use kiln_engine::Constraint;
use kiln_formats::GgufFile;
use kiln_tokenizer::Tokenizer;

pub const MODEL: &str = "qwen2.5-coder-0.5b-instruct";

pub fn tokenizer() -> Arc<Tokenizer> {
    static TOK: OnceLock<Arc<Tokenizer>> = OnceLock::new();
    TOK.get_or_init(|| {
        let gguf = GgufFile::open(kiln_testkit::gguf(MODEL)).expect("gguf opens");
        Arc::new(Tokenizer::from_gguf(&gguf).expect("tokenizer"))
    })
    .clone()
}

pub fn env() -> &'static ConstraintEnv {
    static ENV: OnceLock<ConstraintEnv> = OnceLock::new();
    ENV.get_or_init(|| {
        let t = tokenizer();
        ConstraintEnv::new(&t, t.vocab_size()).expect("env builds")
    })
}

pub fn start(spec: &GrammarSpec) -> Box<dyn Constraint> {
    env()
        .compile(spec)
        .expect("compiles")
        .start()
        .expect("starts")
}

pub fn mask(c: &mut Box<dyn Constraint>) -> Vec<u32> {
    let mut m = vec![0; mask_words(env().vocab_size())];
    c.fill_mask(&mut m).expect("mask");
    m
}

pub fn tok(s: &str) -> Vec<u32> {
    tokenizer().encode(s, false, false).expect("encode")
}

/// The one token of `s`.
pub fn tok1(s: &str) -> u32 {
    let t = tok(s);
    assert_eq!(t.len(), 1, "{s:?} is one token");
    t[0]
}

pub fn show(t: u32) -> String {
    format!(
        "{t} {:?}",
        String::from_utf8_lossy(tokenizer().token_bytes(t))
    )
}

pub fn eos_allowed(m: &[u32]) -> bool {
    let t = tokenizer();
    let eos = t.eos_ids();
    let all = eos.iter().all(|&e| mask_allows(m, e));
    assert_eq!(
        all,
        eos.iter().any(|&e| mask_allows(m, e)),
        "all EOS ids or none"
    );
    all
}

/// Feeds `text`'s tokens, each of which must be allowed.
pub fn feed(c: &mut Box<dyn Constraint>, text: &str) {
    for t in tok(text) {
        let m = mask(c);
        assert!(mask_allows(&m, t), "{} not allowed in {text:?}", show(t));
        c.accept(t).expect("accept");
    }
}

/// [`feed`], then whether EOS is allowed.
pub fn walk(c: &mut Box<dyn Constraint>, text: &str) -> bool {
    feed(c, text);
    eos_allowed(&mask(c))
}

/// Whether the grammar takes `text` whole: every token allowed, then EOS.
pub fn accepts(spec: &GrammarSpec, text: &str) -> bool {
    let mut c = start(spec);
    for t in tok(text) {
        if !mask_allows(&mask(&mut c), t) {
            return false;
        }
        c.accept(t).expect("an allowed token is accepted");
    }
    eos_allowed(&mask(&mut c))
}
