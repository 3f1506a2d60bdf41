//! Reading tool calls out of generated text, incrementally.
//!
//! One parser serves streaming and whole responses: [`parse_complete`] is the same
//! parser fed everything at once. Every decision depends only on the text, never on how
//! it was split, so streamed argument fragments always concatenate to the non-streamed
//! `arguments`. The arguments value is followed with a small JSON scanner (strings,
//! escapes, nesting), so its fragments go out as soon as they arrive and it ends exactly
//! where the value does, whatever its strings contain.
//!
//! Text is held back only while it could still turn out to be part of a call: a partial
//! `<tool_call>` at the end, and the whitespace before it (whitespace between text and a
//! call, or after the last call, is not content).

use std::collections::HashMap;

use serde_json::value::RawValue;

use super::grammar::{CLOSE_TAG, OPEN_TAG};
use super::ToolFormat;

/// What the parser recognised, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolEvent {
    /// Plain content.
    Text(String),
    /// Call `index` (from 0) of function `name` begins.
    CallStart { index: usize, name: String },
    /// The next piece of call `index`'s arguments (JSON text as the model wrote it).
    Arguments { index: usize, fragment: String },
    /// Call `index` is complete (or the output ended inside it).
    CallEnd { index: usize },
}

/// One call of a complete output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParsedCall {
    pub name: String,
    /// The arguments' JSON text, as the model wrote it.
    pub arguments: String,
}

/// A complete output: its text (`None` if empty or only whitespace) and its calls.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ParsedOutput {
    pub content: Option<String>,
    pub calls: Vec<ParsedCall>,
}

#[derive(Debug)]
enum State {
    /// Hermes: before the first non-space character (a bare call object, or text).
    HermesStart,
    /// Hermes: text, until `<tool_call>`.
    Text,
    /// Llama 3: before the first non-space character (a call object, or text).
    Llama3Start,
    /// Llama 3: after a call; separators (`;`, whitespace), then a call or text.
    Llama3Between,
    /// Llama 3: the rest is text.
    PlainText,
    /// The call object's head, `{"name": "f", "arguments": ` (after the tag for Hermes).
    Head,
    /// The arguments value, streamed.
    Args(JsonScan),
    /// After the arguments: the object's `}` (and `</tool_call>` for Hermes).
    Tail,
    /// Hermes: a call whose head has another shape, read whole at `</tool_call>`.
    Malformed,
}

/// The incremental parser of one output.
#[derive(Debug)]
pub struct ToolCallParser {
    format: ToolFormat,
    state: State,
    /// Text received but not yet consumed.
    buf: String,
    /// Calls started so far.
    calls: usize,
    /// Whitespace between text and a `<tool_call>` (content again if the call is
    /// malformed).
    before_tag: String,
    /// Hermes: the current call is a bare call object that opened the output, without
    /// tags (small models often drop them; the `auto` grammar allows it).
    bare: bool,
}

/// What a state does with the buffer: go on with the next state, or wait for text.
enum Step {
    Continue,
    NeedMore,
}

impl ToolCallParser {
    pub fn new(format: ToolFormat) -> Self {
        let state = match format {
            ToolFormat::Hermes => State::HermesStart,
            ToolFormat::Llama3Json => State::Llama3Start,
        };
        Self {
            format,
            state,
            buf: String::new(),
            calls: 0,
            before_tag: String::new(),
            bare: false,
        }
    }

    /// Feeds more text; appends what it completes to `out`.
    pub fn push(&mut self, text: &str, out: &mut Vec<ToolEvent>) {
        self.buf.push_str(text);
        while let Step::Continue = self.step(out) {}
    }

