//! Speculative decoding on the real default model: output is the same with it on and
//! off (greedy and seeded, with penalties, logprobs, `n`, stop tokens and grammars),
//! sampling keeps the model's distribution, and rejected drafts leave no block behind.

mod common;

use std::collections::HashMap;

use common::*;
use kiln_engine::core::EngineCore;
use kiln_engine::sample::SamplingParams;
use kiln_engine::{EngineConfig, EngineEvent, GenerateRequest, SpecDecodeStats, SpecMode};

const BLOCKS: usize = 512;

fn engine(mode: SpecMode) -> EngineCore {
    let config = EngineConfig {
        speculative: mode,
        ..config(BLOCKS)
    };
    EngineCore::new(model(), config, vec![2]).expect("engine builds")
}

/// A random token run said three times and begun a fourth: the model copies it, so the
/// drafts (from its own prompt) are mostly right.
fn copying_prompt(i: usize, run: usize) -> Vec<u32> {
    let run = prompt(i, run);
    let mut p = Vec::new();
    for _ in 0..3 {
        p.extend_from_slice(&run);
    }
    p.extend_from_slice(&run[..run.len() / 3]);
    p
}

/// Each completion's tokens and their logprobs, in order (completions interleave
/// differently when one of them verifies several tokens in a step).
type Events = Vec<Vec<(u32, Option<kiln_engine::TokenLogprobs>)>>;

fn drain(rx: &mut tokio::sync::mpsc::UnboundedReceiver<EngineEvent>) -> Events {
    let mut out: Events = vec![];
    while let Ok(ev) = rx.try_recv() {
        if let EngineEvent::Token {
            index,
            token,
            logprobs,
        } = ev
        {
            if out.len() <= index {
                out.resize(index + 1, vec![]);
            }
            out[index].push((token, logprobs));
        }
    }
    out
}

/// Runs the requests one after another on one engine (later ones may hit the prefix
/// cache that earlier ones filled) and returns their events and the engine's counters.
fn one_by_one(mode: SpecMode, reqs: &[GenerateRequest]) -> (Vec<Events>, SpecDecodeStats) {
    let mut c = engine(mode);
    let mut outs = vec![];
    for (i, req) in reqs.iter().enumerate() {
        let mut rx = add(&mut c, i as u64, req.clone());
        run_to_completion(&mut c);
        outs.push(drain(&mut rx));
    }
    assert_eq!(c.kv().num_free_blocks(), BLOCKS, "every block back");
    (outs, c.stats.snapshot().spec_decode)
}

/// Runs the requests all at once on one engine.
fn together(mode: SpecMode, reqs: &[GenerateRequest]) -> Vec<Events> {
    let mut c = engine(mode);
    let mut rxs: Vec<_> = (0..reqs.len())
        .map(|i| add(&mut c, i as u64, reqs[i].clone()))
        .collect();
    run_to_completion(&mut c);
    assert_eq!(c.kv().num_free_blocks(), BLOCKS, "every block back");
    rxs.iter_mut().map(drain).collect()
}

fn greedy_requests() -> Vec<GenerateRequest> {
    let mut reqs = vec![];
    for i in 0..12 {
        reqs.push(GenerateRequest::greedy(copying_prompt(i, 12 + i * 3), 48));
    }
    for i in 0..4 {
        reqs.push(GenerateRequest::greedy(prompt(100 + i, 30), 32));
    }
    // A stop token taken from the run: the sequence must end at the same place.
    let mut stop = GenerateRequest::greedy(copying_prompt(50, 20), 48);
    stop.stop.stop_token_ids = vec![prompt(50, 20)[12]];
    reqs.push(stop);
    // EOS banned for a while, then allowed.
    let mut min = GenerateRequest::greedy(copying_prompt(51, 16), 40);
    min.stop.min_tokens = 20;
    reqs.push(min);
    reqs
}

