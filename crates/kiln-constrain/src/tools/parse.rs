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

use super::scan::{call_head, partial_suffix, tail_match, whole_call, Head, JsonScan};
use super::{ToolFormat, CLOSE_TAG, OPEN_TAG};

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
