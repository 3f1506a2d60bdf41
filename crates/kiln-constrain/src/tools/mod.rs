//! Tool calling in the model's own format: the declared tools, the call grammars, the
//! parser that reads calls out of the output, and prompts for templates without tools.

pub(crate) mod grammar;
mod history;
mod parse;
mod prompt;
mod scan;

pub use history::{generic_tool_messages, openai_tool_json};
pub use parse::{parse_complete, ParsedCall, ParsedOutput, ToolCallParser, ToolEvent};
pub use prompt::tool_system_prompt;

/// The Hermes tag that opens a call.
pub(crate) const OPEN_TAG: &str = "<tool_call>";
/// The Hermes tag that closes a call.
pub(crate) const CLOSE_TAG: &str = "</tool_call>";

/// A function the model may call.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolDef {
    pub name: String,
    pub description: Option<String>,
    /// JSON schema of the arguments object.
    pub parameters: serde_json::Value,
    /// OpenAI's `strict`. The arguments are always grammar-constrained; with `strict`
    /// a schema keyword the grammar can't enforce is an error, without it the keyword
    /// is ignored.
    pub strict: bool,
}

/// Which calls the output must (or may) make.
#[derive(Debug, Clone, PartialEq)]
pub enum ToolMode {
    /// Free text, or text and then calls: once a call starts (`<tool_call>`, or a
    /// Llama 3 output opening with `{"name"`), the rest is calls per the declared
    /// schemas.
    Auto,
    /// A call (several if parallel) and nothing else.
    Required,
    /// A call of this function (several if parallel) and nothing else.
    Named(String),
}

/// How a model writes a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolFormat {
    /// Hermes / Qwen 2.5: `<tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>`.
    Hermes,
    /// Llama 3.x: a bare `{"name": ..., "parameters": {...}}` object; parallel calls
    /// are separated by `; `.
    Llama3Json,
}

impl ToolFormat {
    /// The format a chat template asks for: Llama 3.x's bare JSON calls when the template
    /// describes them (it asks for `"parameters"` and has Llama 3's tool-turn markers
    /// `<|eom_id|>` / `<|python_tag|>` or the words "Respond in the format {"name""),
    /// otherwise Hermes-style tags (Qwen 2.5, Hermes, and the generic tool prompt).
    pub fn detect(chat_template: Option<&str>) -> ToolFormat {
        let Some(t) = chat_template else {
            return ToolFormat::Hermes;
        };
        if t.contains(OPEN_TAG) {
            return ToolFormat::Hermes;
        }
        let llama_markers = t.contains("<|eom_id|>")
            || t.contains("<|python_tag|>")
            || t.contains("Respond in the format {\"name\"")
            || t.contains("Respond in the format {\\\"name\\\"");
        if llama_markers && t.contains("parameters") {
            ToolFormat::Llama3Json
        } else {
            ToolFormat::Hermes
        }
    }

    /// The key holding a call's arguments.
    pub(crate) fn arguments_key(self) -> &'static str {
        match self {
            ToolFormat::Hermes => "arguments",
            ToolFormat::Llama3Json => "parameters",
        }
    }
}

/// What a request's tools ask of the output.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCallSpec {
    pub tools: Vec<ToolDef>,
    pub mode: ToolMode,
    /// More than one call allowed.
    pub parallel: bool,
    pub format: ToolFormat,
}

/// Whether a Jinja chat template uses the `tools` variable (in a `{{ }}` or `{% %}`
/// block, outside string literals), so the declared tools can be passed to it.
pub fn template_renders_tools(template: &str) -> bool {
    jinja_blocks(template).any(|code| identifiers(code).any(|id| id == "tools"))
}

/// The code inside each `{{ … }}` and `{% … %}` block.
fn jinja_blocks(template: &str) -> impl Iterator<Item = &str> {
    let mut rest = template;
    std::iter::from_fn(move || loop {
        let start = rest.find('{')?;
        let after = &rest[start + 1..];
        let close = match after.chars().next() {
            Some('{') => "}}",
            Some('%') => "%}",
            Some('#') => "#}",
            _ => {
                rest = after;
                continue;
            }
        };
        let body = &after[1..];
        let Some(end) = body.find(close) else {
            rest = "";
            return None;
        };
        rest = &body[end + close.len()..];
        if close != "#}" {
            return Some(&body[..end]);
        }
    })
}

/// The identifiers in Jinja code, skipping string literals.
fn identifiers(code: &str) -> impl Iterator<Item = &str> {
    let bytes = code.as_bytes();
    let mut i = 0;
    std::iter::from_fn(move || {
        while i < bytes.len() {
            let c = bytes[i];
            if c == b'"' || c == b'\'' {
                i += 1;
                while i < bytes.len() && bytes[i] != c {
                    i += if bytes[i] == b'\\' { 2 } else { 1 };
                }
                i += 1;
            } else if c.is_ascii_alphabetic() || c == b'_' {
                let start = i;
                while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
                    i += 1;
                }
                return code.get(start..i);
            } else {
                i += 1;
            }
        }
        None
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detects_llama3_json_templates() {
        let llama31 = r#"{%- if tools %}Given the following functions, please respond with a JSON for a function call. Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.{%- endif %}<|eom_id|>"#;
        assert_eq!(ToolFormat::detect(Some(llama31)), ToolFormat::Llama3Json);
        let qwen = "{%- if tools %}<tools>{{ tool | tojson }}</tools> return a json object with function name and arguments within <tool_call></tool_call> XML tags{%- endif %}";
        assert_eq!(ToolFormat::detect(Some(qwen)), ToolFormat::Hermes);
        assert_eq!(ToolFormat::detect(None), ToolFormat::Hermes);
        assert_eq!(
            ToolFormat::detect(Some("{{ messages[0].content }}<|eot_id|>")),
            ToolFormat::Hermes
        );
    }

    #[test]
    fn finds_the_tools_variable_only_in_code() {
        assert!(template_renders_tools("{%- if tools %}x{% endif %}"));
        assert!(template_renders_tools("{{ tools | tojson }}"));
        assert!(template_renders_tools(
            "{% for t in tools -%}{{ t }}{% endfor %}"
        ));
        assert!(!template_renders_tools("You have tools. {{ messages }}"));
        assert!(!template_renders_tools("{{ 'tools' }}{# tools #}"));
        assert!(!template_renders_tools(
            "{% if tools_in_user_message %}{% endif %}"
        ));
        assert!(!template_renders_tools("{{ message.tool_calls }}"));
    }
}