#[test]
fn greedy_output_is_identical_with_speculation_on_and_off() {
    let reqs = greedy_requests();
    let (off, off_stats) = one_by_one(SpecMode::Off, &reqs);
    let (on, on_stats) = one_by_one(SpecMode::Auto, &reqs);
    assert_eq!(off_stats.drafts, 0, "off drafts nothing");
    assert!(
        on_stats.accepted_tokens > 100,
        "the copying prompts must be drafted and accepted: {on_stats:?}"
    );
    assert!(on_stats.accepted_per_pos[0] >= on_stats.accepted_per_pos[1]);
    for (i, (a, b)) in off.iter().zip(&on).enumerate() {
        assert_eq!(a, b, "request {i}");
    }
    // Batched, speculation shares the step with other sequences' rows.
    assert_eq!(together(SpecMode::Auto, &reqs), off);
}

#[test]
fn per_request_opt_out_drafts_nothing() {
    let mut req = GenerateRequest::greedy(copying_prompt(3, 20), 40);
    req.speculative = false;
    let (out, stats) = one_by_one(SpecMode::Auto, &[req.clone()]);
    assert_eq!(stats.drafts, 0);
    req.speculative = true;
    let (spec, stats) = one_by_one(SpecMode::Auto, &[req]);
    assert!(stats.drafts > 0);
    assert_eq!(out, spec);
}

fn sampled(seed: u64, logprobs: Option<usize>) -> SamplingParams {
    SamplingParams {
        temperature: 0.8,
        top_p: 0.95,
        frequency_penalty: 0.3,
        seed: Some(seed),
        logprobs,
        ..SamplingParams::default()
    }
}

#[test]
fn seeded_output_and_logprobs_are_identical_with_speculation_on_and_off() {
    let reqs: Vec<_> = (0..8)
        .map(|i| GenerateRequest {
            sampling: sampled(1000 + i as u64, Some(3)),
            n: 2,
            ..GenerateRequest::greedy(copying_prompt(i, 16 + i), 40)
        })
        .collect();
    let (off, _) = one_by_one(SpecMode::Off, &reqs);
    let (on, stats) = one_by_one(SpecMode::Auto, &reqs);
    assert!(stats.accepted_tokens > 0, "{stats:?}");
    assert_eq!(off, on);
}

/// The first two tokens of `n` sampled continuations, counted.
fn pair_counts(mode: SpecMode, seeds: std::ops::Range<u64>) -> (HashMap<(u32, u32), u64>, u64) {
    let prompt = copying_prompt(7, 9);
    let reqs: Vec<_> = seeds
        .map(|seed| GenerateRequest {
            sampling: SamplingParams {
                temperature: 1.0,
                seed: Some(seed),
                ..SamplingParams::default()
            },
            // The second token can be drafted only if a third may follow it.
            ..GenerateRequest::greedy(prompt.clone(), 3)
        })
        .collect();
    let mut c = engine(mode);
    let mut counts = HashMap::new();
    // In small batches, so the policy has spare rows to draft with.
    for chunk in reqs.chunks(4) {
        let mut rxs: Vec<_> = chunk
            .iter()
            .enumerate()
            .map(|(i, r)| add(&mut c, i as u64, r.clone()))
            .collect();
        run_to_completion(&mut c);
        for rx in &mut rxs {
            let toks: Vec<u32> = drain(rx)[0].iter().map(|e| e.0).collect();
            *counts.entry((toks[0], toks[1])).or_insert(0) += 1;
        }
    }
    (counts, c.stats.snapshot().spec_decode.draft_tokens)
}

