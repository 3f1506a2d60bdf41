//! The field groups typed requests share, and OpenAI's chat and completions requests
//! mapped to typed ones. The mapping lives here, not in the HTTP server, because the
//! Responses API hands its model rounds over as OpenAI chat requests too.

use kiln_api::chat::ChatCompletionRequest;
use kiln_api::completions::{CompletionRequest, Prompt};
use kiln_api::structured::{GuidedFields, ResponseFormat, StructuredOutputs, Tool};

use crate::chat::{ChatInput, ChatRequest};
use crate::complete::{CompleteRequest, PromptInput};
use crate::sampling::SamplingFields;

/// The tools a request declares and how the model may call them.
#[derive(Debug, Clone, Default)]
pub struct ToolFields {
    pub tools: Option<Vec<Tool>>,
    pub choice: Option<serde_json::Value>,
    pub parallel: Option<bool>,
}

/// The output formats a request may ask for (at most one may be given).
#[derive(Debug, Clone, Default)]
pub struct OutputFields {
    pub response_format: Option<ResponseFormat>,
    pub structured_outputs: Option<StructuredOutputs>,
    pub guided: GuidedFields,
}

/// The sampling fields OpenAI's chat and completions requests name alike, with the
/// two that differ per endpoint: `max_tokens` and `logprobs`, each with its field.
macro_rules! openai_sampling {
    ($req:expr, $max_tokens:expr, $max_tokens_param:expr, $logprobs:expr, $logprobs_param:expr) => {
        SamplingFields {
            temperature: $req.temperature,
            top_p: $req.top_p,
            top_k: $req.top_k,
            min_p: $req.min_p,
            repetition_penalty: $req.repetition_penalty,
            presence_penalty: $req.presence_penalty,
            frequency_penalty: $req.frequency_penalty,
            logit_bias: $req.logit_bias.clone(),
            seed: $req.seed,
            n: $req.n,
            best_of: $req.best_of,
            max_tokens: $max_tokens,
            max_tokens_param: $max_tokens_param,
            min_tokens: $req.min_tokens,
            ignore_eos: $req.ignore_eos,
            stop: $req.stop.clone().map(|s| s.into_vec()),
            stop_token_ids: $req.stop_token_ids.clone(),
            logprobs: $logprobs,
            logprobs_param: $logprobs_param,
            speculative: $req.speculative,
        }
    };
}

impl ChatRequest {
    /// OpenAI's chat request as a typed one.
    pub fn from_openai(req: &ChatCompletionRequest) -> Self {
        let (max_tokens, max_tokens_param) = match (req.max_completion_tokens, req.max_tokens) {
            (Some(m), _) => (Some(m), "max_completion_tokens"),
            (None, m) => (m, "max_tokens"),
        };
        // `logprobs` is resolved from `logprobs` and `top_logprobs` when the request runs.
        let sampling = openai_sampling!(req, max_tokens, max_tokens_param, None, "top_logprobs");
        Self {
            model: req.model.clone(),
            lora: req.lora.clone(),
            hosted: None,
            input: ChatInput::Messages(req.messages.clone()),
            tools: ToolFields {
                tools: req.tools.clone(),
                choice: req.tool_choice.clone(),
                parallel: req.parallel_tool_calls,
            },
            output: OutputFields {
                response_format: req.response_format.clone(),
                structured_outputs: req.structured_outputs.clone(),
                guided: req.guided.clone(),
            },
            sampling,
            logprobs: req.logprobs.unwrap_or(false),
            top_logprobs: req.top_logprobs,
            default_max_tokens: None,
            add_generation_prompt: req.add_generation_prompt.unwrap_or(true),
            skip_special_tokens: req.skip_special_tokens.unwrap_or(true),
            reject_if_busy: req.reject_if_busy.unwrap_or(false),
        }
    }
}

impl CompleteRequest {
    /// OpenAI's completions request as a typed one.
    pub fn from_openai(req: &CompletionRequest) -> Self {
        let sampling =
            openai_sampling!(req, req.max_tokens, "max_tokens", req.logprobs, "logprobs");
        let prompts = match req.prompt.clone() {
            Prompt::Text(t) => vec![PromptInput::Text(t)],
            Prompt::Tokens(t) => vec![PromptInput::Tokens(t)],
            Prompt::Texts(v) => v.into_iter().map(PromptInput::Text).collect(),
            Prompt::TokenBatches(v) => v.into_iter().map(PromptInput::Tokens).collect(),
        };
        Self {
            model: req.model.clone(),
            lora: req.lora.clone(),
            prompts,
            suffix: req.suffix.clone(),
            sampling,
            output: OutputFields {
                response_format: req.response_format.clone(),
                structured_outputs: req.structured_outputs.clone(),
                guided: req.guided.clone(),
            },
            echo: req.echo.unwrap_or(false),
            add_special_tokens: req.add_special_tokens.unwrap_or(true),
            skip_special_tokens: req.skip_special_tokens.unwrap_or(true),
            reject_if_busy: req.reject_if_busy.unwrap_or(false),
        }
    }
}
