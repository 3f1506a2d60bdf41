//! Prompt log-probabilities on the real default model: a prompt token scores exactly what
//! the model gave it when it generated that token, across chunked prefill, the prefix
//! cache and `n > 1`.

mod common;

use common::*;
use kiln_engine::sample::SamplingParams;
use kiln_engine::{EngineEvent, GenerateRequest, TokenLogprobs};
use tokio::sync::mpsc::UnboundedReceiver;

/// A prompt logprob event: (completion index, position, token, logprobs).
type Scored = (usize, usize, u32, TokenLogprobs);

/// Generated tokens with their logprobs (completion 0), and prompt logprobs by position.
fn drain(rx: &mut UnboundedReceiver<EngineEvent>) -> (Vec<(u32, TokenLogprobs)>, Vec<Scored>) {
    let (mut gen, mut prompt) = (vec![], vec![]);
    while let Ok(ev) = rx.try_recv() {
        match ev {
            EngineEvent::Token {
                index: 0,
                token,
                logprobs: Some(lp),
            } => gen.push((token, lp)),
            EngineEvent::PromptLogprob {
                index,
                position,
                token,
                logprobs,
            } => prompt.push((index, position, token, logprobs)),
            _ => {}
        }
    }
    (gen, prompt)
}

fn with_logprobs(
    prompt: Vec<u32>,
    max_tokens: usize,
    prompt_top: Option<usize>,
) -> GenerateRequest {
    GenerateRequest {
        sampling: SamplingParams {
            logprobs: Some(3),
            prompt_logprobs: prompt_top,
            ..SamplingParams::greedy()
        },
        ..GenerateRequest::greedy(prompt, max_tokens)
    }
}

#[test]
fn prompt_tokens_score_what_generation_gave_them() {
    // 70 prompt tokens: more than one step's prompt-logits rows, so prefill is chunked.
    let base = prompt(5, 70);
    let mut c = core(256);
    let mut rx = add(&mut c, 1, with_logprobs(base.clone(), 12, None));
    run_to_completion(&mut c);
    let (generated, none) = drain(&mut rx);
    assert!(none.is_empty(), "no prompt logprobs unless asked");
    assert_eq!(generated.len(), 12);

    // The same prompt plus what was generated, scored as a prompt. Its first 64 tokens
    // are in the prefix cache now; asking for prompt logprobs must compute them anyway.
    let mut full = base.clone();
    full.extend(generated.iter().map(|(t, _)| *t));
    let hits_before = c.kv().prefix_stats().hits;
    let mut req = with_logprobs(full.clone(), 4, Some(3));
    req.n = 2;
    let mut rx = add(&mut c, 2, req);
    run_to_completion(&mut c);
    let (_, scored) = drain(&mut rx);

    let positions: Vec<usize> = scored.iter().map(|s| s.1).collect();
    assert_eq!(
        positions,
        (1..full.len()).collect::<Vec<_>>(),
        "each once, in order"
    );
    assert!(
        scored.iter().all(|s| s.0 == 0),
        "only the first completion reports them"
    );
    for (_, pos, token, lp) in &scored {
        assert_eq!(*token, full[*pos]);
        assert!(lp.logprob <= 0.0 && lp.logprob.is_finite());
        assert_eq!(lp.top.len(), 3);
        assert!(lp.top.windows(2).all(|w| w[0].1 >= w[1].1));
        assert!(lp.top[0].1 >= lp.logprob - 1e-6);
    }
    // Generated token i sits at prompt position 70 + i: same logprob, same alternatives.
    for (i, (token, lp)) in generated.iter().enumerate() {
        let (_, pos, scored_token, scored_lp) = &scored[70 + i - 1];
        assert_eq!((*pos, *scored_token), (70 + i, *token));
        assert!(
            (scored_lp.logprob - lp.logprob).abs() < 1e-3,
            "position {pos}: {} vs {}",
            scored_lp.logprob,
            lp.logprob
        );
        let ids = |l: &TokenLogprobs| l.top.iter().map(|t| t.0).collect::<Vec<_>>();
        assert_eq!(ids(scored_lp), ids(lp));
    }
    // Completion 1 still reused the prompt from the cache (computed by completion 0).
    assert!(c.kv().prefix_stats().hits >= hits_before + 64);
    assert_eq!(c.kv().num_free_blocks(), 256);
}
