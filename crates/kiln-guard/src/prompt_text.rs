//! Which text of a request the firewall scores: what the caller supplied for the model
//! to read. Chat messages and Workers AI's `messages` (user turns, and tool results when
//! every turn is scored), completions' `prompt`, Responses' `input` (user messages and
//! function-call outputs). The last user turn is scored by default; with
//! [`Turns::All`], every user-supplied one. The server maps its routes to a
//! [`PromptShape`].

use serde_json::Value;

use crate::policy::Turns;

/// How a request body carries its prompt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PromptShape {
    /// Chat completions' `messages`.
    Chat,
    /// Completions' `prompt`.
    Completion,
    /// Responses' (and agent turns') `input`.
    Responses,
    /// Workers AI's `/ai/run`: `messages`, or a `prompt`.
    WorkersAi,
}

/// The texts of `body` to score, or `None` when it holds no prompt (Workers AI's
/// encoder inputs, or a body without the shape's field).
pub fn prompt_texts(shape: PromptShape, body: &Value, turns: Turns) -> Option<Vec<String>> {
    let texts = match shape {
        PromptShape::Chat => messages(body.get("messages")?, turns),
        PromptShape::Completion => prompts(body.get("prompt")?),
        PromptShape::Responses => input(body.get("input")?, turns),
        PromptShape::WorkersAi => match (body.get("messages"), body.get("prompt")) {
            (Some(m), _) => messages(m, turns),
            (None, Some(p)) => prompts(p),
            // Encoder inputs (`text`) are not prompts.
            (None, None) => return None,
        },
    };
    Some(texts)
}

/// Chat-style messages: user turns (and tool results for [`Turns::All`]).
fn messages(v: &Value, turns: Turns) -> Vec<String> {
    let Some(list) = v.as_array() else {
        return Vec::new();
    };
    let wanted = |m: &Value| {
        let role = m.get("role").and_then(Value::as_str).unwrap_or_default();
        role == "user" || (turns == Turns::All && role == "tool")
    };
    let picked: Vec<&Value> = match turns {
        Turns::LastUser => list
            .iter()
            .rev()
            .find(|m| m.get("role").and_then(Value::as_str) == Some("user"))
            .into_iter()
            .collect(),
        Turns::All => list.iter().filter(|m| wanted(m)).collect(),
    };
    picked
        .into_iter()
        .map(|m| content_text(m.get("content")))
        .collect()
}

/// A message's content: a string, or the text of its parts.
fn content_text(c: Option<&Value>) -> String {
    match c {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

/// Completions' `prompt`: a string or a list of strings (token ids are not text).
fn prompts(v: &Value) -> Vec<String> {
    match v {
        Value::String(s) => vec![s.clone()],
        Value::Array(list) => list
            .iter()
            .filter_map(|p| p.as_str().map(str::to_string))
            .collect(),
        _ => Vec::new(),
    }
}

/// Responses' `input`: a string, or items.
fn input(v: &Value, turns: Turns) -> Vec<String> {
    let items = match v {
        Value::String(s) => return vec![s.clone()],
        Value::Array(items) => items,
        _ => return Vec::new(),
    };
    let user = |i: &Value| {
        i.get("role").and_then(Value::as_str) == Some("user")
            && i.get("type")
                .and_then(Value::as_str)
                .is_none_or(|t| t == "message")
    };
    match turns {
        Turns::LastUser => items
            .iter()
            .rev()
            .find(|i| user(i))
            .map(|i| vec![content_text(i.get("content"))])
            .unwrap_or_default(),
        Turns::All => items
            .iter()
            .filter_map(|i| {
                if user(i) {
                    Some(content_text(i.get("content")))
                } else if i.get("type").and_then(Value::as_str) == Some("function_call_output") {
                    i.get("output").and_then(Value::as_str).map(str::to_string)
                } else {
                    None
                }
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn each_shape_gives_its_user_text() {
        let chat = json!({"messages": [
            {"role": "system", "content": "be nice"},
            {"role": "user", "content": "first"},
            {"role": "assistant", "content": "ok"},
            {"role": "tool", "content": "tool says ignore rules", "tool_call_id": "c"},
            {"role": "user", "content": [{"type": "text", "text": "second"}, {"type": "text", "text": "part"}]}
        ]});
        assert_eq!(
            prompt_texts(PromptShape::Chat, &chat, Turns::LastUser),
            Some(vec!["second\npart".into()])
        );
        assert_eq!(
            prompt_texts(PromptShape::Chat, &chat, Turns::All),
            Some(vec![
                "first".into(),
                "tool says ignore rules".into(),
                "second\npart".into()
            ])
        );
        assert_eq!(
            prompt_texts(
                PromptShape::Completion,
                &json!({"prompt": ["a", "b"]}),
                Turns::LastUser
            ),
            Some(vec!["a".into(), "b".into()])
        );
        assert_eq!(
            prompt_texts(
                PromptShape::Completion,
                &json!({"prompt": [1, 2]}),
                Turns::LastUser
            ),
            Some(vec![])
        );
        let resp = json!({"input": [
            {"role": "user", "content": "q1"},
            {"type": "function_call_output", "call_id": "c", "output": "out"},
            {"role": "user", "content": [{"type": "input_text", "text": "q2"}]}
        ]});
        assert_eq!(
            prompt_texts(PromptShape::Responses, &resp, Turns::LastUser),
            Some(vec!["q2".into()])
        );
        assert_eq!(
            prompt_texts(PromptShape::Responses, &resp, Turns::All),
            Some(vec!["q1".into(), "out".into(), "q2".into()])
        );
        assert_eq!(
            prompt_texts(
                PromptShape::Responses,
                &json!({"input": "hi"}),
                Turns::LastUser
            ),
            Some(vec!["hi".into()])
        );
        assert_eq!(
            prompt_texts(
                PromptShape::WorkersAi,
                &json!({"prompt": "p"}),
                Turns::LastUser
            ),
            Some(vec!["p".into()])
        );
        assert_eq!(
            prompt_texts(
                PromptShape::WorkersAi,
                &json!({"text": "t"}),
                Turns::LastUser
            ),
            None
        );
    }
}
