//! What a step does with each row of logits: score a prompt token, or sample the next
//! token of a sequence. A row holding a NaN or an infinity (broken weights) ends its
//! sequence with [`FinishReason::NonFinite`] instead: no token or logprob is made from
//! it. The sampler's own pass over the row finds that (see `sample::scan`).

use std::collections::HashMap;
use std::time::Instant;

use super::SeqMeta;
use crate::constraint::mask_allows;
use crate::masks::SeqConstraint;
use crate::request::{EngineEvent, FinishReason, TokenLogprobs};
use crate::sample::Sampler;
use crate::scheduler::Scheduler;
use crate::sequence::SeqId;

/// Reports the log-probability of prompt token `target` of running sequence `i` (and its
/// most likely alternatives) from the logits of the row before it.
pub(super) fn score_prompt_row(
    scheduler: &mut Scheduler,
    metas: &HashMap<SeqId, SeqMeta>,
    sampler: &mut Sampler,
    finished: &mut Vec<(SeqId, FinishReason)>,
    i: usize,
    target: usize,
    logits: &[f32],
) {
    let seq = &mut scheduler.running_mut()[i];
    let (Some(m), Some(&token), Some(top)) = (
        metas.get(&seq.id),
        seq.tokens.get(target),
        seq.prompt_logprobs,
    ) else {
        return;
    };
    let Ok(logprobs) = sampler.logprobs_of(logits, token, top) else {
        finished.push((seq.id, FinishReason::NonFinite));
        return;
    };
    seq.prompt_logprob_next = target + 1;
    // A consumer that went away is noticed when the first token is sent.
    let _ = m.events.send(EngineEvent::PromptLogprob {
        index: m.index,
        position: target,
        token,
        logprobs,
    });
}

/// Samples the next token of running sequence `i`, appends it, emits it, and records
/// whether the sequence is done. Returns the token if the sequence goes on.
#[allow(clippy::too_many_arguments)]
pub(super) fn sample_one(
    scheduler: &mut Scheduler,
    metas: &mut HashMap<SeqId, SeqMeta>,
    sampler: &mut Sampler,
    banned: &mut Vec<u32>,
    finished: &mut Vec<(SeqId, FinishReason)>,
    eos_ids: &[u32],
    i: usize,
    logits: &mut [f32],
) -> Option<u32> {
    let max_model_len = scheduler.config.max_model_len;
    let seq = &mut scheduler.running_mut()[i];
    let m = metas.get_mut(&seq.id)?;
    let n_out = seq.num_output_tokens();
    banned.clear();
    let mask = match m.constraint.as_mut().map(SeqConstraint::mask) {
        None => None,
        Some(Ok(mask)) => Some(mask),
        Some(Err(e)) => {
            tracing::warn!(error = %e, "constraint failed; ending the sequence");
            finished.push((seq.id, FinishReason::Abort));
            return None;
        }
    };
    // A grammar decides when the output may end: `min_tokens` doesn't apply.
    if n_out < m.stop.min_tokens && mask.is_none() {
        if !m.stop.ignore_eos {
            banned.extend_from_slice(eos_ids);
        }
        banned.extend_from_slice(&m.stop.stop_token_ids);
    }
    let Ok(s) = sampler.sample_masked(logits, &m.sampling, &mut m.sampler_state, banned, mask)
    else {
        finished.push((seq.id, FinishReason::NonFinite));
        return None;
    };
    let token = s.token;
    if mask.is_some_and(|mask| !mask_allows(mask, token)) {
        // The grammar allows nothing more (every token masked): the output is complete.
        finished.push((seq.id, FinishReason::Stop));
        return None;
    }
    let grammar_done = match m
        .constraint
        .as_mut()
        .map(|c| c.accept(token).map(|()| c.is_finished()))
    {
        None | Some(Ok(false)) => false,
        Some(Ok(true)) => true,
        Some(Err(e)) => {
            tracing::warn!(error = %e, "constraint rejected a sampled token; ending the sequence");
            finished.push((seq.id, FinishReason::Abort));
            return None;
        }
    };
    m.sampler_state.record(token);
    seq.tokens.push(token);
    if m.first_token.is_none() {
        m.first_token = Some(Instant::now());
    }
    let logprobs = s.logprob.map(|logprob| TokenLogprobs {
        logprob,
        top: s.top_logprobs,
    });
    let sent = m.events.send(EngineEvent::Token {
        index: m.index,
        token,
        logprobs,
    });
    let n_out = n_out + 1;
    let reason = if sent.is_err() {
        // Nobody is listening any more: the client went away.
        Some(FinishReason::Abort)
    } else if (!m.stop.ignore_eos && eos_ids.contains(&token))
        || m.stop.stop_token_ids.contains(&token)
        || grammar_done
    {
        Some(FinishReason::Stop)
    } else if n_out >= m.stop.max_tokens || seq.tokens.len() >= max_model_len {
        Some(FinishReason::Length)
    } else {
        None
    };
    match reason {
        Some(r) => {
            finished.push((seq.id, r));
            None
        }
        None => Some(token),
    }
}
