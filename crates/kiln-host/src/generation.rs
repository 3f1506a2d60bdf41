//! One admitted request in flight: its engine streams (one per prompt), merged, with
//! per-choice bookkeeping for usage and metrics.
//!
//! A [`Generation`] owns the engine's `TextStream`s, the admission [`Permit`] and the
//! model's [`Lease`]: dropping it (a client that went away, a finished response) aborts
//! whatever is still running in the engine, freeing its KV blocks, releases the permit
//! and the model, and hands the request's usage to the lease's sink: whatever it
//! consumed, finished or not (a choice cut short counts the tokens it had produced).

use std::sync::Arc;
use std::time::Instant;

use futures_util::stream::{self, BoxStream, SelectAll, StreamExt};
use kiln_engine::output::{TextEvent, TextStream};
use kiln_engine::{FinishReason, GenerateRequest, SeqTimings, ServingModel};

use crate::admission::Permit;
use crate::error::HostError;
use crate::hosted::HostedModel;
use crate::lease::{Lease, TokenUsage};

/// One event of one choice; `choice` is `prompt_index * n + index` (OpenAI's order).
#[derive(Debug)]
pub struct ChoiceEvent {
    pub choice: usize,
    pub event: TextEvent,
}

#[derive(Default, Clone)]
struct ChoiceState {
    finished: Option<FinishReason>,
    completion_tokens: usize,
    /// Tokens seen so far; the count for a choice that never finished.
    produced: usize,
    last_token_at: Option<Instant>,
    drafts: kiln_engine::DraftCounts,
}

pub struct Generation {
    events: SelectAll<BoxStream<'static, (usize, TextEvent)>>,
    n: usize,
    prompt_lens: Vec<usize>,
    cached: Vec<usize>,
    choices: Vec<ChoiceState>,
    hosted: Arc<HostedModel>,
    lease: Lease,
    _permit: Permit,
}

impl Generation {
    /// The error a choice that finished with `reason` fails its request with: an engine
    /// abort (a failed step), or logits that were not finite numbers.
    pub fn failure(&self, reason: FinishReason) -> Option<HostError> {
        match reason {
            FinishReason::Abort => Some(HostError::Aborted),
            FinishReason::NonFinite => Some(HostError::NonFiniteLogits {
                model: self.hosted.name.clone(),
            }),
            FinishReason::Stop | FinishReason::Length => None,
        }
    }

    /// Submits one engine request per prompt (all with the same `n`).
    pub fn start(
        model: &ServingModel,
        lease: Lease,
        requests: Vec<GenerateRequest>,
        skip_special: bool,
        permit: Permit,
    ) -> Result<Self, HostError> {
        let n = requests.first().map_or(1, |r| r.n.max(1));
        let prompt_lens: Vec<usize> = requests.iter().map(|r| r.prompt.len()).collect();
        let mut events = SelectAll::new();
        for (p, req) in requests.into_iter().enumerate() {
            let text = model.generate(req, skip_special)?;
            events.push(per_prompt(p, text));
        }
        Ok(Self {
            events,
            n,
            cached: vec![0; prompt_lens.len()],
            choices: vec![ChoiceState::default(); prompt_lens.len() * n],
            prompt_lens,
            hosted: lease.hosted().clone(),
            lease,
            _permit: permit,
        })
    }

    pub fn num_choices(&self) -> usize {
        self.choices.len()
    }

    /// The next event of any choice, or `None` once all have finished.
    pub async fn next(&mut self) -> Option<ChoiceEvent> {
        let (p, event) = self.events.next().await?;
        let index = match &event {
            TextEvent::Started { index, .. }
            | TextEvent::PromptLogprob { index, .. }
            | TextEvent::Delta { index, .. }
            | TextEvent::Finished { index, .. } => *index,
        };
        let choice = p * self.n + index;
        self.observe(p, choice, &event);
        Some(ChoiceEvent { choice, event })
    }

    fn observe(&mut self, p: usize, choice: usize, event: &TextEvent) {
        let m = &self.hosted.metrics;
        let Some(state) = self.choices.get_mut(choice) else {
            return;
        };
        match event {
            TextEvent::Started {
                index,
                cached_tokens,
            } => {
                m.prompt_tokens.add(self.prompt_lens[p] as u64);
                if *index == 0 {
                    self.cached[p] = *cached_tokens;
                }
            }
            TextEvent::Delta { token_ids, .. } if !token_ids.is_empty() => {
                let now = Instant::now();
                if let Some(last) = state.last_token_at {
                    m.inter_token_latency.observe(now - last);
                }
                state.last_token_at = Some(now);
                state.produced += token_ids.len();
            }
            TextEvent::Delta { .. } | TextEvent::PromptLogprob { .. } => {}
            TextEvent::Finished {
                reason,
                completion_tokens,
                timings,
                drafts,
                ..
            } => {
                state.finished = Some(*reason);
                state.drafts = *drafts;
                state.completion_tokens = *completion_tokens;
                m.finished(*reason);
                observe_timings(&self.hosted, timings);
            }
        }
    }

