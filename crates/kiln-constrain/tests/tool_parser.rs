//! The tool-call parser: calls and text come out right, malformed calls stay text, and
//! however the text is split while streaming, the events rebuild exactly the result of
//! parsing it whole.

use kiln_constrain::{parse_complete, ParsedCall, ToolCallParser, ToolEvent, ToolFormat};
use proptest::prelude::*;

const TWO_CALLS: &str = "Let me look.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": \
    {\"city\": \"Paris\", \"nested\": {\"a\": [1, 2]}}}\n</tool_call>\n<tool_call>\n\
    {\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>";

fn call(name: &str, arguments: &str) -> ParsedCall {
    ParsedCall {
        name: name.into(),
        arguments: arguments.into(),
    }
}

#[test]
fn calls_and_text_are_separated() {
    let p = parse_complete(ToolFormat::Hermes, TWO_CALLS);
    assert_eq!(p.content.as_deref(), Some("Let me look."));
    assert_eq!(
        p.calls,
        vec![
            call(
                "get_weather",
                r#"{"city": "Paris", "nested": {"a": [1, 2]}}"#
            ),
            call("get_time", "{}"),
        ]
    );
    let p = parse_complete(ToolFormat::Hermes, &format!("{}\n", &TWO_CALLS[13..]));
    assert_eq!(p.content, None, "whitespace around calls is not content");
    assert_eq!(p.calls.len(), 2);
}

#[test]
fn arguments_may_contain_anything_json_strings_can() {
    let text = "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"s\": \"}\\n</tool_call>\\\"}\", \"t\": \"<tool_call>\"}}\n</tool_call>";
    let p = parse_complete(ToolFormat::Hermes, text);
    assert_eq!(p.content, None);
    assert_eq!(
        p.calls,
        vec![call(
            "f",
            r#"{"s": "}\n</tool_call>\"}", "t": "<tool_call>"}"#
        )]
    );
}

#[test]
fn plain_text_stays_exactly_as_written() {
    for text in [
        "Hello <tool_ there",
        "Trailing newline\n",
        "  spaced  ",
        "{\"answer\": 42}",
    ] {
        let p = parse_complete(ToolFormat::Hermes, text);
        assert_eq!(p.content.as_deref(), Some(text));
        assert!(p.calls.is_empty());
    }
}

#[test]
fn malformed_calls_stay_text() {
    for bad in [
        "<tool_call>\nnot json\n</tool_call> after",
        "<tool_call>\n{\"name\": \"f\"}\n</tool_call>",
        "Before <tool_call>\n{\"name\": 3, \"arguments\": {}}\n</tool_call>",
    ] {
        let p = parse_complete(ToolFormat::Hermes, bad);
        assert_eq!(p.content.as_deref(), Some(bad));
        assert!(p.calls.is_empty(), "{bad:?}");
    }
    // Keys in another order are still a call (read whole, arguments as written).
    let p = parse_complete(
        ToolFormat::Hermes,
        "<tool_call>{\"arguments\": {\"x\": 1}, \"name\": \"f\"}</tool_call>",
    );
    assert_eq!(p.calls, vec![call("f", r#"{"x": 1}"#)]);
    assert_eq!(p.content, None);
}

#[test]
fn a_call_cut_short_keeps_what_was_written() {
    let p = parse_complete(
        ToolFormat::Hermes,
        "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"city\": \"Par",
    );
    assert_eq!(p.calls, vec![call("f", r#"{"city": "Par"#)]);
    // Cut before the arguments began: no call to report, and no markup as content.
    let p = parse_complete(ToolFormat::Hermes, "<tool_call>\n{\"na");
    assert!(p.calls.is_empty());
    assert_eq!(p.content, None);
    let p = parse_complete(ToolFormat::Hermes, "Checking.\n<tool_ca");
    assert_eq!(p.content.as_deref(), Some("Checking."));
    let p = parse_complete(
        ToolFormat::Hermes,
        "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>\n<tool_call>",
    );
    assert_eq!(p.calls, vec![call("f", "{}")]);
    assert_eq!(p.content, None);
    // A lone `<` at the end is text.
    let p = parse_complete(ToolFormat::Hermes, "a <");
    assert_eq!(p.content.as_deref(), Some("a <"));
}

#[test]
fn llama3_json_calls() {
    let p = parse_complete(
        ToolFormat::Llama3Json,
        r#"{"name": "get_weather", "parameters": {"city": "Oslo"}}"#,
    );
    assert_eq!(p.calls, vec![call("get_weather", r#"{"city": "Oslo"}"#)]);
    assert_eq!(p.content, None);
    let p = parse_complete(
        ToolFormat::Llama3Json,
        r#"{"name": "a", "parameters": {}}; {"name": "b", "parameters": {"x": [1]}}"#,
    );
    assert_eq!(p.calls, vec![call("a", "{}"), call("b", r#"{"x": [1]}"#)]);
    for text in [
        "The weather is fine.",
        r#"{"answer": 42}"#,
        " {\"name\": 1}",
    ] {
        let p = parse_complete(ToolFormat::Llama3Json, text);
        assert!(p.calls.is_empty(), "{text:?}");
        assert_eq!(p.content.as_deref(), Some(text));
    }
}

/// Streams `text` in pieces cut at `cuts` (char positions) and rebuilds the output,
/// checking the events' order and indices.
fn streamed(format: ToolFormat, text: &str, cuts: &[usize]) -> (String, Vec<ParsedCall>) {
    let chars: Vec<char> = text.chars().collect();
    let mut bounds: Vec<usize> = cuts.iter().map(|c| c % (chars.len() + 1)).collect();
    bounds.push(0);
    bounds.push(chars.len());
    bounds.sort_unstable();
    let mut p = ToolCallParser::new(format);
    let mut events = Vec::new();
    for w in bounds.windows(2) {
        let piece: String = chars[w[0]..w[1]].iter().collect();
        p.push(&piece, &mut events);
    }
    p.finish(&mut events);
    let mut content = String::new();
    let mut calls: Vec<ParsedCall> = Vec::new();
    let mut open = false;
    for ev in events {
        match ev {
            ToolEvent::Text(t) => {
                assert!(!open, "no text inside a call");
                assert!(!t.is_empty(), "no empty text events");
                content.push_str(&t);
            }
            ToolEvent::CallStart { index, name } => {
                assert!(!open);
                assert_eq!(index, calls.len(), "calls are numbered in order");
                calls.push(call(&name, ""));
                open = true;
            }
            ToolEvent::Arguments { index, fragment } => {
                assert!(open && index + 1 == calls.len());
                assert!(!fragment.is_empty(), "no empty fragments");
                calls[index].arguments.push_str(&fragment);
            }
            ToolEvent::CallEnd { index } => {
                assert!(open && index + 1 == calls.len());
                open = false;
            }
        }
    }
    assert!(!open, "every call ends");
    (content, calls)
}

/// Text the model might write: calls (well-formed or not) and text around them.
fn hermes_output() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        Just("Let me look. ".to_string()),
        Just("\n".to_string()),
        Just(" <tool_ ".to_string()),
        Just("é ✓ ".to_string()),
        Just("{\"answer\": 1}".to_string()),
        "[a-z <>{}\"\\\\/\n]{0,12}",
        ("[a-z_]{1,8}", "[a-z]{0,5}", "[ -~]{0,10}").prop_map(|(name, k, v)| {
            let v = serde_json::Value::String(v).to_string();
            format!("<tool_call>\n{{\"name\": \"{name}\", \"arguments\": {{\"{k}\": {v}, \"n\": [1, {{\"x\": null}}]}}}}\n</tool_call>")
        }),
        Just(
            "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"s\": \"}}\\n</tool_call>\"}}\n</tool_call>"
                .to_string()
        ),
        Just("<tool_call>{\"arguments\": {}, \"name\": \"g\"}</tool_call>".to_string()),
        Just("<tool_call>\nbroken\n</tool_call>".to_string()),
        Just("<tool_call>\n{\"name\": \"h\", \"arguments\": ".to_string()),
    ];
    proptest::collection::vec(piece, 0..6).prop_map(|v| v.concat())
}

fn llama3_output() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        ("[a-z_]{1,8}", "[ -~]{0,10}").prop_map(|(name, v)| {
            let v = serde_json::Value::String(v).to_string();
            format!("{{\"name\": \"{name}\", \"parameters\": {{\"v\": {v}}}}}")
        }),
        Just("; ".to_string()),
        Just("\n".to_string()),
        "[a-z {}\":;]{0,12}",
    ];
    proptest::collection::vec(piece, 0..5).prop_map(|v| v.concat())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn any_split_of_hermes_output_gives_the_whole_result(
        text in hermes_output(),
        cuts in proptest::collection::vec(0usize..400, 0..40),
    ) {
        let whole = parse_complete(ToolFormat::Hermes, &text);
        let (content, calls) = streamed(ToolFormat::Hermes, &text, &cuts);
        prop_assert_eq!(whole.content.unwrap_or_default(), if content.trim().is_empty() { String::new() } else { content });
        prop_assert_eq!(whole.calls, calls);
    }

    #[test]
    fn any_split_of_llama3_output_gives_the_whole_result(
        text in llama3_output(),
        cuts in proptest::collection::vec(0usize..200, 0..30),
    ) {
        let whole = parse_complete(ToolFormat::Llama3Json, &text);
        let (content, calls) = streamed(ToolFormat::Llama3Json, &text, &cuts);
        prop_assert_eq!(whole.content.unwrap_or_default(), if content.trim().is_empty() { String::new() } else { content });
        prop_assert_eq!(whole.calls, calls);
    }

    /// Well-formed calls always come out with their arguments exactly as written.
    #[test]
    fn well_formed_calls_are_found_with_exact_arguments(
        calls in proptest::collection::vec(("[a-z_]{1,8}", "[ -~]{0,12}"), 1..4),
        prefix in "[a-zA-Z .,!?\n]{0,20}",
        cuts in proptest::collection::vec(0usize..400, 0..20),
    ) {
        let mut text = prefix.clone();
        let mut expected = Vec::new();
        for (name, v) in &calls {
            let args = format!("{{\"v\": {}, \"w\": [{{}}]}}", serde_json::Value::String(v.clone()));
            text.push_str(&format!("\n<tool_call>\n{{\"name\": \"{name}\", \"arguments\": {args}}}\n</tool_call>"));
            expected.push(call(name, &args));
        }
        let (_, streamed_calls) = streamed(ToolFormat::Hermes, &text, &cuts);
        prop_assert_eq!(&streamed_calls, &expected);
        let whole = parse_complete(ToolFormat::Hermes, &text);
        prop_assert_eq!(whole.calls, expected);
        let trimmed = prefix.trim_end();
        prop_assert_eq!(whole.content.as_deref(), (!trimmed.trim().is_empty()).then_some(trimmed));
    }
}

#[test]
fn streaming_releases_arguments_as_they_arrive() {
    let mut p = ToolCallParser::new(ToolFormat::Hermes);
    let mut ev = Vec::new();
    p.push("Sure.\n<tool_ca", &mut ev);
    assert_eq!(
        ev,
        vec![ToolEvent::Text("Sure.".into())],
        "the partial tag waits"
    );
    ev.clear();
    p.push(
        "ll>\n{\"name\": \"f\", \"arguments\": {\"q\": \"long te",
        &mut ev,
    );
    assert_eq!(
        ev,
        vec![
            ToolEvent::CallStart {
                index: 0,
                name: "f".into()
            },
            ToolEvent::Arguments {
                index: 0,
                fragment: "{\"q\": \"long te".into()
            },
        ]
    );
    ev.clear();
    p.push("xt\"}", &mut ev);
    assert_eq!(
        ev,
        vec![ToolEvent::Arguments {
            index: 0,
            fragment: "xt\"}".into()
        }]
    );
    ev.clear();
    p.push("}\n</tool_call>", &mut ev);
    assert_eq!(ev, vec![ToolEvent::CallEnd { index: 0 }]);
    ev.clear();
    p.finish(&mut ev);
    assert!(ev.is_empty());
}

#[test]
fn a_bare_call_object_opening_the_output_is_a_call() {
    let text = " {\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}";
    let p = parse_complete(ToolFormat::Hermes, text);
    assert_eq!(p.content, None);
    assert_eq!(p.calls.len(), 1);
    assert_eq!(p.calls[0].name, "get_weather");
    assert_eq!(p.calls[0].arguments, r#"{"city": "Paris"}"#);
    // Other JSON opening the output is text.
    let p = parse_complete(ToolFormat::Hermes, "{\"answer\": 42}");
    assert!(p.calls.is_empty());
    assert_eq!(p.content.as_deref(), Some("{\"answer\": 42}"));
}