    /// Ends the output; flushes whatever was held back.
    pub fn finish(&mut self, out: &mut Vec<ToolEvent>) {
        let buf = std::mem::take(&mut self.buf);
        let state = std::mem::replace(&mut self.state, State::PlainText);
        match state {
            // Whitespace after calls is not content; a partial tag is.
            State::Text | State::HermesStart | State::Llama3Start => {
                // An opening tag cut short by `max_tokens` is a call that never began.
                let partial = match self.format {
                    ToolFormat::Hermes => partial_suffix(&buf, OPEN_TAG),
                    ToolFormat::Llama3Json => 0,
                };
                let buf = if partial >= 2 {
                    buf[..buf.len() - partial].trim_end().to_string()
                } else {
                    buf
                };
                if self.calls == 0 || !buf.trim().is_empty() {
                    text(out, buf);
                }
            }
            State::Llama3Between => {}
            State::PlainText => text(out, buf),
            // A call cut off before its arguments began (by `max_tokens`): there is no
            // call to report, and its markup isn't content.
            State::Head if self.format == ToolFormat::Hermes => {}
            State::Head | State::Malformed => match self.format {
                ToolFormat::Hermes if !self.bare => {
                    text(out, format!("{}{OPEN_TAG}{buf}", self.before_tag))
                }
                _ => text(out, buf),
            },
            State::Args(_) => self.end_call(out),
            State::Tail => {
                self.end_call(out);
                let rest = buf.trim_start();
                let rest = rest.strip_prefix('}').unwrap_or(rest).trim();
                text(out, rest.to_string());
            }
        }
    }

    fn step(&mut self, out: &mut Vec<ToolEvent>) -> Step {
        match &mut self.state {
            State::Text => self.hermes_text(out),
            State::HermesStart => {
                let Some(first) = self.buf.trim_start().chars().next() else {
                    return Step::NeedMore;
                };
                self.bare = first == '{';
                self.state = if self.bare { State::Head } else { State::Text };
                Step::Continue
            }
            State::Llama3Start => {
                let Some(first) = self.buf.trim_start().chars().next() else {
                    return Step::NeedMore;
                };
                self.state = if first == '{' {
                    State::Head
                } else {
                    State::PlainText
                };
                Step::Continue
            }
            State::Llama3Between => {
                let seps = self.buf.len()
                    - self
                        .buf
                        .trim_start_matches(|c: char| c.is_whitespace() || c == ';')
                        .len();
                match self.buf[seps..].chars().next() {
                    None => Step::NeedMore,
                    Some('{') => {
                        self.buf.drain(..seps);
                        self.state = State::Head;
                        Step::Continue
                    }
                    Some(_) => {
                        self.state = State::PlainText;
                        Step::Continue
                    }
                }
            }
            State::PlainText => {
                let all = std::mem::take(&mut self.buf);
                text(out, all);
                Step::NeedMore
            }
            State::Head => self.head(out),
            State::Args(scan) => {
                let (len, done) = scan.feed(&self.buf);
                if len > 0 {
                    let fragment: String = self.buf.drain(..len).collect();
                    out.push(ToolEvent::Arguments {
                        index: self.calls,
                        fragment,
                    });
                }
                if done {
                    self.state = State::Tail;
                    Step::Continue
                } else {
                    Step::NeedMore
                }
            }
            State::Tail => self.tail(out),
            State::Malformed => {
                let Some(end) = self.buf.find(CLOSE_TAG) else {
                    return Step::NeedMore;
                };
                let body: String = self.buf.drain(..end + CLOSE_TAG.len()).collect();
                let body = &body[..end];
                match whole_call(body) {
                    Some((name, arguments)) => {
                        let index = self.calls;
                        out.push(ToolEvent::CallStart { index, name });
                        out.push(ToolEvent::Arguments {
                            index,
                            fragment: arguments,
                        });
                        self.end_call(out);
                    }
                    None => text(
                        out,
                        format!("{}{OPEN_TAG}{body}{CLOSE_TAG}", self.before_tag),
                    ),
                }
                self.state = State::Text;
                Step::Continue
            }
        }
    }

    /// Hermes text: everything before `<tool_call>` goes out, but whitespace right before
    /// the tag (or at the end, after calls) and a partial tag at the end wait.
    fn hermes_text(&mut self, out: &mut Vec<ToolEvent>) -> Step {
        if let Some(i) = self.buf.find(OPEN_TAG) {
            let before: String = self.buf.drain(..i + OPEN_TAG.len()).collect();
            let content = before[..i].trim_end();
            self.before_tag = before[content.len()..i].to_string();
            text(out, content.to_string());
            self.state = State::Head;
            return Step::Continue;
        }
        let partial = partial_suffix(&self.buf, OPEN_TAG);
        let cut = self.buf[..self.buf.len() - partial].trim_end().len();
        let released: String = self.buf.drain(..cut).collect();
        text(out, released);
        Step::NeedMore
    }

