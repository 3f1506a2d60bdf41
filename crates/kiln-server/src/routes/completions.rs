//! `POST /v1/completions`: a string, a batch of strings, token ids or a batch of them.
//! A batch of `p` prompts with `n` completions each gives choices `p * n + i`.

use std::sync::Arc;

use axum::extract::{Extension, State};
use axum::response::{IntoResponse, Response};
use axum::Json;
use kiln_api::completions::{Completion, CompletionChoice, CompletionRequest};
use kiln_api::Usage;
use kiln_generate::output::logprobs;
use kiln_generate::{
    Call, ChoiceEvent, CompleteRequest, CompletionStream, Generator, TextEvent, TokenLogprobs,
    Tokenizer,
};

use super::chat::Head;
use super::{collect, finish_reason};
use crate::error::ApiError;
use crate::extract::{parse, ApiBody};
use crate::lease::CallContext;
use crate::middleware::RequestId;
use crate::state::AppState;
use crate::stream::{sse, to_json, ChunkFormat};
use kiln_db::unix_now;

pub async fn completions(
    State(state): State<AppState>,
    Extension(rid): Extension<RequestId>,
    ctx: CallContext,
    ApiBody(body): ApiBody,
) -> Result<Response, ApiError> {
    respond(state.generator(), &rid, &ctx.call(), &body).await
}

/// Answers a completions body for `call`: the route's work, shared with batch lines.
pub async fn respond(
    generator: &Generator,
    rid: &RequestId,
    call: &Call,
    body: &[u8],
) -> Result<Response, ApiError> {
    let req: CompletionRequest = parse(body)?;
    let CompletionStream {
        generation: gen,
        hosted,
        tokenizer,
        n,
        echoes,
        prompt_ids,
    } = generator
        .complete(CompleteRequest::from_openai(&req), call)
        .await?;
    let head = Head {
        id: format!("cmpl-{}", rid.0),
        created: unix_now(),
        model: hosted.name.clone(),
        fingerprint: hosted.fingerprint(),
    };
    let want_logprobs = req.logprobs.is_some();
    if req.stream.unwrap_or(false) {
        let include_usage = req.stream_options.as_ref().is_some_and(|o| o.include_usage);
        let echo_of = (0..gen.num_choices())
            .map(|c| echoes[c / n].clone())
            .collect::<Vec<_>>();
        let fmt = CompletionFormat {
            head,
            include_usage,
            logprobs: want_logprobs,
            tokenizer,
            chars: echo_of.iter().map(|e| e.chars().count()).collect(),
            echo_of,
            n,
            prompt_lps: vec![Vec::new(); prompt_ids.len()],
            prompt_offsets: vec![None; prompt_ids.len()],
            prompt_ids,
        };
        return Ok(sse(gen, fmt, generator.cutoff(), tracing::Span::current()));
    }
    let (outs, usage) = collect(generator, gen).await?;
    let choices = outs
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let prefix = &echoes[i / n];
            let base = prefix.chars().count();
            CompletionChoice {
                logprobs: want_logprobs.then(|| {
                    let generated = logprobs::legacy(
                        &tokenizer,
                        &c.token_ids,
                        &c.logprobs,
                        &c.text_offsets,
                        base,
                    );
                    // The prompt's logprobs arrive with the first completion of a prompt.
                    let Some(ids) = prompt_ids.get(i / n) else {
                        return generated;
                    };
                    let first = &outs[i / n * n].prompt_logprobs;
                    let offsets = logprobs::prompt_offsets(&tokenizer, ids);
                    let mut all = logprobs::legacy_prompt(&tokenizer, ids, &offsets, first, 0);
                    logprobs::extend_legacy(&mut all, generated);
                    all
                }),
                text: format!("{prefix}{}", c.text),
                index: i as u32,
                finish_reason: finish_reason(c.finish),
            }
        })
        .collect();
    Ok(Json(Completion {
        id: head.id,
        object: "text_completion".into(),
        created: head.created,
        model: head.model,
        system_fingerprint: head.fingerprint,
        choices,
        usage: Some(Some(usage)),
    })
    .into_response())
}

