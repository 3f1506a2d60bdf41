//! Workers AI's dialect of the chat fields (`/ai/run/{model}`), in OpenAI's types: its
//! tools and `response_format` in, its tool calls out. The rest of a Workers AI request
//! maps onto [`crate::ChatRequest`] field by field.

use kiln_api::structured::{FunctionDef, JsonSchemaFormat, ResponseFormat, Tool};
use kiln_api::workers_ai::AiToolCall;
use serde_json::Value;

use crate::GenerateError;

/// Workers AI's tools (`{name, description, parameters}`) or OpenAI's, as OpenAI's.
pub fn tools(tools: &[Value]) -> Result<Vec<Tool>, GenerateError> {
    tools
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let parsed = if t.get("function").is_some() {
                serde_json::from_value::<Tool>(t.clone())
            } else {
                serde_json::from_value::<FunctionDef>(t.clone()).map(|function| Tool {
                    kind: "function".into(),
                    function,
                })
            };
            parsed.map_err(|e| {
                GenerateError::invalid(format!("tools[{i}]"), format!("not a tool: {e}"))
            })
        })
        .collect()
}

/// Workers AI's `response_format`, whose `json_schema` is the schema itself, or OpenAI's.
pub fn response_format(rf: &Value) -> Result<ResponseFormat, GenerateError> {
    let kind = rf.get("type").and_then(|t| t.as_str()).ok_or_else(|| {
        GenerateError::invalid("response_format.type", "response_format needs a `type`")
    })?;
    let json_schema = rf.get("json_schema").map(|js| {
        if js.get("schema").is_some() && js.get("name").is_some() {
            serde_json::from_value(js.clone()).ok()
        } else {
            Some(JsonSchemaFormat {
                name: "response".into(),
                description: None,
                schema: Some(js.clone()),
                strict: Some(true),
            })
        }
    });
    Ok(ResponseFormat {
        kind: kind.to_string(),
        json_schema: json_schema.flatten(),
    })
}

/// A call in Workers AI's shape: the arguments as an object.
pub fn tool_call(name: String, arguments: &str) -> AiToolCall {
    AiToolCall {
        name,
        arguments: serde_json::from_str(arguments)
            .unwrap_or_else(|_| Value::String(arguments.to_string())),
    }
}