    fn head(&mut self, out: &mut Vec<ToolEvent>) -> Step {
        match call_head(&self.buf) {
            Head::Found { name, len } => {
                out.push(ToolEvent::CallStart {
                    index: self.calls,
                    name,
                });
                self.buf.drain(..len);
                self.state = State::Args(JsonScan::default());
            }
            Head::NeedMore => match self.format {
                // A call closed before its head was complete is malformed.
                ToolFormat::Hermes if !self.bare && self.buf.contains(CLOSE_TAG) => {
                    self.state = State::Malformed
                }
                _ => return Step::NeedMore,
            },
            // JSON that isn't a call object, opening the output: text.
            Head::Mismatch if self.bare => {
                self.bare = false;
                self.state = State::Text;
            }
            Head::Mismatch => {
                self.state = match self.format {
                    ToolFormat::Hermes => State::Malformed,
                    ToolFormat::Llama3Json => State::PlainText,
                }
            }
        }
        Step::Continue
    }

    /// After the arguments: `}` then, for Hermes, `</tool_call>` (any whitespace around).
    /// Anything else there (only possible without the grammar) is skipped up to the tag.
    fn tail(&mut self, out: &mut Vec<ToolEvent>) -> Step {
        let close = match self.format {
            ToolFormat::Hermes if !self.bare => CLOSE_TAG,
            _ => "",
        };
        match tail_match(&self.buf, close) {
            Some(Some(len)) => {
                self.buf.drain(..len);
            }
            Some(None) => return Step::NeedMore,
            None => match self.format {
                ToolFormat::Hermes if self.bare => {
                    self.end_call(out);
                    self.bare = false;
                    self.state = State::Text;
                    return Step::Continue;
                }
                ToolFormat::Hermes => {
                    let Some(end) = self.buf.find(CLOSE_TAG) else {
                        return Step::NeedMore;
                    };
                    self.buf.drain(..end + CLOSE_TAG.len());
                }
                ToolFormat::Llama3Json => {
                    self.end_call(out);
                    self.state = State::PlainText;
                    return Step::Continue;
                }
            },
        }
        self.end_call(out);
        self.bare = false;
        self.state = match self.format {
            ToolFormat::Hermes => State::Text,
            ToolFormat::Llama3Json => State::Llama3Between,
        };
        Step::Continue
    }

    fn end_call(&mut self, out: &mut Vec<ToolEvent>) {
        out.push(ToolEvent::CallEnd { index: self.calls });
        self.calls += 1;
    }
}

fn text(out: &mut Vec<ToolEvent>, t: String) {
    if !t.is_empty() {
        out.push(ToolEvent::Text(t));
    }
}

/// Length of the longest suffix of `buf` that is a proper prefix of `tag`.
fn partial_suffix(buf: &str, tag: &str) -> usize {
    (1..tag.len().min(buf.len() + 1))
        .rev()
        .find(|&n| buf.is_char_boundary(buf.len() - n) && tag.starts_with(&buf[buf.len() - n..]))
        .unwrap_or(0)
}

/// Matches `\s*}\s*<close>` at the start of `buf`: `Some(Some(len))` matched,
/// `Some(None)` all of `buf` is a prefix of it, `None` it can't match.
fn tail_match(buf: &str, close: &str) -> Option<Option<usize>> {
    let rest = buf.trim_start();
    let Some(rest) = rest.strip_prefix('}') else {
        return rest.is_empty().then_some(None);
    };
    if close.is_empty() {
        return Some(Some(buf.len() - rest.len()));
    }
    let rest = rest.trim_start();
    if let Some(after) = rest.strip_prefix(close) {
        Some(Some(buf.len() - after.len()))
    } else if close.starts_with(rest) {
        Some(None)
    } else {
        None
    }
}

enum Head {
    /// The call's name, and the length of the head up to the arguments' first character.
    Found {
        name: String,
        len: usize,
    },
    NeedMore,
    Mismatch,
}

