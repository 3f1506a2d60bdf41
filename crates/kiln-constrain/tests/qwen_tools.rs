//! Tool-call grammars on the real Qwen 2.5 tokenizer, whose `<tool_call>` and
//! `</tool_call>` are ordinary (user-defined) tokens: `required` and a named function
//! allow nothing but calls, `auto` allows free text and constrains a call once its tag
//! is written, arguments follow each function's schema.

mod common;

use common::*;
use kiln_constrain::{Error, GrammarSpec, ToolCallSpec, ToolDef, ToolFormat, ToolMode};
use kiln_engine::constraint::mask_allows;
use serde_json::json;

fn weather_tools() -> Vec<ToolDef> {
    vec![
        ToolDef {
            name: "get_weather".into(),
            description: Some("Weather in a city".into()),
            parameters: json!({
                "type": "object",
                "properties": {"city": {"type": "string"}, "unit": {"enum": ["c", "f"]}},
                "required": ["city", "unit"],
                "additionalProperties": false
            }),
            strict: true,
        },
        ToolDef {
            name: "get_time".into(),
            description: None,
            parameters: json!({"type": "object", "properties": {}}),
            strict: false,
        },
    ]
}

fn tools(mode: ToolMode, parallel: bool, format: ToolFormat) -> GrammarSpec {
    GrammarSpec::ToolCalls(ToolCallSpec {
        tools: weather_tools(),
        mode,
        parallel,
        format,
    })
}

fn hermes(mode: ToolMode, parallel: bool) -> GrammarSpec {
    tools(mode, parallel, ToolFormat::Hermes)
}

const CALL: &str = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"c\"}}\n</tool_call>";
const TIME_CALL: &str = "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>";

fn allowed_count(m: &[u32]) -> usize {
    m.iter().map(|w| w.count_ones() as usize).sum()
}

#[test]
fn qwen_tool_tags_are_ordinary_single_tokens() {
    let t = tokenizer();
    for tag in ["<tool_call>", "</tool_call>"] {
        let id = t.token_id(tag).expect("Qwen has the tag as a token");
        assert!(
            !t.is_special(id),
            "{tag} is user-defined, not a control token"
        );
        assert_eq!(tok(tag), vec![id], "text {tag} encodes to the token");
        assert_eq!(
            t.decode(&[id], true),
            tag,
            "and decodes even when skipping special"
        );
    }
}

#[test]
fn required_rejects_text_and_allows_only_calls() {
    let mut c = start(&hermes(ToolMode::Required, false));
    let m = mask(&mut c);
    assert!(mask_allows(&m, tok1("<tool_call>")));
    for text in ["Hello", "I", "\n", " ", "{", "Sure"] {
        assert!(
            !mask_allows(&m, tok1(text)),
            "{text:?} may not start the output"
        );
    }
    assert!(!eos_allowed(&m), "a call is required");
    assert!(walk(&mut c, CALL), "one call, then EOS");
    assert_eq!(
        allowed_count(&mask(&mut c)),
        tokenizer().eos_ids().len(),
        "not parallel: only EOS after the call"
    );
}

#[test]
fn required_parallel_allows_more_calls() {
    let mut c = start(&hermes(ToolMode::Required, true));
    assert!(walk(&mut c, CALL), "EOS after one call");
    assert!(
        walk(&mut c, &format!("\n{TIME_CALL}")),
        "and after a second"
    );
}

#[test]
fn arguments_follow_the_functions_schema() {
    let spec = hermes(ToolMode::Required, false);
    assert!(accepts(&spec, CALL));
    assert!(
        !accepts(&spec, &CALL.replace("\"c\"", "\"k\"")),
        "unit is c or f"
    );
    assert!(
        !accepts(&spec, &CALL.replace(", \"unit\": \"c\"", "")),
        "unit is required"
    );
    assert!(
        !accepts(&spec, &CALL.replace("get_weather", "get_wetter")),
        "declared names only"
    );
    // A function without parameters takes `{}` only.
    assert!(accepts(&spec, TIME_CALL));
    assert!(!accepts(&spec, &TIME_CALL.replace("{}", "{\"x\": 1}")));
}