struct CompletionFormat {
    head: Head,
    include_usage: bool,
    logprobs: bool,
    tokenizer: Arc<Tokenizer>,
    /// Per choice: the echoed prompt, sent first.
    echo_of: Vec<String>,
    /// Per choice: characters sent so far (for `text_offset`).
    chars: Vec<usize>,
    /// Completions per prompt.
    n: usize,
    /// Per prompt, its tokens when echoed (their logprobs stream as they are computed).
    prompt_ids: Vec<Vec<u32>>,
    /// Per prompt, the prompt logprobs received so far.
    prompt_lps: Vec<Vec<TokenLogprobs>>,
    /// Per prompt, its tokens' character offsets (computed when first needed).
    prompt_offsets: Vec<Option<Vec<usize>>>,
}

impl CompletionFormat {
    fn chunk(&self, choices: Vec<CompletionChoice>, usage: Option<Usage>) -> String {
        to_json(&Completion {
            id: self.head.id.clone(),
            object: "text_completion".into(),
            created: self.head.created,
            model: self.head.model.clone(),
            system_fingerprint: self.head.fingerprint.clone(),
            choices,
            usage: self.include_usage.then_some(usage),
        })
    }
}

impl ChunkFormat for CompletionFormat {
    fn start(&mut self, out: &mut Vec<String>) {
        for (i, echo) in self
            .echo_of
            .iter()
            .enumerate()
            .filter(|(_, e)| !e.is_empty())
        {
            out.push(self.chunk(vec![choice(i, echo.clone(), None, None)], None));
        }
    }

    fn event(&mut self, ev: ChoiceEvent, out: &mut Vec<String>) {
        let i = ev.choice;
        match ev.event {
            TextEvent::Started { .. } => {}
            TextEvent::PromptLogprob { logprobs, .. } => {
                let p = i / self.n.max(1);
                let (Some(ids), Some(lps), Some(offsets)) = (
                    self.prompt_ids.get(p),
                    self.prompt_lps.get_mut(p),
                    self.prompt_offsets.get_mut(p),
                ) else {
                    return;
                };
                lps.push(logprobs);
                // Position 0 (no logprob) goes out with position 1.
                let first = if lps.len() == 1 { 0 } else { lps.len() };
                // Offsets are computed once per prompt, on its first scored token.
                let offsets =
                    offsets.get_or_insert_with(|| logprobs::prompt_offsets(&self.tokenizer, ids));
                let lp = logprobs::legacy_prompt(&self.tokenizer, ids, offsets, lps, first);
                for c in p * self.n..(p + 1) * self.n {
                    out.push(
                        self.chunk(vec![choice(c, String::new(), Some(lp.clone()), None)], None),
                    );
                }
            }
            TextEvent::Delta {
                text,
                token_ids,
                logprobs,
                ..
            } => {
                let base = self.chars.get(i).copied().unwrap_or(0);
                let lp = (self.logprobs && !token_ids.is_empty()).then(|| {
                    let offsets = vec![0; token_ids.len()];
                    logprobs::legacy(&self.tokenizer, &token_ids, &logprobs, &offsets, base)
                });
                if text.is_empty() && lp.is_none() {
                    return;
                }
                if let Some(c) = self.chars.get_mut(i) {
                    *c += text.chars().count();
                }
                out.push(self.chunk(vec![choice(i, text, lp, None)], None));
            }
            TextEvent::Finished { reason, .. } => {
                out.push(self.chunk(
                    vec![choice(i, String::new(), None, finish_reason(Some(reason)))],
                    None,
                ));
            }
        }
    }

    fn end(&mut self, usage: Usage, out: &mut Vec<String>) {
        if self.include_usage {
            out.push(self.chunk(Vec::new(), Some(usage)));
        }
    }
}

fn choice(
    index: usize,
    text: String,
    logprobs: Option<kiln_api::completions::CompletionLogprobs>,
    finish_reason: Option<String>,
) -> CompletionChoice {
    CompletionChoice {
        text,
        index: index as u32,
        logprobs,
        finish_reason,
    }
}