/// Matches `{"name": "<name>", "arguments": ` (or `"parameters"`; any whitespace
/// between the parts) at the start of `buf`, up to the value's first character.
fn call_head(buf: &str) -> Head {
    let mut s = Scanner { buf, pos: 0 };
    for lit in ["{", "\"name\"", ":"] {
        match s.lit(lit) {
            Some(true) => {}
            Some(false) => return Head::Mismatch,
            None => return Head::NeedMore,
        }
    }
    let name = match s.json_string() {
        Some(Some(name)) => name,
        Some(None) => return Head::Mismatch,
        None => return Head::NeedMore,
    };
    match s.lit(",") {
        Some(true) => {}
        Some(false) => return Head::Mismatch,
        None => return Head::NeedMore,
    }
    let key = s.pos;
    let arguments = s.lit("\"arguments\"");
    let matched = match arguments {
        Some(true) => Some(true),
        _ => {
            s.pos = key;
            match (arguments, s.lit("\"parameters\"")) {
                (_, Some(true)) => Some(true),
                (None, _) | (_, None) => None,
                _ => Some(false),
            }
        }
    };
    match matched {
        Some(true) => {}
        Some(false) => return Head::Mismatch,
        None => return Head::NeedMore,
    }
    match s.lit(":") {
        Some(true) => {}
        Some(false) => return Head::Mismatch,
        None => return Head::NeedMore,
    }
    s.skip_ws();
    if s.pos >= buf.len() {
        return Head::NeedMore;
    }
    Head::Found { name, len: s.pos }
}

struct Scanner<'a> {
    buf: &'a str,
    pos: usize,
}

impl Scanner<'_> {
    fn skip_ws(&mut self) {
        let rest = &self.buf[self.pos..];
        self.pos += rest.len() - rest.trim_start().len();
    }

    /// After whitespace, `lit`: Some(true) matched, Some(false) mismatch, None: the
    /// buffer ends inside it.
    fn lit(&mut self, lit: &str) -> Option<bool> {
        self.skip_ws();
        let rest = &self.buf[self.pos..];
        if rest.starts_with(lit) {
            self.pos += lit.len();
            Some(true)
        } else if lit.starts_with(rest) {
            None
        } else {
            Some(false)
        }
    }

    /// After whitespace, a JSON string: Some(Some(value)), Some(None) not a string,
    /// None: the buffer ends inside it.
    fn json_string(&mut self) -> Option<Option<String>> {
        self.skip_ws();
        let rest = &self.buf[self.pos..];
        match rest.as_bytes().first() {
            None => return None,
            Some(b'"') => {}
            Some(_) => return Some(None),
        }
        let mut scan = JsonScan::default();
        let (len, done) = scan.feed(rest);
        if !done {
            return None;
        }
        self.pos += len;
        Some(serde_json::from_str(&rest[..len]).ok())
    }
}

/// Finds where a JSON value ends, fed piece by piece.
#[derive(Debug, Default)]
struct JsonScan {
    started: bool,
    /// Open objects and arrays.
    depth: u32,
    in_string: bool,
    escaped: bool,
    /// A number or literal at the top level.
    scalar: bool,
}

impl JsonScan {
    /// Reads `s`: the bytes that belong to the value and whether it is complete. Only
    /// ASCII bytes end a value, so the length is on a character boundary.
    fn feed(&mut self, s: &str) -> (usize, bool) {
        for (i, &b) in s.as_bytes().iter().enumerate() {
            if !self.started {
                self.started = true;
                match b {
                    b'{' | b'[' => self.depth = 1,
                    b'"' => self.in_string = true,
                    _ => self.scalar = true,
                }
                continue;
            }
            if self.in_string {
                if self.escaped {
                    self.escaped = false;
                } else if b == b'\\' {
                    self.escaped = true;
                } else if b == b'"' {
                    self.in_string = false;
                    if self.depth == 0 {
                        return (i + 1, true);
                    }
                }
            } else if self.scalar {
                if b.is_ascii() && !(b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.')) {
                    return (i, true);
                }
            } else {
                match b {
                    b'"' => self.in_string = true,
                    b'{' | b'[' => self.depth += 1,
                    b'}' | b']' => {
                        self.depth = self.depth.saturating_sub(1);
                        if self.depth == 0 {
                            return (i + 1, true);
                        }
                    }
                    _ => {}
                }
            }
        }
        (s.len(), false)
    }
}

