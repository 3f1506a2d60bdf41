//! The engine on the real default model: results don't depend on batching, caching or
//! preemption, and every block comes back.

mod common;

use common::*;
use kiln_engine::core::EngineCore;
use kiln_engine::sample::SamplingParams;
use kiln_engine::{FinishReason, GenerateRequest};

#[test]
fn greedy_tokens_are_the_same_alone_and_among_31_others() {
    let probe = GenerateRequest::greedy(prompt(0, 40), 24);
    let want = alone(probe.clone());
    let mut c = core(512);
    let mut rxs = vec![];
    for i in 1..32 {
        rxs.push(add(
            &mut c,
            i,
            GenerateRequest::greedy(prompt(i as usize, 5 + i as usize * 3), 20),
        ));
    }
    // Arrives while the others are mid-flight: mixed prefill and decode rows.
    c.step();
    c.step();
    let mut rx = add(&mut c, 100, probe);
    run_to_completion(&mut c);
    assert_eq!(collect(&mut rx).0[0], want);
    for mut r in rxs {
        assert_eq!(collect(&mut r).1[0], Some(FinishReason::Length));
    }
}

#[test]
fn prefix_cache_hit_gives_the_same_tokens_as_a_miss() {
    let req = GenerateRequest::greedy(prompt(3, 70), 16);
    let mut c = core(256);
    let mut first = add(&mut c, 1, req.clone());
    run_to_completion(&mut c);
    let hits_before = c.kv().prefix_stats().hits;
    let mut second = add(&mut c, 2, req);
    run_to_completion(&mut c);
    assert!(
        c.kv().prefix_stats().hits >= hits_before + 64,
        "the second run hit the cache"
    );
    assert_eq!(collect(&mut first).0, collect(&mut second).0);
}

#[test]
fn preempted_and_resumed_gives_the_same_tokens() {
    let reqs: Vec<_> = (0..6)
        .map(|i| GenerateRequest::greedy(prompt(10 + i, 30), 60))
        .collect();
    let want: Vec<_> = reqs.iter().map(|r| alone(r.clone())).collect();
    // 6 × 90 tokens need 36 blocks of 16; 20 blocks force preemptions.
    let mut c = EngineCore::new(model(), config_with(20, 256), vec![2]).expect("engine");
    let mut rxs: Vec<_> = reqs
        .into_iter()
        .enumerate()
        .map(|(i, r)| add(&mut c, i as u64, r))
        .collect();
    run_to_completion(&mut c);
    assert!(c.stats.snapshot().preemptions > 0, "the test must preempt");
    for (rx, want) in rxs.iter_mut().zip(want) {
        assert_eq!(collect(rx).0[0], want);
    }
    assert_eq!(c.kv().num_free_blocks(), 20);
}

#[test]
fn seeded_sampling_is_the_same_alone_and_in_a_batch() {
    let sampled = |seed| GenerateRequest {
        sampling: SamplingParams {
            temperature: 0.9,
            top_p: 0.95,
            top_k: 50,
            seed: Some(seed),
            ..SamplingParams::default()
        },
        ..GenerateRequest::greedy(prompt(42, 25), 20)
    };
    let want = alone(sampled(1234));
    let mut c = core(512);
    let mut others = vec![];
    for i in 0..8 {
        others.push(add(&mut c, i, sampled(i)));
    }
    let mut rx = add(&mut c, 99, sampled(1234));
    run_to_completion(&mut c);
    assert_eq!(collect(&mut rx).0[0], want);
    let other0 = collect(&mut others[0]).0.remove(0);
    assert_ne!(other0, want, "different seeds give different samples");
}

#[test]
fn n_completions_share_the_prompt_and_use_their_own_seeds() {
    let req = GenerateRequest {
        n: 3,
        sampling: SamplingParams {
            temperature: 1.0,
            seed: Some(5),
            ..SamplingParams::default()
        },
        ..GenerateRequest::greedy(prompt(7, 40), 12)
    };
    let mut c = core(256);
    let mut rx = add(&mut c, 1, req);
    run_to_completion(&mut c);
    // Completions 2 and 3 reused the prompt's two full blocks (32 tokens) from the first.
    assert_eq!(c.kv().prefix_stats().hits, 64);
    let (toks, fin) = collect(&mut rx);
    assert_eq!(toks.len(), 3);
    assert!(fin.iter().all(|f| f.is_some()));
    assert!(
        toks[0] != toks[1] || toks[1] != toks[2],
        "independent samples"
    );
    assert_eq!(c.kv().num_free_blocks(), 256);
}

#[test]
fn abort_frees_blocks_at_the_next_step() {
    let mut c = core(64);
    let _rx = add(&mut c, 1, GenerateRequest::greedy(prompt(1, 100), 200));
    c.step();
    assert!(c.kv().num_free_blocks() < 64);
    c.abort_request(1);
    assert_eq!(c.kv().num_free_blocks(), 64);
    assert!(!c.has_work());
}
