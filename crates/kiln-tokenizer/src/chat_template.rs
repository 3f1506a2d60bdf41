//! Rendering a model's Jinja chat template the way Hugging Face `transformers` does.
//!
//! `transformers` renders with `trim_blocks` and `lstrip_blocks`, loop controls, Python
//! string methods, a `tojson` that writes Python's `json.dumps` format, and the globals
//! `raise_exception` and `strftime_now`; all are provided here on top of `minijinja`.

use std::fmt::Write as _;

use minijinja::value::{Kwargs, Value};
use minijinja::{Environment, ErrorKind};
use serde_json::{json, Map};

use crate::chat_message::{ChatMessage, MessageContent};
use crate::error::{Error, Result};
use crate::py_json::{self, DumpOptions};

const TEMPLATE_NAME: &str = "chat_template";

/// What one rendering needs besides the template.
#[derive(Debug, Clone, Copy)]
pub struct ChatRequestView<'a> {
    pub messages: &'a [ChatMessage],
    /// OpenAI `tools` (a JSON array); the template sees `none` when absent.
    pub tools: Option<&'a serde_json::Value>,
    /// End with the opening of an assistant turn.
    pub add_generation_prompt: bool,
    /// Further template variables (e.g. `enable_thinking`); the standard variables win
    /// over entries of the same name.
    pub extra: Option<&'a Map<String, serde_json::Value>>,
}

/// A compiled chat template.
#[derive(Debug)]
pub struct ChatTemplate {
    env: Environment<'static>,
    bos: String,
    eos: String,
    /// The template accepts a list of typed parts as `content`.
    typed_content: bool,
    /// The template accepts a plain string as `content`.
    string_content: bool,
}

/// Marks errors raised by the template's own `raise_exception` call.
#[derive(Debug)]
struct RaisedByTemplate;

impl std::fmt::Display for RaisedByTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("raised by the template")
    }
}

impl std::error::Error for RaisedByTemplate {}

fn raise_exception(message: String) -> std::result::Result<Value, minijinja::Error> {
    Err(minijinja::Error::new(ErrorKind::InvalidOperation, message).with_source(RaisedByTemplate))
}

fn strftime_now(format: String) -> std::result::Result<String, minijinja::Error> {
    use chrono::format::{Item, StrftimeItems};
    let items: Vec<Item<'_>> = StrftimeItems::new(&format).collect();
    if items.iter().any(|i| matches!(i, Item::Error)) {
        return Err(minijinja::Error::new(
            ErrorKind::InvalidOperation,
            format!("strftime_now: invalid format {format:?}"),
        ));
    }
    let mut out = String::new();
    write!(
        out,
        "{}",
        chrono::Local::now().format_with_items(items.into_iter())
    )
    .map_err(|_| {
        minijinja::Error::new(
            ErrorKind::InvalidOperation,
            format!("strftime_now: cannot format with {format:?}"),
        )
    })?;
    Ok(out)
}

/// Hugging Face's `tojson(x, ensure_ascii=False, indent=None, separators=None,
/// sort_keys=False)`; `indent` may also be given positionally.
fn tojson(
    value: Value,
    indent: Option<Value>,
    kwargs: Kwargs,
) -> std::result::Result<Value, minijinja::Error> {
    let bad = |what: String| minijinja::Error::new(ErrorKind::InvalidOperation, what);
    let indent = match indent.or(kwargs.get::<Option<Value>>("indent")?) {
        None => None,
        Some(v) if v.is_none() || v.is_undefined() => None,
        Some(v) => match (v.as_i64(), v.as_str()) {
            (Some(n), _) => Some(" ".repeat(usize::try_from(n).unwrap_or(0))),
            (_, Some(s)) => Some(s.to_string()),
            _ => {
                return Err(bad(format!(
                    "tojson: indent must be an integer or a string, got {v}"
                )))
            }
        },
    };
    let separators = match kwargs.get::<Option<Vec<String>>>("separators")? {
        None => None,
        Some(s) if s.len() == 2 => Some((s[0].clone(), s[1].clone())),
        Some(s) => {
            return Err(bad(format!(
                "tojson: separators must be a pair, got {} items",
                s.len()
            )))
        }
    };
    let opts = DumpOptions {
        indent,
        ensure_ascii: kwargs.get::<Option<bool>>("ensure_ascii")?.unwrap_or(false),
        sort_keys: kwargs.get::<Option<bool>>("sort_keys")?.unwrap_or(false),
        separators,
    };
    kwargs.assert_all_used()?;
    let json = serde_json::to_value(&value).map_err(|e| bad(format!("tojson: {e}")))?;
    Ok(Value::from(py_json::dumps(&json, &opts)))
}

