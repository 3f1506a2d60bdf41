//! Grammars on the real Qwen 2.5 tokenizer: the trie matches the tokenizer, masks allow
//! exactly the grammar's continuations, valid text walks to the end with every EOS id
//! then allowed, rollback restores, JSON schema keywords are enforced, and bad grammars
//! are errors naming the problem.

mod common;

use std::time::{Duration, Instant};

use common::*;
use kiln_constrain::{ConstraintEnv, Error, GrammarSpec};
use kiln_engine::constraint::{mask_allows, mask_words};
use serde_json::{json, Value};

#[test]
fn the_trie_holds_the_tokenizers_bytes_and_marks_control_tokens() {
    let t = tokenizer();
    let mut marked = 0;
    for id in 0..t.vocab_size() as u32 {
        let bytes = env().token_bytes(id);
        if t.is_special(id) || t.is_eog(id) {
            if !t.token_bytes(id).is_empty() {
                assert_eq!(bytes[0], 0xFF, "token {id}");
                assert_eq!(&bytes[1..], t.token_bytes(id), "token {id}");
                marked += 1;
            }
        } else {
            assert_eq!(bytes, t.token_bytes(id), "token {id}");
        }
    }
    assert!(marked > 10, "Qwen has control tokens");
    let im_end = t.token_id("<|im_end|>").expect("im_end");
    assert_eq!(env().token_bytes(im_end), b"\xFF<|im_end|>");
}

fn person() -> Value {
    json!({
        "type": "object",
        "properties": {"name": {"type": "string"}, "age": {"type": "integer", "minimum": 0}},
        "required": ["name", "age"],
        "additionalProperties": false
    })
}

