//! Checking input lines: an OpenAI batch file's JSONL lines and a Workers AI queue's
//! requests. A line that can't run is kept with the reason (it goes to the error
//! file); it never fails the batch on its own.

use std::collections::HashSet;
use std::io::BufRead;

use serde_json::Value;

use crate::error::{BatchError, Result};
use crate::row::NewLine;
use crate::store::BatchStore;

/// Lines written per transaction while validating.
const CHUNK: usize = 1000;

/// Longest `custom_id` (and Workers AI `external_reference`), in characters: room for
/// any key a client keeps, while a file of them can't fill memory (every id is held to
/// catch repeats) or bloat the output file.
pub const MAX_CUSTOM_ID_CHARS: usize = 512;

/// What validating a file found: lines that can run, lines that can't, and the first
/// few reasons.
#[derive(Debug, Default)]
pub(crate) struct Validated {
    pub valid: u64,
    pub invalid: u64,
    pub first_errors: Vec<(u64, String, String)>,
}

/// Reads `reader` line by line into the store as the batch `id`'s lines, checked
/// against `endpoint`; at most `max_lines` lines.
pub(crate) fn validate_file(
    store: &BatchStore,
    id: &str,
    endpoint: &str,
    reader: impl BufRead,
    max_lines: u64,
) -> Result<Validated> {
    let mut seen = HashSet::new();
    let mut out = Validated::default();
    let mut chunk = Vec::with_capacity(CHUNK);
    let mut line_no = 0u64;
    for text in reader.split(b'\n') {
        let text = text.map_err(|e| {
            BatchError::invalid("input_file_id", format!("cannot read the file: {e}"))
        })?;
        line_no += 1;
        if text.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        if out.valid + out.invalid >= max_lines {
            return Err(BatchError::invalid(
                "input_file_id",
                format!("the file has more than {max_lines} requests, the most a batch may hold"),
            ));
        }
        let line = match std::str::from_utf8(&text) {
            Ok(t) => openai_line(line_no, t, endpoint, &mut seen),
            Err(_) => bad(line_no, None, "invalid_json", "the line is not UTF-8 text"),
        };
        match &line.request {
            Ok(_) => out.valid += 1,
            Err((code, message)) => {
                out.invalid += 1;
                if out.first_errors.len() < 10 {
                    out.first_errors
                        .push((line_no, code.clone(), message.clone()));
                }
            }
        }
        chunk.push(line);
        if chunk.len() == CHUNK {
            store.add_lines(id, &chunk)?;
            chunk.clear();
        }
    }
    store.add_lines(id, &chunk)?;
    Ok(out)
}

/// One line of an OpenAI batch file: `{custom_id, method: "POST", url, body}`.
pub(crate) fn openai_line(
    line_no: u64,
    text: &str,
    endpoint: &str,
    seen: &mut HashSet<String>,
) -> NewLine {
    let v: Value = match serde_json::from_str(text) {
        Ok(v) => v,
        Err(e) => {
            return bad(
                line_no,
                None,
                "invalid_json",
                &format!("the line is not JSON: {e}"),
            )
        }
    };
    let Some(obj) = v.as_object() else {
        return bad(
            line_no,
            None,
            "invalid_request",
            "the line is not a JSON object",
        );
    };
    let custom_id = match obj.get("custom_id") {
        Some(Value::String(s)) if !s.is_empty() => s.clone(),
        _ => {
            return bad(
                line_no,
                None,
                "missing_custom_id",
                "`custom_id` must be a non-empty string",
            )
        }
    };
    let chars = custom_id.chars().count();
    if chars > MAX_CUSTOM_ID_CHARS {
        let m = format!(
            "`custom_id` is {chars} characters long; at most {MAX_CUSTOM_ID_CHARS} are allowed"
        );
        return bad(line_no, None, "invalid_custom_id", &m);
    }
    let cid = Some(custom_id.clone());
    if !seen.insert(custom_id.clone()) {
        let m =
            format!("`custom_id` '{custom_id}' is used by an earlier line; each must be unique");
        return bad(line_no, cid, "duplicate_custom_id", &m);
    }
    if obj.get("method").and_then(Value::as_str) != Some("POST") {
        return bad(line_no, cid, "invalid_method", "`method` must be \"POST\"");
    }
    let url = obj.get("url").and_then(Value::as_str).unwrap_or_default();
    if url != endpoint {
        let m = format!("`url` is '{url}', but this batch's endpoint is '{endpoint}'");
        return bad(line_no, cid, "mismatched_endpoint", &m);
    }
    request(line_no, cid, obj.get("body"), "body")
}

/// Refuses request `index` of a Workers AI queue when its `external_reference` is longer
/// than a `custom_id` may be (the queue is checked whole before anything is stored).
pub(crate) fn check_reference(index: usize, v: &Value) -> Result<()> {
    let chars = match v.get("external_reference") {
        None | Some(Value::Null) => 0,
        Some(Value::String(s)) => s.chars().count(),
        Some(other) => other.to_string().chars().count(),
    };
    if chars > MAX_CUSTOM_ID_CHARS {
        return Err(BatchError::invalid(
            format!("requests[{index}].external_reference"),
            format!(
                "`external_reference` is {chars} characters long; at most \
                 {MAX_CUSTOM_ID_CHARS} are allowed"
            ),
        ));
    }
    Ok(())
}

/// One request of a Workers AI queue; its `external_reference` is kept beside it.
pub(crate) fn queue_line(index: u64, v: &Value) -> NewLine {
    let mut body = v.clone();
    let reference = body
        .as_object_mut()
        .and_then(|o| o.remove("external_reference"))
        .and_then(|r| match r {
            Value::String(s) => Some(s),
            Value::Null => None,
            other => Some(other.to_string()),
        });
    let mut line = request(index, reference, Some(&body), "request");
    line.line = index;
    line
}

/// The request `body` checked: an object that does not ask to stream.
fn request(line_no: u64, custom_id: Option<String>, body: Option<&Value>, what: &str) -> NewLine {
    let Some(body) = body.filter(|b| b.is_object()) else {
        return bad(
            line_no,
            custom_id,
            "invalid_body",
            &format!("`{what}` must be a JSON object"),
        );
    };
    if body.get("stream").and_then(Value::as_bool) == Some(true) {
        let m = "streaming is not supported in a batch; drop `stream` or set it to false";
        return bad(line_no, custom_id, "invalid_request", m);
    }
    NewLine {
        line: line_no,
        custom_id,
        request: Ok(body.to_string()),
    }
}

fn bad(line_no: u64, custom_id: Option<String>, code: &str, message: &str) -> NewLine {
    NewLine {
        line: line_no,
        custom_id,
        request: Err((code.to_string(), format!("line {line_no}: {message}"))),
    }
}
