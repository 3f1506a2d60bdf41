//! The tool-call parser: calls and text come out right, malformed calls stay text, and
//! however the text is split while streaming, the fragments concatenate to the result
//! of parsing it whole.

use kiln_constrain::{parse_complete, ToolCallParser, ToolEvent, ToolFormat};
use proptest::prelude::*;

const TWO_CALLS: &str = "Let me look.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": \
    {\"city\": \"Paris\", \"nested\": {\"a\": [1, 2]}}}\n</tool_call>\n<tool_call>\n\
    {\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>";

#[test]
fn calls_and_text_are_separated() {
    let p = parse_complete(ToolFormat::Hermes, TWO_CALLS);
    assert_eq!(p.content.as_deref(), Some("Let me look.\n"));
    assert_eq!(p.calls.len(), 2);
    assert_eq!(p.calls[0].name, "get_weather");
    assert_eq!(
        p.calls[0].arguments,
        r#"{"city": "Paris", "nested": {"a": [1, 2]}}"#
    );
    assert_eq!(p.calls[1].name, "get_time");
    assert_eq!(p.calls[1].arguments, "{}");
}

#[test]
fn plain_text_and_malformed_calls_stay_text() {
    let p = parse_complete(ToolFormat::Hermes, "Hello <tool_ there");
    assert_eq!(p.content.as_deref(), Some("Hello <tool_ there"));
    assert!(p.calls.is_empty());
    let bad = "<tool_call>\nnot json\n</tool_call> after";
    let p = parse_complete(ToolFormat::Hermes, bad);
    assert_eq!(p.content.as_deref(), Some(bad));
    assert!(p.calls.is_empty());
    // Keys in another order are still a call (parsed whole).
    let p = parse_complete(
        ToolFormat::Hermes,
        "<tool_call>{\"arguments\": {\"x\": 1}, \"name\": \"f\"}</tool_call>",
    );
    assert_eq!(p.calls.len(), 1);
    assert_eq!(p.calls[0].arguments, r#"{"x":1}"#);
    assert_eq!(p.content, None);
}

#[test]
fn a_call_cut_short_keeps_what_was_written() {
    let p = parse_complete(
        ToolFormat::Hermes,
        "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"city\": \"Par",
    );
    assert_eq!(p.calls.len(), 1);
    assert_eq!(p.calls[0].arguments, r#"{"city": "Par"#);
    let p = parse_complete(ToolFormat::Hermes, "<tool_call>\n{\"na");
    assert!(p.calls.is_empty());
    assert_eq!(p.content.as_deref(), Some("<tool_call>\n{\"na"));
}

#[test]
fn llama3_json_calls() {
    let p = parse_complete(
        ToolFormat::Llama3Json,
        r#"{"name": "get_weather", "parameters": {"city": "Oslo"}}"#,
    );
    assert_eq!(p.calls.len(), 1);
    assert_eq!(p.calls[0].name, "get_weather");
    assert_eq!(p.calls[0].arguments, r#"{"city":"Oslo"}"#);
    let p = parse_complete(ToolFormat::Llama3Json, "The weather is fine.");
    assert!(p.calls.is_empty());
    assert_eq!(p.content.as_deref(), Some("The weather is fine."));
}

/// Streams `text` in pieces cut at `cuts` (char positions) and rebuilds the output.
fn streamed(format: ToolFormat, text: &str, cuts: &[usize]) -> (String, Vec<(String, String)>) {
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
    let mut calls: Vec<(String, String)> = Vec::new();
    for ev in events {
        match ev {
            ToolEvent::Text(t) => content.push_str(&t),
            ToolEvent::CallStart { index, name } => {
                assert_eq!(index, calls.len(), "calls are numbered in order");
                calls.push((name, String::new()));
            }
            ToolEvent::Arguments { index, fragment } => calls[index].1.push_str(&fragment),
            ToolEvent::CallEnd { index } => assert_eq!(index + 1, calls.len()),
        }
    }
    (content, calls)
}

proptest! {
    #[test]
    fn any_split_gives_the_whole_result(
        cuts in proptest::collection::vec(0usize..400, 0..40),
        text in prop_oneof![
            Just(TWO_CALLS.to_string()),
            Just("Hi <tool_call>\n{\"name\": \"f\", \"arguments\": {\"s\": \"}}\"}}\n</tool_call>  ".to_string()),
            Just("plain text, no calls at all: {\"name\": 1}".to_string()),
            Just("<tool_call>\n{\"name\": \"f\", \"arguments\": {\"k\": [\"é\", \"}\"]}".to_string()),
        ],
    ) {
        let whole = parse_complete(ToolFormat::Hermes, &text);
        let (content, calls) = streamed(ToolFormat::Hermes, &text, &cuts);
        prop_assert_eq!(whole.content.unwrap_or_default(), content.clone());
        let whole_calls: Vec<(String, String)> =
            whole.calls.into_iter().map(|c| (c.name, c.arguments)).collect();
        prop_assert_eq!(whole_calls, calls);
    }
}

#[test]
fn a_bare_call_object_opening_the_output_is_a_call() {
    let p = parse_complete(
        ToolFormat::Hermes,
        " {\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}",
    );
    assert_eq!(p.content, None);
    assert_eq!(p.calls.len(), 1);
    assert_eq!(p.calls[0].arguments, r#"{"city": "Paris"}"#);
    for cuts in [vec![3, 9, 30, 50], vec![1], vec![20, 21, 22, 55, 56]] {
        let text = "{\"name\": \"f\", \"arguments\": {\"a\": {\"b\": 1}}}";
        let (content, calls) = streamed(ToolFormat::Hermes, text, &cuts);
        assert_eq!(content, "");
        assert_eq!(
            calls,
            vec![("f".to_string(), r#"{"a": {"b": 1}}"#.to_string())]
        );
    }
    // JSON that isn't a call object stays text.
    let p = parse_complete(ToolFormat::Hermes, "{\"answer\": 42}");
    assert!(p.calls.is_empty());
    assert_eq!(p.content.as_deref(), Some("{\"answer\": 42}"));
}