#[test]
fn a_json_schema_mask_allows_exactly_the_valid_continuations() {
    // Any object: `{` starts it, nothing else does.
    let mut c = start(&GrammarSpec::JsonObject);
    let m = mask(&mut c);
    assert!(mask_allows(&m, tok1("{")), "`{{` opens the object");
    for bad in ["a", " {", "\n", "[", "\"", "{\n"] {
        assert!(!mask_allows(&m, tok1(bad)), "{bad:?} may not start it");
    }
    assert!(!eos_allowed(&m), "no EOS before the JSON");

    // With `{"name": "` forced, llguidance allows the forced text's canonical tokens.
    let spec = GrammarSpec::JsonSchema(person());
    let mut c = start(&spec);
    let m = mask(&mut c);
    assert!(mask_allows(&m, tok1("{\"")), "`{{\"` opens the object");
    for bad in ["a", " {", "\n", "[", "\""] {
        assert!(!mask_allows(&m, tok1(bad)), "{bad:?} may not start it");
    }
    assert!(!eos_allowed(&m));
    let allowed: usize = m.iter().map(|w| w.count_ones() as usize).sum();
    assert!(allowed < 20, "{allowed} tokens allowed first");

    // Layout is compact: after the name's value only `, "age"` may follow.
    feed(&mut c, r#"{"name": "Ann""#);
    let m = mask(&mut c);
    assert!(mask_allows(&m, tok1(",")));
    for bad in ["}", "\n", " ", ",\n"] {
        assert!(!mask_allows(&m, tok1(bad)), "{bad:?} after the name");
    }
    assert!(walk(&mut c, r#", "age": 7}"#), "EOS allowed at the end");
    assert!(c.is_finished(), "nothing may follow the object");
}

#[test]
fn every_eos_id_ends_a_complete_output() {
    let t = tokenizer();
    assert!(
        t.eos_ids().len() > 1,
        "Qwen has several end-of-generation ids"
    );
    for &eos in t.eos_ids() {
        // Free text: EOS is allowed any time and ends it.
        let mut c = start(&GrammarSpec::Regex("[a-z ]*".into()));
        assert!(walk(&mut c, "some words"));
        assert!(!c.is_finished());
        c.accept(eos).expect("any EOS id is accepted as EOS");
        assert!(c.is_finished(), "finished after {}", show(eos));
        // A complete object: the grammar stopped; only EOS may follow, and it's accepted.
        let mut c = start(&GrammarSpec::JsonSchema(person()));
        assert!(walk(&mut c, r#"{"name": "Ann", "age": 7}"#));
        assert!(c.is_finished());
        let m = mask(&mut c);
        assert_eq!(
            m.iter().map(|w| w.count_ones() as usize).sum::<usize>(),
            t.eos_ids().len(),
            "only EOS after the end"
        );
        c.accept(eos).expect("EOS after the end");
        assert!(c.is_finished());
        // Rolling back over it and the `}` reopens the object.
        c.rollback(2).expect("rollback");
        assert!(!c.is_finished());
        assert!(!eos_allowed(&mask(&mut c)));
    }
}

#[test]
fn an_output_the_grammar_ends_is_finished_without_eos() {
    let mut c = start(&GrammarSpec::Choice(vec!["yes".into(), "no".into()]));
    assert!(!c.is_finished());
    c.accept(tok1("yes")).expect("accept");
    assert!(c.is_finished(), "nothing may follow `yes`");
}

#[test]
fn tokens_past_the_tokenizers_vocabulary_are_never_allowed() {
    let t = tokenizer();
    let padded = t.vocab_size() + 77;
    let env = ConstraintEnv::new(&t, padded).expect("env");
    assert_eq!(env.vocab_size(), padded);
    let mut c = env
        .compile(&GrammarSpec::Regex("(?s:.*)".into()))
        .expect("compiles")
        .start()
        .expect("starts");
    let mut m = vec![u32::MAX; mask_words(padded)];
    c.fill_mask(&mut m).expect("mask");
    assert!(mask_allows(&m, tok1("hello")));
    for id in t.vocab_size()..padded {
        assert!(
            !mask_allows(&m, id as u32),
            "token {id} is past the vocabulary"
        );
    }
    // Unused entries inside the vocabulary (empty pieces) aren't allowed either.
    let unused = (0..t.vocab_size() as u32)
        .rev()
        .find(|&id| t.token_bytes(id).is_empty())
        .expect("Qwen pads its vocabulary");
    assert!(!mask_allows(&m, unused));
}

#[test]
fn rollback_restores_the_earlier_state() {
    let mut c = start(&GrammarSpec::JsonSchema(person()));
    walk(&mut c, r#"{"name": "Ann", "age": 7"#);
    let before = mask(&mut c);
    assert!(!eos_allowed(&before));
    let close = tok1("}");
    c.accept(close).expect("close");
    assert!(eos_allowed(&mask(&mut c)));
    c.rollback(1).expect("rollback");
    assert_eq!(mask(&mut c), before);
    // Several tokens back, and forwards again.
    c.rollback(3).expect("rollback 3");
    let again = tok(r#"{"name": "Ann", "age": 7"#);
    let mut c2 = start(&GrammarSpec::JsonSchema(person()));
    for &t in &again[..again.len() - 3] {
        c2.accept(t).expect("accept");
    }
    assert_eq!(mask(&mut c), mask(&mut c2));
}

#[test]
fn forced_tokens_spell_what_the_grammar_forces() {
    let mut c = start(&GrammarSpec::JsonSchema(person()));
    let forced = c.forced_tokens();
    assert!(!forced.is_empty(), "`{{\"name\": \"` is forced");
    let text = tokenizer().decode(&forced, false);
    assert!(r#"{"name": ""#.starts_with(&text), "{text:?}");
    for t in forced {
        assert!(mask_allows(&mask(&mut c), t));
        c.accept(t).expect("forced token");
    }
}

/// (schema, valid instances, invalid instances)
fn keyword_cases() -> Vec<(Value, Vec<&'static str>, Vec<&'static str>)> {
    vec![
        (
            json!({
                "$defs": {"point": {"type": "object", "properties": {"x": {"type": "integer"}},
                                    "required": ["x"], "additionalProperties": false}},
                "type": "object",
                "properties": {"a": {"$ref": "#/$defs/point"}, "b": {"$ref": "#/$defs/point"}},
                "required": ["a", "b"],
                "additionalProperties": false
            }),
            vec![r#"{"a": {"x": 1}, "b": {"x": -2}}"#],
            vec![
                r#"{"a": {"x": 1}, "b": {"y": 2}}"#,
                r#"{"a": {"x": "1"}, "b": {"x": 2}}"#,
            ],
        ),
        (
            json!({"anyOf": [{"type": "integer"}, {"type": "string", "maxLength": 2}]}),
            vec!["12", r#""ab""#],
            vec!["true", r#""abc""#],
        ),
        (
            json!({"oneOf": [{"type": "integer"}, {"type": "null"}]}),
            vec!["3", "null"],
            vec![r#""3""#],
        ),
        (
            json!({"enum": ["red", "green", 3]}),
            vec![r#""red""#, "3"],
            vec![r#""blue""#, "4", r#""re""#],
        ),
        (
            json!({"const": "fixed"}),
            vec![r#""fixed""#],
            vec![r#""fixe""#],
        ),
        (
            json!({"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 2}),
            vec!["[1]", "[1, 2]"],
            vec!["[]", "[1, 2, 3]", "[1,2]"],
        ),
        (
            json!({"type": "string", "minLength": 2, "maxLength": 3}),
            vec![r#""ab""#, r#""abc""#],
            vec![r#""a""#, r#""abcd""#],
        ),
        (
            json!({"type": "string", "pattern": "^[a-z]+-[0-9]{2}$"}),
            vec![r#""ab-12""#],
            vec![r#""ab-1""#, r#""AB-12""#],
        ),
        (
            json!({"type": "integer", "minimum": 1, "maximum": 10}),
            vec!["1", "10"],
            vec!["0", "11", "-1"],
        ),
        (
            json!({"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1}),
            vec!["0.5"],
            vec!["0", "1", "1.5"],
        ),
        (
            json!({"type": ["string", "null"]}),
            vec![r#""x""#, "null"],
            vec!["1"],
        ),
        (
            json!({"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}),
            vec![r#"{"a": 1}"#, r#"{"a": 1, "extra": [true]}"#],
            vec![r#"{"b": 1}"#],
        ),
        (
            json!({"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"],
                   "additionalProperties": false}),
            vec![r#"{"a": 1}"#],
            vec![r#"{"a": 1, "extra": [true]}"#, r#"{ "a": 1}"#],
        ),
        (
            json!({"type": "string", "format": "date"}),
            vec![r#""2024-02-29""#],
            vec![r#""yesterday""#],
        ),
    ]
}

#[test]
fn json_schema_keywords_are_enforced() {
    for (schema, good, bad) in keyword_cases() {
        let spec = GrammarSpec::JsonSchema(schema.clone());
        for g in good {
            assert!(accepts(&spec, g), "{schema} should accept {g}");
        }
        for b in bad {
            assert!(!accepts(&spec, b), "{schema} should reject {b}");
        }
    }
}

#[test]
fn json_object_is_any_object() {
    let spec = GrammarSpec::JsonObject;
    assert!(accepts(&spec, r#"{"a": [1, {"b": null}], "c": "d"}"#));
    assert!(accepts(&spec, "{}"));
    assert!(!accepts(&spec, "[1]"));
    assert!(!accepts(&spec, "\"s\""));
}

#[test]
fn regex_choice_and_lark_constrain_the_whole_output() {
    let rx = GrammarSpec::Regex(r"\d{3}-\d{4}".into());
    assert!(accepts(&rx, "555-1234"));
    assert!(!accepts(&rx, "555-12345"));
    assert!(!accepts(&rx, "a"));
    let choice = GrammarSpec::Choice(vec!["yes".into(), "no".into(), "say \"hi\"\n".into()]);
    assert!(accepts(&choice, "no"));
    assert!(accepts(&choice, "say \"hi\"\n"));
    assert!(!accepts(&choice, "maybe"));
    let lark = GrammarSpec::Lark("start: \"Answer: \" NUM <|im_end|>\nNUM: /[0-9]+/\n".into());
    let mut c = start(&lark);
    feed(&mut c, "Answer: 42");
    let im_end = tokenizer().token_id("<|im_end|>").expect("im_end");
    assert!(
        mask_allows(&mask(&mut c), im_end),
        "a grammar names a control token"
    );
}

#[test]
fn bad_specs_are_grammar_errors_naming_the_problem() {
    let bad = [
        (
            GrammarSpec::JsonSchema(json!({"type": "nonsense"})),
            "nonsense",
        ),
        (
            GrammarSpec::JsonSchema(json!({"type": "array", "uniqueItems": true})),
            "uniqueItems",
        ),
        (
            GrammarSpec::JsonSchema(json!({"$ref": "#/$defs/missing"})),
            "missing",
        ),
        (
            GrammarSpec::JsonSchema(json!(["not", "a", "schema"])),
            "object",
        ),
        (GrammarSpec::Regex("(unclosed".into()), "unclosed"),
        (GrammarSpec::Regex(String::new()), "empty"),
        (
            GrammarSpec::Lark("start: undefined_rule\n".into()),
            "undefined_rule",
        ),
        (GrammarSpec::Lark("start: (\n".into()), ""),
        (GrammarSpec::Choice(vec![]), "empty"),
    ];
    for (spec, needle) in bad {
        match env().compile(&spec) {
            Err(Error::Grammar(msg)) => {
                assert!(!msg.is_empty(), "{spec:?}");
                assert!(
                    msg.contains(needle),
                    "{spec:?}: {msg:?} should name {needle:?}"
                );
                assert!(!msg.contains("<non-verbose/>"), "{msg:?}");
                assert!(msg.len() < 2000, "a short message: {msg:?}");
            }
            Err(other) => panic!("{spec:?}: expected a grammar error, got {other:?}"),
            Ok(_) => panic!("{spec:?}: expected a grammar error, got a grammar"),
        }
    }
}

#[test]
fn a_rejected_token_is_an_error_not_a_panic() {
    let mut c = start(&GrammarSpec::JsonSchema(person()));
    let err = c.accept(tok1("a")).expect_err("`a` can't start the object");
    assert!(!err.0.is_empty());
}

/// Prints (doesn't assert) how long masks take on a 151k vocabulary.
#[test]
fn mask_time_on_a_151k_vocabulary() {
    let schema = json!({
        "type": "object",
        "properties": {
            "title": {"type": "string"},
            "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 5},
            "score": {"type": "number"},
            "kind": {"enum": ["book", "film", "song"]}
        },
        "required": ["title", "tags", "score", "kind"],
        "additionalProperties": false
    });
    let spec = GrammarSpec::JsonSchema(schema);
    let t0 = Instant::now();
    let fresh = ConstraintEnv::new(&tokenizer(), tokenizer().vocab_size()).expect("env");
    eprintln!("ConstraintEnv::new: {:?}", t0.elapsed());
    drop(fresh);
    env();
    let t0 = Instant::now();
    let factory = env().compile(&spec).expect("compiles");
    let compiled = t0.elapsed();
    let t0 = Instant::now();
    let mut c = factory.start().expect("starts");
    let started = t0.elapsed();
    let text = r#"{"title": "A long title with several words, and some more of them", "tags": ["x", "yy", "zzz"], "score": 3.5, "kind": "film"}"#;
    let toks = tok(text);
    let mut m = vec![0; mask_words(env().vocab_size())];
    let mut times: Vec<Duration> = Vec::with_capacity(toks.len());
    for &t in &toks {
        let t0 = Instant::now();
        c.fill_mask(&mut m).expect("mask");
        times.push(t0.elapsed());
        assert!(mask_allows(&m, t));
        c.accept(t).expect("accept");
    }
    let total: Duration = times.iter().sum();
    let mut sorted = times.clone();
    sorted.sort();
    eprintln!(
        "JSON schema on {} tokens: compile {compiled:?}, start {started:?}; {} masks: first {:?}, \
         mean {:?}, median {:?}, max {:?}",
        env().vocab_size(),
        times.len(),
        times[0],
        total / times.len() as u32,
        sorted[sorted.len() / 2],
        sorted[sorted.len() - 1],
    );
    // Inside a free string almost every token is allowed: the slowest case.
    let mut c = factory.start().expect("starts");
    walk(&mut c, r#"{"title": "ab"#);
    let t0 = Instant::now();
    let n = 20;
    for _ in 0..n {
        c.fill_mask(&mut m).expect("mask");
        let t = tok1("cd");
        c.accept(t).expect("accept");
    }
    eprintln!("inside a string: {:?} per mask", t0.elapsed() / n);
}
