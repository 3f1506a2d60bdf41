//! The generic tool prompt, for chat templates without a tools section.
//!
//! It follows the Hermes convention (which Qwen 2.5's own template also uses), so
//! models trained on either recognise it; the grammar then holds the model to it.

use super::{ToolDef, ToolFormat};

/// A system prompt that lists `tools` and says how to call them in `format`.
pub fn tool_system_prompt(tools: &[ToolDef], format: ToolFormat) -> String {
    let mut s = String::from(
        "You may call one or more functions to assist with the user query.\n\n\
         You are provided with function signatures within <tools></tools> XML tags:\n<tools>",
    );
    for t in tools {
        s.push('\n');
        s.push_str(&super::openai_tool_json(t).to_string());
    }
    s.push_str("\n</tools>\n\n");
    match format {
        ToolFormat::Hermes => s.push_str(
            "For each function call, return a json object with function name and arguments \
             within <tool_call></tool_call> XML tags:\n<tool_call>\n\
             {\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call>",
        ),
        ToolFormat::Llama3Json => s.push_str(
            "To call a function, respond with only a JSON object in the format \
             {\"name\": <function-name>, \"parameters\": <args-json-object>}.",
        ),
    }
    s
}
