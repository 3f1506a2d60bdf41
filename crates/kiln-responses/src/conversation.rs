//! A conversation's items → chat messages, for the model's chat template.
//!
//! Calls and their results become what chat templates know: an assistant message with
//! `tool_calls` (consecutive calls, and the text before them, merge into one) and a
//! `tool` message per result. MCP listings and approval bookkeeping are not shown to the
//! model; an MCP call is shown as a call and its output (or error).

use kiln_api::chat::{ChatMessage, FunctionCall, MessageContent, Role, ToolCall};
use kiln_api::responses::Item;

/// The messages for `instructions` (a system message first) and `items`, in order.
pub fn messages<'a>(
    instructions: Option<&str>,
    items: impl IntoIterator<Item = &'a Item>,
) -> Vec<ChatMessage> {
    let mut out = Vec::new();
    if let Some(i) = instructions.filter(|i| !i.is_empty()) {
        out.push(ChatMessage::text(Role::System, i));
    }
    for item in items {
        match item {
            Item::Message { role, content, .. } => {
                let text: String = content.iter().map(|p| p.text()).collect();
                let role = match role.as_str() {
                    "assistant" => Role::Assistant,
                    "system" => Role::System,
                    "developer" => Role::Developer,
                    _ => Role::User,
                };
                out.push(ChatMessage::text(role, text));
            }
            Item::FunctionCall {
                call_id,
                name,
                arguments,
                ..
            } => push_call(&mut out, call_id, name, arguments),
            Item::FunctionCallOutput {
                call_id, output, ..
            } => out.push(tool_result(call_id, output.clone())),
            Item::McpCall {
                id,
                name,
                arguments,
                output,
                error,
                ..
            } => {
                push_call(&mut out, id, name, arguments);
                let result = match (output, error) {
                    (Some(o), _) => o.clone(),
                    (None, Some(e)) => format!("error: {e}"),
                    (None, None) => String::new(),
                };
                out.push(tool_result(id, result));
            }
            // A search's chunks reach the model in the turn that ran it, not again.
            Item::McpListTools { .. }
            | Item::McpApprovalRequest { .. }
            | Item::McpApprovalResponse { .. }
            | Item::FileSearchCall { .. } => {}
        }
    }
    out
}

/// Adds a call to the assistant message just before, or starts one.
fn push_call(out: &mut Vec<ChatMessage>, id: &str, name: &str, arguments: &str) {
    let call = ToolCall {
        id: id.to_string(),
        kind: "function".into(),
        function: FunctionCall {
            name: name.to_string(),
            arguments: arguments.to_string(),
        },
    };
    if let Some(last) = out.last_mut().filter(|m| m.role == Role::Assistant) {
        last.tool_calls.get_or_insert_with(Vec::new).push(call);
        return;
    }
    out.push(ChatMessage {
        role: Role::Assistant,
        content: None,
        name: None,
        tool_calls: Some(vec![call]),
        tool_call_id: None,
    });
}

fn tool_result(call_id: &str, output: String) -> ChatMessage {
    ChatMessage {
        role: Role::Tool,
        content: Some(MessageContent::Text(output)),
        name: None,
        tool_calls: None,
        tool_call_id: Some(call_id.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kiln_api::responses::ContentPart;

    #[test]
    fn calls_merge_into_the_assistant_message_and_results_follow() {
        let items = vec![
            Item::Message {
                id: "m".into(),
                role: "user".into(),
                content: vec![ContentPart::InputText { text: "hi".into() }],
                status: None,
            },
            Item::FunctionCall {
                id: "fc1".into(),
                call_id: "c1".into(),
                name: "f".into(),
                arguments: "{}".into(),
                status: None,
            },
            Item::FunctionCall {
                id: "fc2".into(),
                call_id: "c2".into(),
                name: "g".into(),
                arguments: "{}".into(),
                status: None,
            },
            Item::FunctionCallOutput {
                id: "o1".into(),
                call_id: "c1".into(),
                output: "1".into(),
            },
        ];
        let m = messages(Some("be brief"), &items);
        assert_eq!(m.len(), 4);
        assert_eq!(m[0].role, Role::System);
        assert_eq!(m[2].tool_calls.as_ref().map(Vec::len), Some(2));
        assert_eq!(m[3].tool_call_id.as_deref(), Some("c1"));
    }
}