/// A tool call as the template sees it: arguments given as a JSON string become the
/// object they encode.
fn normalize_tool_calls(calls: &serde_json::Value) -> serde_json::Value {
    let mut calls = calls.clone();
    if let Some(list) = calls.as_array_mut() {
        for call in list {
            let Some(args) = call.pointer_mut("/function/arguments") else {
                continue;
            };
            if let Some(parsed) = args
                .as_str()
                .and_then(|s| serde_json::from_str::<serde_json::Value>(s).ok())
            {
                if parsed.is_object() {
                    *args = parsed;
                }
            }
        }
    }
    calls
}

/// Probe content for capability checks.
const PROBE: &str = "kiln-probe-7f3a";

impl ChatTemplate {
    /// Compiles `source`; `bos` and `eos` are the texts of the model's BOS/EOS tokens (the
    /// template's `bos_token`/`eos_token`).
    pub fn new(source: &str, bos: &str, eos: &str) -> Result<Self> {
        let mut env = Environment::new();
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        minijinja_contrib::add_to_environment(&mut env);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", raise_exception);
        env.add_function("strftime_now", strftime_now);
        env.add_filter("tojson", tojson);
        env.add_template_owned(TEMPLATE_NAME, source.to_string())
            .map_err(|e| Error::TemplateSyntax {
                detail: describe(&e),
            })?;
        let mut template = ChatTemplate {
            env,
            bos: bos.to_string(),
            eos: eos.to_string(),
            typed_content: false,
            string_content: true,
        };
        // Like llama.cpp, find out which content shapes the template can print.
        let probe = |content: serde_json::Value| json!([{"role": "user", "content": content}]);
        let shows = |t: &ChatTemplate, messages| {
            t.render_json(messages, None, false, None)
                .is_ok_and(|s| s.contains(PROBE))
        };
        template.typed_content = shows(&template, probe(json!([{"type": "text", "text": PROBE}])));
        template.string_content = shows(&template, probe(json!(PROBE))) || !template.typed_content;
        Ok(template)
    }

    /// Renders a conversation to the prompt text.
    pub fn render(&self, request: &ChatRequestView<'_>) -> Result<String> {
        let messages: Vec<serde_json::Value> = request
            .messages
            .iter()
            .map(|m| self.message_json(m))
            .collect();
        self.render_json(
            serde_json::Value::Array(messages),
            request.tools,
            request.add_generation_prompt,
            request.extra,
        )
    }

    fn message_json(&self, m: &ChatMessage) -> serde_json::Value {
        let content = match &m.content {
            None => json!(""),
            Some(MessageContent::Text(t)) if !self.string_content => {
                json!([{"type": "text", "text": t}])
            }
            Some(MessageContent::Text(t)) => json!(t),
            Some(c @ MessageContent::Parts(_)) if !self.typed_content => json!(c.joined_text()),
            Some(c @ MessageContent::Parts(_)) => json!(c),
        };
        let mut out = Map::new();
        out.insert("role".into(), json!(m.role));
        out.insert("content".into(), content);
        if let Some(name) = &m.name {
            out.insert("name".into(), json!(name));
        }
        if let Some(calls) = &m.tool_calls {
            out.insert("tool_calls".into(), normalize_tool_calls(calls));
        }
        if let Some(id) = &m.tool_call_id {
            out.insert("tool_call_id".into(), json!(id));
        }
        serde_json::Value::Object(out)
    }

    fn render_json(
        &self,
        messages: serde_json::Value,
        tools: Option<&serde_json::Value>,
        add_generation_prompt: bool,
        extra: Option<&Map<String, serde_json::Value>>,
    ) -> Result<String> {
        let mut ctx = extra.cloned().unwrap_or_default();
        ctx.insert("messages".into(), messages);
        ctx.insert(
            "tools".into(),
            tools.cloned().unwrap_or(serde_json::Value::Null),
        );
        ctx.insert("add_generation_prompt".into(), json!(add_generation_prompt));
        ctx.insert("bos_token".into(), json!(self.bos));
        ctx.insert("eos_token".into(), json!(self.eos));
        let template = self
            .env
            .get_template(TEMPLATE_NAME)
            .map_err(|e| Error::TemplateRender {
                detail: describe(&e),
            })?;
        template.render(Value::from_serialize(&ctx)).map_err(|e| {
            if is_raised(&e) {
                Error::TemplateRaised {
                    message: e.detail().unwrap_or_default().to_string(),
                }
            } else {
                Error::TemplateRender {
                    detail: describe(&e),
                }
            }
        })
    }
}

fn is_raised(e: &minijinja::Error) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(e);
    while let Some(s) = source {
        if s.is::<RaisedByTemplate>() {
            return true;
        }
        source = s.source();
    }
    false
}

/// The error with its location (`(in chat_template:LINE)`), as one line.
fn describe(e: &minijinja::Error) -> String {
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        if !s.is::<RaisedByTemplate>() {
            let _ = write!(text, ": {s}");
        }
        source = s.source();
    }
    text
}