#[test]
fn sampling_with_speculation_keeps_the_models_distribution() {
    // Independent seeds on each side: a two-sample chi-square test of homogeneity over
    // the (first, second) token pairs, rare pairs pooled.
    const N: u64 = 400;
    let (off, _) = pair_counts(SpecMode::Off, 0..N);
    let (on, drafted) = pair_counts(SpecMode::Auto, N..2 * N);
    assert!(drafted > 0, "the second token must be drafted");
    let mut cells: Vec<(u64, u64)> = vec![];
    let (mut rare_a, mut rare_b) = (0, 0);
    let keys: std::collections::BTreeSet<_> = off.keys().chain(on.keys()).collect();
    for k in keys {
        let (a, b) = (
            off.get(k).copied().unwrap_or(0),
            on.get(k).copied().unwrap_or(0),
        );
        if a + b >= 10 {
            cells.push((a, b));
        } else {
            rare_a += a;
            rare_b += b;
        }
    }
    cells.push((rare_a, rare_b));
    assert!(cells.len() >= 3, "a spread-out distribution: {cells:?}");
    let n = (2 * N) as f64;
    let chi2: f64 = cells
        .iter()
        .filter(|(a, b)| a + b > 0)
        .map(|&(a, b)| {
            let expected = (a + b) as f64 / 2.0;
            let (a, b) = (a as f64, b as f64);
            ((a - expected).powi(2) + (b - expected).powi(2)) / expected
        })
        .sum();
    let dof = (cells.len() - 1) as f64;
    // The 0.1% critical value, by the Wilson-Hilferty approximation.
    let z = 3.09;
    let critical = dof * (1.0 - 2.0 / (9.0 * dof) + z * (2.0 / (9.0 * dof)).sqrt()).powi(3);
    assert!(
        chi2 < critical,
        "chi2 {chi2:.1} over {dof} degrees of freedom (critical {critical:.1}), n = {n}: {cells:?}"
    );
}

#[test]
fn abort_mid_verify_frees_every_block() {
    let mut c = engine(SpecMode::Auto);
    let _rx = add(
        &mut c,
        1,
        GenerateRequest::greedy(copying_prompt(9, 30), 200),
    );
    let mut steps = 0;
    while c.stats.snapshot().spec_decode.drafts == 0 {
        c.step();
        steps += 1;
        assert!(steps < 100, "no draft within 100 steps");
    }
    assert!(c.kv().num_free_blocks() < BLOCKS);
    c.abort_request(1);
    assert_eq!(c.kv().num_free_blocks(), BLOCKS);
    assert!(!c.has_work());
}

/// Tokens and draft counts of one request run to completion on `c`.
fn run_one(
    c: &mut EngineCore,
    id: u64,
    req: GenerateRequest,
) -> (Vec<u32>, kiln_engine::DraftCounts) {
    let mut rx = add(c, id, req);
    run_to_completion(c);
    let (mut toks, mut drafts) = (vec![], None);
    while let Ok(ev) = rx.try_recv() {
        match ev {
            EngineEvent::Token { token, .. } => toks.push(token),
            EngineEvent::Finished { drafts: d, .. } => drafts = Some(d),
            _ => {}
        }
    }
    (toks, drafts.expect("finished"))
}

#[test]
fn a_repeated_request_drafts_from_earlier_outputs_of_its_own_cache_key_only() {
    let m = model();
    let tokenizer = kiln_tokenizer::Tokenizer::from_gguf(m.gguf()).expect("tokenizer");
    let prompt = tokenizer
        .encode(
            "<|im_start|>user\nExplain in one paragraph why the sky is blue.<|im_end|>\n\
             <|im_start|>assistant\n",
            false,
            true,
        )
        .expect("encodes");
    let mut c = EngineCore::new(m, config(BLOCKS), vec![2]).expect("engine builds");
    // Prose without repeats: its drafts can only come from the earlier output.
    let req = GenerateRequest::greedy(prompt, 64);
    let (first, _) = run_one(&mut c, 1, req.clone());
    let (again, same_key) = run_one(&mut c, 2, req.clone());
    let other = GenerateRequest {
        cache_key: b"another tenant".to_vec(),
        ..req
    };
    let (other_out, other_key) = run_one(&mut c, 3, other);
    assert_eq!(again, first);
    assert_eq!(other_out, first);
    // How much is drafted depends on measured step times; what is drafted is exact.
    assert!(
        same_key.accepted >= 12,
        "the repeat copies the first output: {same_key:?}"
    );
    assert!(
        same_key.accepted >= 2 * other_key.accepted + 8,
        "another key drafts only from its own tokens: {same_key:?} vs {other_key:?}"
    );
    assert_eq!(c.kv().num_free_blocks(), BLOCKS);
}
