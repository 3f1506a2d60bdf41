//! Matching a tool call's JSON in partial text: the call's head up to its arguments,
//! where a JSON value ends (fed piece by piece), the call's closing tail, and a
//! partial tag at the end of the buffer. The parser (`parse.rs`) decides; this reads.

use std::collections::HashMap;

use serde_json::value::RawValue;

/// Length of the longest suffix of `buf` that is a proper prefix of `tag`.
pub(super) fn partial_suffix(buf: &str, tag: &str) -> usize {
    (1..tag.len().min(buf.len() + 1))
        .rev()
        .find(|&n| buf.is_char_boundary(buf.len() - n) && tag.starts_with(&buf[buf.len() - n..]))
        .unwrap_or(0)
}

/// Matches `\s*}\s*<close>` at the start of `buf`: `Some(Some(len))` matched,
/// `Some(None)` all of `buf` is a prefix of it, `None` it can't match.
pub(super) fn tail_match(buf: &str, close: &str) -> Option<Option<usize>> {
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

pub(super) enum Head {
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
pub(super) fn call_head(buf: &str) -> Head {
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
pub(super) struct JsonScan {
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
    pub(super) fn feed(&mut self, s: &str) -> (usize, bool) {
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
pub(super) fn whole_call(body: &str) -> Option<(String, String)> {
    let fields: HashMap<String, &RawValue> = serde_json::from_str(body.trim()).ok()?;
    let name: String = serde_json::from_str(fields.get("name")?.get()).ok()?;
    let args = fields
        .get("arguments")
        .or_else(|| fields.get("parameters"))?;
    Some((name, args.get().to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::{CLOSE_TAG, OPEN_TAG};

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
