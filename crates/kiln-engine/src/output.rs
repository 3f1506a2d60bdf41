//! Token events → text: incremental detokenization and stop strings per completion.
//!
//! This runs on the caller's side of the handle (an HTTP task, the CLI), as vLLM's
//! output processor does, so the engine thread only ever sees token ids. A matched stop
//! string ends just that completion in the engine.

use std::sync::Arc;

use kiln_tokenizer::{IncrementalDecoder, Tokenizer};

use crate::handle::RequestEvents;
use crate::request::{EngineEvent, FinishReason, SeqTimings, TokenLogprobs};
use crate::spec::DraftCounts;
use crate::stop::StopMatcher;

/// Why a completion stopped, in more detail than [`FinishReason`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StopCause {
    /// End of sequence, a stop token id (the token), or a stop string (its index).
    Eos(u32),
    StopString(usize),
    /// `max_tokens` or the context.
    Length,
    Abort,
    /// The model's logits were not finite numbers (see [`FinishReason::NonFinite`]).
    NonFinite,
}

/// What a consumer sees.
#[derive(Debug, Clone)]
pub enum TextEvent {
    /// The prompt of completion `index` was admitted; `cached_tokens` were reused.
    Started { index: usize, cached_tokens: usize },
    /// The log-probability of prompt token `position` (from 1) under the model; only for
    /// requests that ask for prompt log-probabilities, before the first `Delta`.
    PromptLogprob {
        index: usize,
        position: usize,
        token: u32,
        logprobs: TokenLogprobs,
    },
    /// New text for completion `index` (may be empty while a character or a possible
    /// stop string is incomplete) and the tokens it came from.
    Delta {
        index: usize,
        text: String,
        token_ids: Vec<u32>,
        logprobs: Vec<TokenLogprobs>,
    },
    Finished {
        index: usize,
        reason: FinishReason,
        cause: StopCause,
        /// Tokens generated for this completion (including ones cut by a stop string).
        completion_tokens: usize,
        timings: SeqTimings,
        /// Draft tokens verified for it and accepted (speculative decoding).
        drafts: DraftCounts,
    },
}

struct Choice {
    decoder: IncrementalDecoder<Arc<Tokenizer>>,
    stops: StopMatcher,
    n_tokens: usize,
    last_token: Option<u32>,
    /// A stop string matched: swallow the engine's remaining events for this completion.
    stopped_by: Option<usize>,
    done: bool,
}

/// Text events for one request, built on its [`RequestEvents`].
pub struct TextStream {
    events: RequestEvents,
    tokenizer: Arc<Tokenizer>,
    choices: Vec<Choice>,
    /// A finish held back one call so the text flushed before it goes out first.
    pending_finish: Option<TextEvent>,
}

impl TextStream {
    pub fn new(
        events: RequestEvents,
        tokenizer: Arc<Tokenizer>,
        n: usize,
        stop_strings: &[String],
        skip_special: bool,
    ) -> Self {
        let choices = (0..n.max(1))
            .map(|_| Choice {
                decoder: IncrementalDecoder::new(tokenizer.clone(), skip_special),
                stops: StopMatcher::new(stop_strings.to_vec()),
                n_tokens: 0,
                last_token: None,
                stopped_by: None,
                done: false,
            })
            .collect();
        Self {
            events,
            tokenizer,
            choices,
            pending_finish: None,
        }
    }

    pub fn tokenizer(&self) -> &Arc<Tokenizer> {
        &self.tokenizer
    }

    /// The next event, or `None` when every completion has finished.
    pub async fn next(&mut self) -> Option<TextEvent> {
        if let Some(f) = self.pending_finish.take() {
            return Some(f);
        }
        loop {
            let ev = self.events.recv().await?;
            if let Some(out) = self.timed_process(ev) {
                return Some(out);
            }
        }
    }

    /// Blocking twin of [`next`](Self::next), for threads outside an async runtime.
    pub fn blocking_next(&mut self) -> Option<TextEvent> {
        if let Some(f) = self.pending_finish.take() {
            return Some(f);
        }
        loop {
            let ev = self.events.blocking_recv()?;
            if let Some(out) = self.timed_process(ev) {
                return Some(out);
            }
        }
    }

    fn timed_process(&mut self, ev: EngineEvent) -> Option<TextEvent> {
        let start = std::time::Instant::now();
        let out = self.process(ev);
        self.events.stats.detokenized(start.elapsed());
        out
    }

    fn process(&mut self, ev: EngineEvent) -> Option<TextEvent> {
        match ev {
            EngineEvent::Scheduled {
                index,
                cached_tokens,
            } => Some(TextEvent::Started {
                index,
                cached_tokens,
            }),
            EngineEvent::PromptLogprob {
                index,
                position,
                token,
                logprobs,
            } => Some(TextEvent::PromptLogprob {
                index,
                position,
                token,
                logprobs,
            }),
            EngineEvent::Token {
                index,
                token,
                logprobs,
            } => {
                let c = self.choices.get_mut(index)?;
                if c.stopped_by.is_some() || c.done {
                    return None;
                }
                c.n_tokens += 1;
                c.last_token = Some(token);
                let piece = c.decoder.push(token);
                let mut text = String::new();
                if let Some(i) = c.stops.push(&piece, &mut text) {
                    c.stopped_by = Some(i);
                    self.events.abort_one(index);
                }
                Some(TextEvent::Delta {
                    index,
                    text,
                    token_ids: vec![token],
                    logprobs: logprobs.into_iter().collect(),
                })
            }
            EngineEvent::Finished {
                index,
                reason,
                timings,
                drafts,
            } => {
                let c = self.choices.get_mut(index)?;
                c.done = true;
                let (reason, cause) = match (c.stopped_by, reason) {
                    (Some(i), _) => (FinishReason::Stop, StopCause::StopString(i)),
                    (None, FinishReason::Stop) => (
                        FinishReason::Stop,
                        StopCause::Eos(c.last_token.unwrap_or(0)),
                    ),
                    (None, FinishReason::Length) => (FinishReason::Length, StopCause::Length),
                    (None, FinishReason::Abort) => (FinishReason::Abort, StopCause::Abort),
                    (None, FinishReason::NonFinite) => {
                        (FinishReason::NonFinite, StopCause::NonFinite)
                    }
                };
                let mut tail = String::new();
                if c.stopped_by.is_none() {
                    let rest = c.decoder.finish();
                    if c.stops.push(&rest, &mut tail).is_none() {
                        c.stops.flush(&mut tail);
                    }
                }
                let finished = TextEvent::Finished {
                    index,
                    reason,
                    cause,
                    completion_tokens: c.n_tokens,
                    timings,
                    drafts,
                };
                if tail.is_empty() {
                    Some(finished)
                } else {
                    // Flush held-back text first; the finish follows on the next call.
                    self.pending_finish = Some(finished);
                    Some(TextEvent::Delta {
                        index,
                        text: tail,
                        token_ids: vec![],
                        logprobs: vec![],
                    })
                }
            }
        }
    }
}