#[test]
fn a_named_function_is_forced_whole() {
    let spec = hermes(ToolMode::Named("get_time".into()), false);
    let mut c = start(&spec);
    // get_time takes no arguments, so the grammar spells the entire call.
    let forced = c.forced_tokens();
    assert_eq!(tokenizer().decode(&forced, false), TIME_CALL);
    assert!(walk(&mut c, TIME_CALL));
    assert!(!accepts(&spec, CALL), "another function isn't allowed");
    // Called once, even when parallel calls are allowed.
    let parallel = hermes(ToolMode::Named("get_time".into()), true);
    let mut c = start(&parallel);
    assert!(walk(&mut c, TIME_CALL));
    assert_eq!(allowed_count(&mask(&mut c)), tokenizer().eos_ids().len());
}

#[test]
fn auto_allows_free_text() {
    let spec = hermes(ToolMode::Auto, false);
    let mut c = start(&spec);
    assert!(eos_allowed(&mask(&mut c)), "an empty answer is fine");
    assert!(walk(&mut c, "Hello! How can I help?"));
    for text in [
        "{\"not\": \"a call\"}",
        "Use <b>tags</b>, even <tool_ and <tool_call without the bracket.\n\n",
        "Lines\n\n\nand more lines",
    ] {
        assert!(accepts(&spec, text), "{text:?} is free text");
    }
}

