//! Chat messages → prompt text through the model's own chat template.

use anyhow::Context;
use kiln_engine::ServingModel;
pub use kiln_tokenizer::ChatMessage as Message;
use kiln_tokenizer::ChatRequestView;

pub fn system(text: &str) -> Message {
    Message::new("system", text)
}

pub fn user(text: &str) -> Message {
    Message::new("user", text)
}

pub fn assistant(text: &str) -> Message {
    Message::new("assistant", text)
}

/// Renders `messages` ending with the opening of the assistant's turn.
pub fn render(model: &ServingModel, messages: &[Message]) -> anyhow::Result<String> {
    let template = model
        .chat_template
        .as_ref()
        .with_context(|| format!("{} has no chat template", model.name))?;
    template
        .render(&ChatRequestView {
            messages,
            tools: None,
            add_generation_prompt: true,
            extra: None,
        })
        .context("cannot render the chat template")
}