/// A whole call object `{"name": ..., "arguments"|"parameters": ...}` (keys in any
/// order) as (name, the arguments' JSON text as written).
fn whole_call(body: &str) -> Option<(String, String)> {
    let fields: HashMap<String, &RawValue> = serde_json::from_str(body.trim()).ok()?;
    let name: String = serde_json::from_str(fields.get("name")?.get()).ok()?;
    let args = fields
        .get("arguments")
        .or_else(|| fields.get("parameters"))?;
    Some((name, args.get().to_string()))
}

/// Parses a complete output (the same parser as streaming, fed at once).
pub fn parse_complete(format: ToolFormat, output: &str) -> ParsedOutput {
    let mut p = ToolCallParser::new(format);
    let mut events = Vec::new();
    p.push(output, &mut events);
    p.finish(&mut events);
    let mut parsed = ParsedOutput::default();
    let mut content = String::new();
    for ev in events {
        match ev {
            ToolEvent::Text(t) => content.push_str(&t),
            ToolEvent::CallStart { name, .. } => parsed.calls.push(ParsedCall {
                name,
                arguments: String::new(),
            }),
            ToolEvent::Arguments { fragment, .. } => {
                if let Some(c) = parsed.calls.last_mut() {
                    c.arguments.push_str(&fragment);
                }
            }
            ToolEvent::CallEnd { .. } => {}
        }
    }
    parsed.content = (!content.trim().is_empty()).then_some(content);
    parsed
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scan(s: &str) -> (usize, bool) {
        JsonScan::default().feed(s)
    }

    #[test]
    fn the_scanner_ends_values_exactly() {
        assert_eq!(scan(r#"{"a": "}\"{"}} x"#), (13, true));
        assert_eq!(scan(r#"[1, [2]], "#), (8, true));
        assert_eq!(scan(r#""s\\" tail"#), (5, true));
        assert_eq!(scan("12.5e3}"), (6, true));
        assert_eq!(scan(r#"{"a": [1"#), (8, false));
        let mut s = JsonScan::default();
        assert_eq!(s.feed(r#"{"k": "a\"#), (9, false));
        assert_eq!(s.feed(r#""}"}"#), (4, true));
    }

    #[test]
    fn heads_are_matched_with_any_spacing_and_either_key() {
        match call_head("{ \"name\" :\"f\\u0041\",\"parameters\":{}") {
            Head::Found { name, len } => {
                assert_eq!(name, "fA");
                assert_eq!(len, 33);
            }
            _ => panic!("expected a head"),
        }
        assert!(matches!(
            call_head("{\"name\": \"f\", \"argu"),
            Head::NeedMore
        ));
        assert!(matches!(
            call_head("{\"name\": \"f\", \"arguments\": "),
            Head::NeedMore
        ));
        assert!(matches!(call_head("{\"arguments\": {}"), Head::Mismatch));
        assert!(matches!(call_head("{\"name\": 3"), Head::Mismatch));
        assert!(matches!(
            call_head("{\"name\": \"f\", \"x\": 1"),
            Head::Mismatch
        ));
    }

    #[test]
    fn tails_match_the_closing_brace_and_tag() {
        assert_eq!(tail_match("}\n</tool_call>x", CLOSE_TAG), Some(Some(14)));
        assert_eq!(tail_match(" }\n</tool", CLOSE_TAG), Some(None));
        assert_eq!(tail_match("  ", CLOSE_TAG), Some(None));
        assert_eq!(tail_match("}, \"id\": 1}", CLOSE_TAG), None);
        assert_eq!(tail_match("} ; {", ""), Some(Some(1)));
    }

    #[test]
    fn partial_tags_are_found_at_the_end() {
        assert_eq!(partial_suffix("abc<tool_", OPEN_TAG), 6);
        assert_eq!(partial_suffix("abc<", OPEN_TAG), 1);
        assert_eq!(partial_suffix("abc", OPEN_TAG), 0);
        assert_eq!(partial_suffix("é<t", OPEN_TAG), 2);
    }

    #[test]
    fn whole_calls_keep_the_arguments_text() {
        assert_eq!(
            whole_call(r#" {"arguments": {"x": [1, 2]}, "name": "f"} "#),
            Some(("f".into(), r#"{"x": [1, 2]}"#.into()))
        );
        assert_eq!(whole_call(r#"{"name": "f"}"#), None);
        assert_eq!(whole_call("not json"), None);
    }
}
