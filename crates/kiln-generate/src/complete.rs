//! [`Generator::complete`]: raw prompts (a string, a batch of strings, token ids or a
//! batch of them) with `n` completions each; choices are `p * n + i`.

use std::sync::Arc;

use kiln_engine::ServingModel;
use kiln_host::{Generation, HostedModel};
use kiln_tokenizer::Tokenizer;

use crate::call::Call;
use crate::error::{GenerateError, Result};
use crate::generator::{admit, blocking, Generator, TextLease};
use crate::prompt;
use crate::request::OutputFields;
use crate::sampling::{Sampling, SamplingFields};
use crate::structured;

/// Most prompts in one batch.
pub const MAX_BATCH: usize = 64;

/// One prompt of a (possibly batched) request.
#[derive(Debug, Clone)]
pub enum PromptInput {
    Text(String),
    Tokens(Vec<u32>),
}

/// One completions request, typed.
#[derive(Debug, Clone)]
pub struct CompleteRequest {
    pub model: Option<String>,
    pub lora: Option<String>,
    pub prompts: Vec<PromptInput>,
    /// Fill-in-the-middle's suffix: refused unless empty.
    pub suffix: Option<String>,
    pub sampling: SamplingFields,
    pub output: OutputFields,
    /// Whether each choice starts with its prompt (and the prompt's logprobs).
    pub echo: bool,
    pub add_special_tokens: bool,
    pub skip_special_tokens: bool,
    pub reject_if_busy: bool,
}

/// A completions request running on the engine.
pub struct CompletionStream {
    pub generation: Generation,
    pub hosted: Arc<HostedModel>,
    pub tokenizer: Arc<Tokenizer>,
    /// Completions per prompt.
    pub n: usize,
    /// Per prompt, the text to echo (empty unless echoing).
    pub echoes: Vec<String>,
    /// Per prompt, its tokens when echoed.
    pub prompt_ids: Vec<Vec<u32>>,
}

impl Generator {
    /// Checks `req`, tokenizes its prompts, compiles its constraint and starts them.
    pub async fn complete(&self, req: CompleteRequest, call: &Call) -> Result<CompletionStream> {
        let TextLease {
            lease,
            model,
            adapter,
        } = self
            .lease_text(None, req.model.as_deref(), req.lora.as_deref(), call)
            .await?;
        let hosted = lease.hosted().clone();
        if req.suffix.as_deref().is_some_and(|s| !s.is_empty()) {
            return Err(GenerateError::invalid(
                "suffix",
                "suffix (fill-in-the-middle) is not supported",
            ));
        }
        let mut sampling = Sampling::check(&req.sampling, prompt::vocab_size(&model))?;
        let grammar = structured::output_grammar(
            req.output.response_format.as_ref(),
            req.output.structured_outputs.as_ref(),
            &req.output.guided,
        )?;
        let inputs = checked(req.prompts)?;
        for ids in inputs.iter().filter_map(|p| match p {
            PromptInput::Tokens(t) => Some(t),
            PromptInput::Text(_) => None,
        }) {
            prompt::check_token_ids(ids, prompt::vocab_size(&model), "prompt")?;
        }
        let constraint = match grammar {
            Some(g) => Some(structured::compile(&hosted, &model, g.spec, g.param).await?),
            None => None,
        };
        let permit = admit(&hosted, inputs.len() * sampling.n, req.reject_if_busy)?;

        let echo = req.echo;
        if echo {
            // An echoed prompt carries its tokens' logprobs too, as OpenAI's legacy API does.
            sampling.params.prompt_logprobs = sampling.params.logprobs;
        }
        let add_special = req.add_special_tokens;
        let m = model.clone();
        let prepared = blocking(move || {
            inputs
                .into_iter()
                .map(|p| prepare(p, &m, add_special, echo))
                .collect::<Result<Vec<_>>>()
        })
        .await?;
        let max_model_len = model.engine_config.max_model_len;
        let mut engine_reqs = Vec::with_capacity(prepared.len());
        let mut echoes = Vec::with_capacity(prepared.len());
        let mut prompt_ids = Vec::with_capacity(prepared.len());
        for (ids, echo_text) in prepared {
            if echo {
                prompt_ids.push(ids.clone());
            }
            let mut engine_req = sampling.request(ids, "prompt", max_model_len)?;
            engine_req.priority = call.class.priority();
            engine_req.adapter = adapter.clone();
            engine_req.constraint = constraint.clone();
            engine_reqs.push(engine_req);
            echoes.push(echo_text);
        }
        let generation =
            Generation::start(&model, lease, engine_reqs, req.skip_special_tokens, permit)?;
        Ok(CompletionStream {
            generation,
            hosted,
            tokenizer: model.tokenizer.clone(),
            n: sampling.n,
            echoes,
            prompt_ids,
        })
    }
}

/// Token ids, and the text to echo (empty unless `echo`).
fn prepare(
    input: PromptInput,
    model: &ServingModel,
    add_special: bool,
    echo: bool,
) -> Result<(Vec<u32>, String)> {
    match input {
        PromptInput::Text(text) => {
            let ids = prompt::encode(model, &text, add_special, "prompt")?;
            Ok((ids, if echo { text } else { String::new() }))
        }
        PromptInput::Tokens(ids) => {
            let text = if echo {
                model.tokenizer.decode(&ids, false)
            } else {
                String::new()
            };
            Ok((ids, text))
        }
    }
}

/// At least one prompt and at most [`MAX_BATCH`].
fn checked(inputs: Vec<PromptInput>) -> Result<Vec<PromptInput>> {
    if inputs.is_empty() {
        return Err(GenerateError::invalid(
            "prompt",
            "prompt must not be an empty list",
        ));
    }
    if inputs.len() > MAX_BATCH {
        return Err(GenerateError::invalid(
            "prompt",
            format!(
                "at most {MAX_BATCH} prompts per request, got {}",
                inputs.len()
            ),
        ));
    }
    Ok(inputs)
}
