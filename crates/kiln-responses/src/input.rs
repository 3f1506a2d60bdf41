//! A request's `input` → items with ids, each field checked and named on failure.

use kiln_api::responses::{ContentPart, Item};
use serde_json::Value;

use crate::error::{ResponsesError, Result};
use crate::ids::new_id;

/// The items of `input`: a string is one user message; a list holds messages (with or
/// without `"type": "message"`), function calls and their outputs, MCP items echoed
/// back, and `mcp_approval_response`s.
pub fn parse(input: Option<&Value>) -> Result<Vec<Item>> {
    match input {
        None | Some(Value::Null) => Err(ResponsesError::invalid(
            "input",
            "`input` is required: a string or a list of items",
        )),
        Some(Value::String(text)) => Ok(vec![user_text(text)]),
        Some(Value::Array(items)) => items
            .iter()
            .enumerate()
            .map(|(i, v)| item(v, &format!("input[{i}]")))
            .collect(),
        Some(_) => Err(ResponsesError::invalid(
            "input",
            "`input` must be a string or a list of items",
        )),
    }
}

/// A user message holding `text`.
pub fn user_text(text: &str) -> Item {
    Item::Message {
        id: new_id("msg"),
        role: "user".into(),
        content: vec![ContentPart::InputText { text: text.into() }],
        status: None,
    }
}

fn item(v: &Value, param: &str) -> Result<Item> {
    let Some(obj) = v.as_object() else {
        return Err(ResponsesError::invalid(
            param,
            "each input item must be an object",
        ));
    };
    let kind = match obj.get("type") {
        None | Some(Value::Null) if obj.contains_key("role") => "message",
        Some(Value::String(t)) => t.as_str(),
        _ => {
            return Err(ResponsesError::invalid(
                format!("{param}.type"),
                "an input item needs a `type` (or a `role`, for a message)",
            ))
        }
    };
    match kind {
        "message" => message(obj, param),
        "function_call" | "function_call_output" | "mcp_approval_response" | "mcp_call"
        | "mcp_list_tools" | "mcp_approval_request" => {
            let mut obj = obj.clone();
            let prefix = match kind {
                "function_call" => "fc",
                "function_call_output" => "fco",
                "mcp_approval_response" => "mcpr",
                "mcp_list_tools" => "mcpl",
                _ => "mcp",
            };
            if !obj.get("id").is_some_and(Value::is_string) {
                obj.insert("id".into(), Value::String(new_id(prefix)));
            }
            obj.insert("type".into(), Value::String(kind.into()));
            if kind == "function_call_output" {
                let output = obj.get("output").map(output_text).transpose().map_err(|m| {
                    ResponsesError::invalid(format!("{param}.output"), m)
                })?;
                if let Some(o) = output {
                    obj.insert("output".into(), Value::String(o));
                }
            }
            serde_json::from_value(Value::Object(obj)).map_err(|e| {
                ResponsesError::invalid(param, format!("a `{kind}` item is malformed: {e}"))
            })
        }
        "item_reference" => Err(ResponsesError::invalid(
            format!("{param}.type"),
            "`item_reference` is not supported; use `previous_response_id` to continue a stored conversation",
        )),
        other => Err(ResponsesError::invalid(
            format!("{param}.type"),
            format!(
                "unsupported input item type '{other}'; expected message, function_call, \
                 function_call_output, mcp_approval_response, mcp_call or mcp_list_tools"
            ),
        )),
    }
}

fn message(obj: &serde_json::Map<String, Value>, param: &str) -> Result<Item> {
    let role = match obj.get("role").and_then(Value::as_str) {
        Some(r @ ("user" | "assistant" | "system" | "developer")) => r.to_string(),
        _ => {
            return Err(ResponsesError::invalid(
                format!("{param}.role"),
                "`role` must be user, assistant, system or developer",
            ))
        }
    };
    let assistant = role == "assistant";
    let part = |text: String| {
        if assistant {
            ContentPart::OutputText {
                text,
                annotations: Vec::new(),
            }
        } else {
            ContentPart::InputText { text }
        }
    };
    let content = match obj.get("content") {
        Some(Value::String(s)) => vec![part(s.clone())],
        Some(Value::Array(parts)) => parts
            .iter()
            .enumerate()
            .map(|(j, p)| {
                let at = format!("{param}.content[{j}]");
                match (p.get("type").and_then(Value::as_str), p.get("text")) {
                    (Some("input_text" | "output_text" | "text"), Some(Value::String(t))) => {
                        Ok(part(t.clone()))
                    }
                    (Some("refusal"), _) => Ok(ContentPart::Refusal {
                        refusal: p
                            .get("refusal")
                            .and_then(Value::as_str)
                            .unwrap_or_default()
                            .to_string(),
                    }),
                    (Some(t @ ("input_image" | "input_file" | "input_audio")), _) => {
                        Err(ResponsesError::invalid(
                            format!("{at}.type"),
                            format!("`{t}` content is not supported: the served models read text"),
                        ))
                    }
                    _ => Err(ResponsesError::invalid(
                        at,
                        "a content part must be {\"type\": \"input_text\" | \"output_text\", \"text\": string}",
                    )),
                }
            })
            .collect::<Result<_>>()?,
        _ => {
            return Err(ResponsesError::invalid(
                format!("{param}.content"),
                "`content` must be a string or a list of content parts",
            ))
        }
    };
    let id = obj
        .get("id")
        .and_then(Value::as_str)
        .map_or_else(|| new_id("msg"), str::to_string);
    Ok(Item::Message {
        id,
        role,
        content,
        status: None,
    })
}

/// A function call's output: a string, or a list of text parts joined.
fn output_text(v: &Value) -> std::result::Result<String, String> {
    match v {
        Value::String(s) => Ok(s.clone()),
        Value::Array(parts) => parts
            .iter()
            .map(|p| {
                p.get("text")
                    .and_then(Value::as_str)
                    .map(str::to_string)
                    .ok_or_else(|| "output parts must be text parts".to_string())
            })
            .collect::<std::result::Result<Vec<_>, _>>()
            .map(|v| v.concat()),
        _ => Err("`output` must be a string or a list of text parts".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_string_is_one_user_message_and_items_get_ids() {
        let items = parse(Some(&json!("hi"))).expect("string");
        assert!(matches!(&items[0], Item::Message { role, .. } if role == "user"));
        let items = parse(Some(&json!([
            {"role": "user", "content": "a"},
            {"type": "function_call_output", "call_id": "call_1", "output": "42"}
        ])))
        .expect("list");
        assert!(items[1].id().starts_with("fco_"), "{:?}", items[1]);
    }

    #[test]
    fn bad_items_name_their_field() {
        let e = parse(Some(&json!([{"role": "robot", "content": "a"}]))).expect_err("role");
        assert!(matches!(e, ResponsesError::Invalid { ref param, .. } if param == "input[0].role"));
        let e = parse(Some(&json!([{"type": "function_call_output"}]))).expect_err("fields");
        assert!(matches!(e, ResponsesError::Invalid { ref param, .. } if param == "input[0]"));
        let e = parse(Some(&json!(3))).expect_err("number");
        assert!(matches!(e, ResponsesError::Invalid { ref param, .. } if param == "input"));
    }
}
