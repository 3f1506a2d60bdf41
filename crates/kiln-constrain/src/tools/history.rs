//! Tool turns for chat templates without a tools section: the tool prompt as a system
//! message, earlier calls as the model's own call text, and results as user turns.

use kiln_tokenizer::{ChatMessage, MessageContent};

use super::{tool_system_prompt, ToolDef, ToolFormat};

/// `messages` rewritten so a template that knows only system/user/assistant turns
/// renders the tools, the calls and their results. Consecutive turns of one role are
/// merged (templates such as Gemma's insist that roles alternate).
pub fn generic_tool_messages(
    messages: Vec<ChatMessage>,
    tools: &[ToolDef],
    format: ToolFormat,
) -> Vec<ChatMessage> {
    let mut out: Vec<ChatMessage> = Vec::with_capacity(messages.len() + 1);
    if !tools.is_empty() {
        out.push(ChatMessage::new(
            "system",
            tool_system_prompt(tools, format),
        ));
    }
    for m in messages {
        let text = m
            .content
            .as_ref()
            .map(MessageContent::joined_text)
            .unwrap_or_default();
        let (role, text) = match m.role.as_str() {
            "tool" => ("user".to_string(), tool_result_text(&text, format)),
            "assistant" => {
                let mut t = text;
                for call in m.tool_calls.iter().flat_map(calls_of) {
                    if !t.is_empty() {
                        t.push('\n');
                    }
                    t.push_str(&call_text(&call.0, &call.1, format));
                }
                ("assistant".to_string(), t)
            }
            _ => (m.role.clone(), text),
        };
        match out.last_mut() {
            Some(prev) if prev.role == role => {
                let mut joined = prev
                    .content
                    .as_ref()
                    .map(MessageContent::joined_text)
                    .unwrap_or_default();
                joined.push_str("\n\n");
                joined.push_str(&text);
                prev.content = Some(MessageContent::Text(joined));
            }
            _ => out.push(ChatMessage::new(role, text)),
        }
    }
    out
}

/// (name, arguments as JSON text) of each call in an OpenAI `tool_calls` array.
fn calls_of(v: &serde_json::Value) -> Vec<(String, String)> {
    v.as_array()
        .map(|calls| {
            calls
                .iter()
                .filter_map(|c| {
                    let f = c.get("function")?;
                    let name = f.get("name")?.as_str()?.to_string();
                    let args = match f.get("arguments") {
                        Some(serde_json::Value::String(s)) => s.clone(),
                        Some(other) => other.to_string(),
                        None => "{}".to_string(),
                    };
                    Some((name, args))
                })
                .collect()
        })
        .unwrap_or_default()
}

/// A call as the model writes it in `format`.
fn call_text(name: &str, arguments: &str, format: ToolFormat) -> String {
    let name = serde_json::Value::String(name.to_string());
    match format {
        ToolFormat::Hermes => {
            format!("<tool_call>\n{{\"name\": {name}, \"arguments\": {arguments}}}\n</tool_call>")
        }
        ToolFormat::Llama3Json => format!("{{\"name\": {name}, \"parameters\": {arguments}}}"),
    }
}

fn tool_result_text(result: &str, format: ToolFormat) -> String {
    match format {
        ToolFormat::Hermes => format!("<tool_response>\n{result}\n</tool_response>"),
        ToolFormat::Llama3Json => format!("Tool result: {result}"),
    }
}

/// A tool in OpenAI's `{"type": "function", "function": {...}}` shape, as chat
/// templates' tools sections expect.
pub fn openai_tool_json(t: &ToolDef) -> serde_json::Value {
    let mut f = serde_json::Map::new();
    f.insert("name".into(), t.name.clone().into());
    if let Some(d) = &t.description {
        f.insert("description".into(), d.clone().into());
    }
    f.insert("parameters".into(), t.parameters.clone());
    serde_json::json!({"type": "function", "function": f})
}
