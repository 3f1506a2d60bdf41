//! The model's tool calls → OpenAI's `tool_calls`, whole or as stream deltas.
//!
//! Both shapes come from `kiln-constrain`'s one incremental parser, so the streamed
//! argument fragments always concatenate to the non-streamed `arguments`.

use kiln_api::chat::{FunctionCall, ToolCall};
use kiln_api::structured::{FunctionCallDelta, ToolCallDelta};
use kiln_constrain::{ToolCallParser, ToolEvent, ToolFormat};
use rand::distr::{Alphanumeric, SampleString};

/// A fresh tool-call id, `call_` and 24 random letters and digits (OpenAI's shape).
fn call_id() -> String {
    format!("call_{}", Alphanumeric.sample_string(&mut rand::rng(), 24))
}

/// A completed output: its text (`None` when empty) and calls (`None` when none).
pub fn complete(format: ToolFormat, text: &str) -> (Option<String>, Option<Vec<ToolCall>>) {
    let parsed = kiln_constrain::parse_complete(format, text);
    let calls: Vec<ToolCall> = parsed
        .calls
        .into_iter()
        .map(|c| ToolCall {
            id: call_id(),
            kind: "function".into(),
            function: FunctionCall {
                name: c.name,
                arguments: c.arguments,
            },
        })
        .collect();
    let content = parsed.content.filter(|c| !c.is_empty());
    (content, (!calls.is_empty()).then_some(calls))
}

/// One piece of a streamed message.
pub enum Piece {
    Content(String),
    Call(ToolCallDelta),
}

/// Turns a choice's text, as it streams, into content and tool-call deltas.
pub struct ToolStream {
    parser: ToolCallParser,
    events: Vec<ToolEvent>,
    calls: usize,
}

impl ToolStream {
    pub fn new(format: ToolFormat) -> Self {
        Self {
            parser: ToolCallParser::new(format),
            events: Vec::new(),
            calls: 0,
        }
    }

    /// Calls started so far (a finished choice with any reports `tool_calls`).
    pub fn num_calls(&self) -> usize {
        self.calls
    }

    /// The pieces `text` completes.
    pub fn push(&mut self, text: &str) -> Vec<Piece> {
        self.parser.push(text, &mut self.events);
        self.drain()
    }

    /// What was held back, at the end of the choice.
    pub fn finish(&mut self) -> Vec<Piece> {
        self.parser.finish(&mut self.events);
        self.drain()
    }

    fn drain(&mut self) -> Vec<Piece> {
        let mut out = Vec::new();
        for ev in self.events.drain(..) {
            match ev {
                ToolEvent::Text(t) if t.is_empty() => {}
                ToolEvent::Text(t) => match out.last_mut() {
                    Some(Piece::Content(c)) => c.push_str(&t),
                    _ => out.push(Piece::Content(t)),
                },
                ToolEvent::CallStart { index, name } => {
                    self.calls = self.calls.max(index + 1);
                    out.push(Piece::Call(ToolCallDelta {
                        index: index as u32,
                        id: Some(call_id()),
                        kind: Some("function".into()),
                        function: FunctionCallDelta {
                            name: Some(name),
                            arguments: Some(String::new()),
                        },
                    }));
                }
                ToolEvent::Arguments { index, fragment } => {
                    if fragment.is_empty() {
                        continue;
                    }
                    out.push(Piece::Call(ToolCallDelta {
                        index: index as u32,
                        id: None,
                        kind: None,
                        function: FunctionCallDelta {
                            name: None,
                            arguments: Some(fragment),
                        },
                    }))
                }
                ToolEvent::CallEnd { .. } => {}
            }
        }
        out
    }
}
