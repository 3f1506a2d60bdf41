//! Prompts → token ids: chat messages through the model's chat template, and plain text.
//! Tokenizing and rendering are synchronous CPU work; callers run them through
//! [`crate::generator::blocking`].

use kiln_api::chat::{ChatMessage, ContentPart, MessageContent};
use kiln_constrain::{ToolDef, ToolFormat};
use kiln_engine::ServingModel;
use kiln_tokenizer as tok;

use crate::error::GenerateError;

/// What a request gives as input, when it may send a raw `prompt` or chat `messages`.
#[derive(Debug, Clone)]
pub enum PromptOrMessages {
    Text(String),
    Messages(Vec<ChatMessage>),
}

/// Exactly one of `prompt` and `messages`; both or neither is a 400 on `prompt`.
pub fn prompt_or_messages(
    prompt: Option<String>,
    messages: Option<Vec<ChatMessage>>,
) -> Result<PromptOrMessages, GenerateError> {
    match (prompt, messages) {
        (Some(_), Some(_)) => Err(GenerateError::invalid(
            "prompt",
            "send either `prompt` or `messages`, not both",
        )),
        (None, None) => Err(GenerateError::invalid(
            "prompt",
            "`prompt` or `messages` is required",
        )),
        (Some(p), None) => Ok(PromptOrMessages::Text(p)),
        (None, Some(m)) => Ok(PromptOrMessages::Messages(m)),
    }
}

/// Checks the messages and converts them to the template's type. Only text content can
/// be served; other parts are a 400 naming the part.
pub fn to_template_messages(
    messages: &[ChatMessage],
    param: &str,
) -> Result<Vec<tok::ChatMessage>, GenerateError> {
    if messages.is_empty() {
        return Err(GenerateError::invalid(
            param,
            format!("`{param}` must contain at least one message"),
        ));
    }
    messages
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let content = match &m.content {
                None => None,
                Some(MessageContent::Text(t)) => Some(tok::MessageContent::Text(t.clone())),
                Some(MessageContent::Parts(parts)) => Some(tok::MessageContent::Parts(
                    parts
                        .iter()
                        .enumerate()
                        .map(|(j, p)| match p {
                            ContentPart::Text { text } => Ok(tok::ContentPart::text(text.clone())),
                            _ => Err(GenerateError::invalid(
                                format!("{param}[{i}].content[{j}]"),
                                "only text content parts are supported by this server",
                            )),
                        })
                        .collect::<Result<_, _>>()?,
                )),
            };
            let tool_calls = match &m.tool_calls {
                Some(calls) => Some(
                    serde_json::to_value(calls)
                        .map_err(|e| GenerateError::Internal(e.to_string()))?,
                ),
                None => None,
            };
            Ok(tok::ChatMessage {
                role: m.role.template_name().to_string(),
                content,
                name: m.name.clone(),
                tool_calls,
                tool_call_id: m.tool_call_id.clone(),
            })
        })
        .collect()
}

/// Puts declared `tools` (and earlier turns' calls and results) where the model will see
/// them: through the chat template when it has a tools section (the tools come back as
/// the template's `tools` variable), otherwise as `kiln-constrain`'s generic tool
/// system prompt and plain-text turns.
pub fn with_tools(
    model: &ServingModel,
    messages: Vec<tok::ChatMessage>,
    tools: Option<&[ToolDef]>,
    format: ToolFormat,
) -> Result<(Vec<tok::ChatMessage>, Option<serde_json::Value>), GenerateError> {
    let native = model
        .tokenizer
        .chat_template()
        .is_some_and(kiln_constrain::template_renders_tools);
    if native {
        let json = tools.map(|defs| {
            serde_json::Value::Array(defs.iter().map(kiln_constrain::openai_tool_json).collect())
        });
        return Ok((messages, json));
    }
    let has_tool_turns = messages
        .iter()
        .any(|m| m.role == "tool" || m.tool_calls.is_some());
    if tools.is_none() && !has_tool_turns {
        return Ok((messages, None));
    }
    Ok((
        kiln_constrain::generic_tool_messages(messages, tools.unwrap_or_default(), format),
        None,
    ))
}

/// Renders `messages` with the model's chat template and tokenizes the result.
pub fn chat(
    model: &ServingModel,
    messages: &[tok::ChatMessage],
    tools: Option<&serde_json::Value>,
    add_generation_prompt: bool,
    param: &str,
) -> Result<Vec<u32>, GenerateError> {
    let text = render(model, messages, tools, add_generation_prompt, param)?;
    encode_rendered(model, &text)
}

/// The rendered prompt text.
pub fn render(
    model: &ServingModel,
    messages: &[tok::ChatMessage],
    tools: Option<&serde_json::Value>,
    add_generation_prompt: bool,
    param: &str,
) -> Result<String, GenerateError> {
    let template = model.chat_template.as_ref().ok_or_else(|| {
        GenerateError::invalid(
            param,
            format!(
                "model `{}` has no chat template; send a plain prompt to /v1/completions instead",
                model.name
            ),
        )
    })?;
    template
        .render(&tok::ChatRequestView {
            messages,
            tools,
            add_generation_prompt,
            extra: None,
        })
        .map_err(|e| GenerateError::invalid(param, format!("cannot apply the chat template: {e}")))
}

/// Tokenizes a rendered conversation: control-token text (`<|im_start|>`) becomes those
/// tokens, and BOS is added only if the model wants one and the template didn't write
/// it already.
pub fn encode_rendered(model: &ServingModel, text: &str) -> Result<Vec<u32>, GenerateError> {
    let t = &model.tokenizer;
    let bos_written = t
        .bos_id()
        .map(|b| t.token_bytes(b))
        .is_some_and(|b| !b.is_empty() && text.as_bytes().starts_with(b));
    encode(model, text, t.adds_bos() && !bos_written, "messages")
}

/// Tokenizes `text` (control-token text parsed as those tokens).
pub fn encode(
    model: &ServingModel,
    text: &str,
    add_special: bool,
    param: &str,
) -> Result<Vec<u32>, GenerateError> {
    model
        .tokenizer
        .encode(text, add_special, true)
        .map_err(|e| GenerateError::invalid(param, format!("cannot tokenize the prompt: {e}")))
}

/// Checks that token ids given directly are in the vocabulary.
pub fn check_token_ids(ids: &[u32], vocab_size: usize, param: &str) -> Result<(), GenerateError> {
    match ids.iter().find(|&&t| t as usize >= vocab_size) {
        Some(bad) => Err(GenerateError::invalid(
            param,
            format!("token id {bad} is outside the vocabulary (size {vocab_size})"),
        )),
        None => Ok(()),
    }
}

/// Token ids valid for both the tokenizer and the model's logits.
pub fn vocab_size(model: &ServingModel) -> usize {
    model
        .tokenizer
        .vocab_size()
        .min(model.model_config.vocab_size)
}