#[test]
fn auto_takes_a_bare_call_object_opening_the_output() {
    // Small models often drop the tags: an output opening with a call object is a call,
    // held to the declared names and schemas; other JSON is still text.
    let auto = hermes(ToolMode::Auto, false);
    assert!(accepts(
        &auto,
        r#"{"name": "get_weather", "arguments": {"city": "Paris", "unit": "c"}}"#
    ));
    assert!(!accepts(&auto, r#"{"name": "unknown", "arguments": {}}"#));
    assert!(!accepts(
        &auto,
        r#"{"name": "get_weather", "arguments": {"town": 1}}"#
    ));
    assert!(accepts(&auto, r#"{"answer": 42}"#));
}

#[test]
fn auto_constrains_a_call_once_its_tag_is_written() {
    let spec = hermes(ToolMode::Auto, false);
    let mut c = start(&spec);
    walk(&mut c, "Let me check.\n<tool_call>");
    let m = mask(&mut c);
    assert!(mask_allows(&m, tok1("\n")));
    assert!(
        !mask_allows(&m, tok1("Hello")),
        "the call's layout is fixed"
    );
    assert!(!eos_allowed(&m), "an opened call must be finished");
    walk(&mut c, "\n{\"name\": \"");
    let m = mask(&mut c);
    assert!(mask_allows(&m, tok1("get")));
    assert!(!mask_allows(&m, tok1("x")), "only declared names");
    assert!(walk(
        &mut c,
        "get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"c\"}}\n</tool_call>"
    ));
    assert_eq!(
        allowed_count(&mask(&mut c)),
        tokenizer().eos_ids().len(),
        "not parallel: only EOS after the call"
    );
    // The call may open the output, and text may not follow a call.
    assert!(accepts(&spec, CALL));
    assert!(!accepts(&spec, &format!("{CALL}\nDone.")));
    assert!(!accepts(&spec, &CALL.replace("\"c\"", "\"k\"")));
}

#[test]
fn auto_parallel_allows_several_calls_after_text() {
    let spec = hermes(ToolMode::Auto, true);
    assert!(accepts(
        &spec,
        &format!("Checking both.\n{CALL}\n{TIME_CALL}")
    ));
    assert!(!accepts(
        &spec,
        &format!("{CALL}\nText between.\n{TIME_CALL}")
    ));
}

#[test]
fn a_bad_strict_schema_names_its_function() {
    let mut tools = weather_tools();
    tools[0].parameters =
        json!({"type": "object", "properties": {"tags": {"type": "array", "uniqueItems": true}}});
    let spec = ToolCallSpec {
        tools: tools.clone(),
        mode: ToolMode::Required,
        parallel: false,
        format: ToolFormat::Hermes,
    };
    match env().compile(&GrammarSpec::ToolCalls(spec.clone())) {
        Err(Error::Grammar(msg)) => {
            assert!(msg.contains("get_weather"), "{msg}");
            assert!(msg.contains("uniqueItems"), "{msg}");
        }
        other => panic!("expected a grammar error, got {other:?}"),
    }
    // Not strict: keywords llguidance can't enforce are dropped.
    tools[0].strict = false;
    let lenient = ToolCallSpec { tools, ..spec };
    env()
        .compile(&GrammarSpec::ToolCalls(lenient))
        .expect("lenient schema compiles");

    let bad_type = ToolCallSpec {
        tools: vec![ToolDef {
            name: "f".into(),
            description: None,
            parameters: json!({"type": "object", "properties": {"a": {"type": "nonsense"}}}),
            strict: false,
        }],
        mode: ToolMode::Auto,
        parallel: false,
        format: ToolFormat::Hermes,
    };
    match env().compile(&GrammarSpec::ToolCalls(bad_type)) {
        Err(Error::Grammar(msg)) => assert!(msg.contains("`f`"), "{msg}"),
        other => panic!("expected a grammar error, got {other:?}"),
    }
}

const LLAMA_CALL: &str = r#"{"name": "get_weather", "parameters": {"city": "Oslo", "unit": "f"}}"#;

#[test]
fn llama3_json_calls() {
    let required = tools(ToolMode::Required, false, ToolFormat::Llama3Json);
    let mut c = start(&required);
    let m = mask(&mut c);
    assert!(mask_allows(&m, tok1("{\"")));
    assert!(!mask_allows(&m, tok1("Hello")));
    assert!(walk(&mut c, LLAMA_CALL));
    assert!(!accepts(
        &required,
        &LLAMA_CALL.replace("parameters", "arguments")
    ));

    let auto = tools(ToolMode::Auto, true, ToolFormat::Llama3Json);
    assert!(accepts(&auto, "It is sunny in Oslo."));
    assert!(
        accepts(&auto, r#"{"answer": 42}"#),
        "JSON that isn't a call is text"
    );
    assert!(accepts(&auto, LLAMA_CALL));
    assert!(accepts(
        &auto,
        &format!(r#"{LLAMA_CALL}; {{"name": "get_time", "parameters": {{}}}}"#)
    ));
    assert!(!accepts(&auto, r#"{"name": "unknown", "parameters": {}}"#));
    let mut c = start(&auto);
    walk(&mut c, "{\"name\": \"");
    assert!(
        !mask_allows(&mask(&mut c), tok1("x")),
        "a started call is constrained"
    );
}

/// Prints (doesn't assert) mask times for `auto` tool calls: free text is the lexeme
/// "any text without the tag", the expensive kind.
#[test]
fn auto_mask_time() {
    use std::time::{Duration, Instant};
    let spec = hermes(ToolMode::Auto, true);
    env();
    let t0 = Instant::now();
    let factory = env().compile(&spec).expect("compiles");
    let compiled = t0.elapsed();
    let mut c = factory.start().expect("starts");
    let text = format!(
        "I'll look that up for you. First the weather, then the time, in two calls.\n{CALL}\n{TIME_CALL}"
    );
    let mut times: Vec<Duration> = Vec::new();
    let mut m = vec![0; kiln_engine::constraint::mask_words(env().vocab_size())];
    for t in tok(&text) {
        let t0 = Instant::now();
        c.fill_mask(&mut m).expect("mask");
        times.push(t0.elapsed());
        assert!(mask_allows(&m, t), "{}", show(t));
        c.accept(t).expect("accept");
    }
    let total: Duration = times.iter().sum();
    let mut sorted = times.clone();
    sorted.sort();
    eprintln!(
        "auto tool grammar: compile {compiled:?}; {} masks: first {:?}, mean {:?}, median {:?}, max {:?}",
        times.len(),
        times[0],
        total / times.len() as u32,
        sorted[sorted.len() / 2],
        sorted[sorted.len() - 1]
    );
}
