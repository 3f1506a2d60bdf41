//! Several hundred requests of random lengths through the threaded handle, some aborted
//! at random points: every request finishes or is aborted, nothing hangs, and every KV
//! block is back in the pool at the end.

mod common;

use std::time::{Duration, Instant};

use common::*;
use kiln_engine::core::EngineCore;
use kiln_engine::{EngineEvent, FinishReason, GenerateRequest};
use rand::{Rng, SeedableRng};

#[test]
fn hundreds_of_requests_with_random_aborts() {
    let mut cfg = config_with(96, 256);
    cfg.max_num_seqs = 32;
    cfg.max_num_batched_tokens = 128;
    let (handle, thread) =
        kiln_engine::spawn(move || EngineCore::new(model(), cfg, vec![2])).expect("spawn");
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(11);
    let n = 300;
    let mut streams = vec![];
    let mut dropped = 0;
    for i in 0..n {
        let len = rng.random_range(1..120);
        let max_tokens = rng.random_range(1..24);
        let req = GenerateRequest::greedy(prompt(i, len), max_tokens);
        let abort_after = rng.random_bool(0.3).then(|| rng.random_range(1..6));
        let ev = handle.submit(req).expect("submitted");
        if rng.random_bool(0.1) {
            // A caller that goes away at once (a disconnect): dropping aborts.
            drop(ev);
            dropped += 1;
            continue;
        }
        streams.push((ev, abort_after, max_tokens));
    }
    let deadline = Instant::now() + Duration::from_secs(600);
    let (mut finished, mut aborted) = (0, 0);
    for (mut ev, abort_after, max_tokens) in streams {
        let mut got = 0usize;
        loop {
            assert!(Instant::now() < deadline, "requests did not finish in time");
            match ev.blocking_recv() {
                Some(EngineEvent::Token { .. }) => {
                    got += 1;
                    if abort_after == Some(got) {
                        ev.abort();
                    }
                }
                Some(EngineEvent::Finished { reason, .. }) => match reason {
                    FinishReason::Abort => aborted += 1,
                    _ => {
                        assert!(got <= max_tokens);
                        finished += 1;
                    }
                },
                Some(EngineEvent::Scheduled { .. } | EngineEvent::PromptLogprob { .. }) => {}
                None => break,
            }
        }
    }
    assert_eq!(
        finished + aborted + dropped,
        n,
        "every request ended exactly once"
    );
    assert!(aborted > 0 && finished > 0 && dropped > 0);
    // The engine publishes its gauges after each step and command; give it a moment.
    let settle = Instant::now() + Duration::from_secs(10);
    let stats = loop {
        let s = handle.stats().snapshot();
        if (s.num_running + s.num_waiting == 0 && s.kv_usage == 0.0) || Instant::now() > settle {
            break s;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    assert_eq!(stats.num_running + stats.num_waiting, 0);
    assert_eq!(stats.kv_usage, 0.0, "every block is back in the pool");
    handle.drain();
    thread.join();
}