    /// Token counts so far (final once every choice has finished).
    pub fn usage(&self) -> TokenUsage {
        let prompt: usize = self.prompt_lens.iter().sum();
        let completion: usize = self
            .choices
            .iter()
            .map(|c| match c.finished {
                Some(_) => c.completion_tokens,
                None => c.produced,
            })
            .sum();
        let cached: usize = self.cached.iter().sum();
        TokenUsage {
            prompt: prompt as u64,
            completion: completion as u64,
            cached: cached as u64,
            draft: self.choices.iter().map(|c| c.drafts.drafted).sum(),
            accepted: self.choices.iter().map(|c| c.drafts.accepted).sum(),
        }
    }

    /// The prompt length of choice `choice`.
    pub fn prompt_len(&self, choice: usize) -> usize {
        self.prompt_lens.get(choice / self.n).copied().unwrap_or(0)
    }
}

impl Drop for Generation {
    fn drop(&mut self) {
        // Choices the engine never finished for us were cut short (the client left).
        let unfinished = self.choices.iter().filter(|c| c.finished.is_none()).count();
        if unfinished > 0 {
            self.hosted.metrics.success_abort.add(unfinished as u64);
            tracing::debug!(
                unfinished,
                "request dropped before it finished; aborting in the engine"
            );
        }
        let usage = self.usage();
        self.lease.record_usage(usage);
    }
}

fn per_prompt(p: usize, text: TextStream) -> BoxStream<'static, (usize, TextEvent)> {
    stream::unfold(text, |mut text| async move {
        text.next().await.map(|ev| (ev, text))
    })
    .map(move |ev| (p, ev))
    .boxed()
}

fn observe_timings(hosted: &HostedModel, t: &SeqTimings) {
    let m = &hosted.metrics;
    m.e2e_request_latency.observe(t.finished - t.arrived);
    if let Some(s) = t.scheduled {
        m.request_queue_time.observe(s - t.arrived);
    }
    if let Some(first) = t.first_token {
        m.time_to_first_token.observe(first - t.arrived);
        m.request_decode_time.observe(t.finished - first);
        if let Some(s) = t.scheduled {
            m.request_prefill_time
                .observe(first.saturating_duration_since(s));
        }
    }
}

/// Everything one choice produced, for non-streamed responses.
#[derive(Debug, Default, Clone)]
pub struct Collected {
    pub text: String,
    pub token_ids: Vec<u32>,
    pub logprobs: Vec<kiln_engine::TokenLogprobs>,
    /// Log-probabilities of prompt tokens 1.. (first completion of a prompt only).
    pub prompt_logprobs: Vec<kiln_engine::TokenLogprobs>,
    /// Character offset in `text` at which each token's text starts.
    pub text_offsets: Vec<usize>,
    /// `text.chars().count()`, kept as text arrives.
    pub chars: usize,
    pub finish: Option<FinishReason>,
}

/// Runs `gen` to the end and returns each choice's output and the usage. A choice the
/// engine failed ([`Generation::failure`]) fails the whole request.
pub async fn collect(mut gen: Generation) -> Result<(Vec<Collected>, TokenUsage), HostError> {
    let mut out = vec![Collected::default(); gen.num_choices()];
    while let Some(ChoiceEvent { choice, event }) = gen.next().await {
        let Some(c) = out.get_mut(choice) else {
            continue;
        };
        match event {
            TextEvent::Started { .. } => {}
            TextEvent::PromptLogprob { logprobs, .. } => c.prompt_logprobs.push(logprobs),
            TextEvent::Delta {
                text,
                token_ids,
                logprobs,
                ..
            } => {
                c.text_offsets
                    .extend(std::iter::repeat_n(c.chars, token_ids.len()));
                c.chars += text.chars().count();
                c.text.push_str(&text);
                c.token_ids.extend(token_ids);
                c.logprobs.extend(logprobs);
            }
            TextEvent::Finished { reason, .. } => {
                if let Some(e) = gen.failure(reason) {
                    return Err(e);
                }
                c.finish = Some(reason);
            }
        }
    }
    Ok((out, gen.usage()))
}
