//! [`Generator::chat`]: a chat request (or Workers AI's prompt) checked, rendered
//! through the model's chat template, constrained when it asks for an output format or
//! tools, admitted and started on the engine.

use std::sync::Arc;

use kiln_api::chat::{ChatMessage, Role};
use kiln_constrain::ToolFormat;
use kiln_host::{Generation, HostedModel};
use kiln_tokenizer::Tokenizer;

use crate::call::Call;
use crate::error::{GenerateError, Result};
use crate::generator::{admit, blocking, Generator, TextLease};
use crate::prompt;
use crate::request::{OutputFields, ToolFields};
use crate::sampling::{Sampling, SamplingFields};
use crate::structured;

/// What the model is asked to continue.
#[derive(Debug, Clone)]
pub enum ChatInput {
    Messages(Vec<ChatMessage>),
    /// A plain prompt: sent as the user's message through the chat template, or as is
    /// when `raw` or the model has no template (Workers AI's `prompt`).
    Prompt {
        text: String,
        raw: bool,
    },
}

/// One chat request, typed.
#[derive(Clone)]
pub struct ChatRequest {
    /// The model's name, possibly `base:adapter`.
    pub model: Option<String>,
    pub lora: Option<String>,
    /// The model, when the caller already resolved it (Workers AI picks the task by it).
    pub hosted: Option<Arc<HostedModel>>,
    pub input: ChatInput,
    pub tools: ToolFields,
    pub output: OutputFields,
    pub sampling: SamplingFields,
    /// `logprobs` and `top_logprobs` as sent.
    pub logprobs: bool,
    pub top_logprobs: Option<u32>,
    /// `max_tokens` when none is given, capped by what the context leaves (Workers
    /// AI's default); `None`: the rest of the context.
    pub default_max_tokens: Option<u32>,
    pub add_generation_prompt: bool,
    pub skip_special_tokens: bool,
    pub reject_if_busy: bool,
}

/// A chat request running on the engine: its events, and what formatting them needs.
pub struct ChatStream {
    pub generation: Generation,
    pub hosted: Arc<HostedModel>,
    pub tokenizer: Arc<Tokenizer>,
    /// The tool-call syntax to parse the output with, when tools may be called.
    pub tools: Option<ToolFormat>,
    /// `top_logprobs` when logprobs were asked for.
    pub logprobs: Option<u32>,
}

impl Generator {
    /// Checks `req`, renders its prompt, compiles its constraint and starts it:
    /// everything a chat completion does before the first token.
    pub async fn chat(&self, req: ChatRequest, call: &Call) -> Result<ChatStream> {
        let TextLease {
            lease,
            model,
            adapter,
        } = self
            .lease_text(
                req.hosted.clone(),
                req.model.as_deref(),
                req.lora.as_deref(),
                call,
            )
            .await?;
        let hosted = lease.hosted().clone();
        let format = structured::tool_format(&model);
        let tools = structured::tool_request(
            req.tools.tools.as_deref(),
            req.tools.choice.as_ref(),
            req.tools.parallel,
            format,
        )?;
        let output = structured::output_grammar(
            req.output.response_format.as_ref(),
            req.output.structured_outputs.as_ref(),
            &req.output.guided,
        )?;
        let grammar = structured::request_grammar(output, tools.as_ref())?;
        let logprobs = match (req.logprobs, req.top_logprobs) {
            (true, k) => Some(k.unwrap_or(0)),
            (false, Some(k)) if k > 0 => {
                return Err(GenerateError::invalid(
                    "top_logprobs",
                    "top_logprobs requires `logprobs: true`",
                ))
            }
            (false, _) => None,
        };
        let mut fields = req.sampling.clone();
        fields.logprobs = logprobs;
        let mut sampling = Sampling::check(&fields, prompt::vocab_size(&model))?;
        let (messages, param) = match req.input {
            ChatInput::Prompt { text, raw } if raw || model.chat_template.is_none() => {
                if tools.is_some() {
                    return Err(GenerateError::invalid(
                        "tools",
                        "tools need chat `messages` (or a prompt without `raw`)",
                    ));
                }
                (Err(text), "prompt")
            }
            ChatInput::Prompt { text, .. } => {
                (Ok(vec![ChatMessage::text(Role::User, text)]), "messages")
            }
            ChatInput::Messages(m) => (Ok(m), "messages"),
        };
        let messages = match messages {
            Ok(m) => {
                let msgs = prompt::to_template_messages(&m, "messages")?;
                let defs = tools
                    .as_ref()
                    .filter(|t| t.spec.is_some())
                    .map(|t| t.defs.as_slice());
                Ok(prompt::with_tools(&model, msgs, defs, format)?)
            }
            Err(text) => Err(text),
        };
        let constraint = match grammar {
            Some((spec, param)) => Some(structured::compile(&hosted, &model, spec, param).await?),
            None => None,
        };
        let permit = admit(&hosted, sampling.n, req.reject_if_busy)?;

        let add_generation_prompt = req.add_generation_prompt;
        let m = model.clone();
        let ids = blocking(move || match messages {
            Ok((msgs, tools_json)) => prompt::chat(
                &m,
                &msgs,
                tools_json.as_ref(),
                add_generation_prompt,
                "messages",
            ),
            Err(text) => prompt::encode(&m, &text, true, "prompt"),
        })
        .await?;
        let max_model_len = model.engine_config.max_model_len;
        if let (Some(default), None) = (req.default_max_tokens, req.sampling.max_tokens) {
            let room = max_model_len.saturating_sub(ids.len()).max(1);
            sampling.set_max_tokens((default as usize).min(room));
        }
        let mut engine_req = sampling.request(ids, param, max_model_len)?;
        engine_req.priority = call.class.priority();
        engine_req.adapter = adapter;
        engine_req.constraint = constraint;
        let tools = tools.is_some_and(|t| t.spec.is_some()).then_some(format);
        let generation = Generation::start(
            &model,
            lease,
            vec![engine_req],
            req.skip_special_tokens,
            permit,
        )?;
        Ok(ChatStream {
            generation,
            hosted,
            tokenizer: model.tokenizer.clone(),
            tools,
            logprobs,
        })
    }
}
