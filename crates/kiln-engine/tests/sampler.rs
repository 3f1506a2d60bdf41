//! Sampler behaviour on hand-made logits.

use kiln_engine::sample::{Sampler, SamplingParams, SeqSamplingState};

fn sample_with(logits: &[f32], p: &SamplingParams, seed: u64, banned: &[u32]) -> u32 {
    let mut st = SeqSamplingState::new(p, seed, &[]);
    Sampler::new()
        .sample(&mut logits.to_vec(), p, &mut st, banned)
        .expect("finite")
        .token
}

#[test]
fn greedy_takes_the_first_maximum() {
    let p = SamplingParams::greedy();
    assert_eq!(sample_with(&[0.1, 3.0, 3.0, -1.0], &p, 0, &[]), 1);
}

#[test]
fn banned_and_biased_tokens() {
    let p = SamplingParams::greedy();
    assert_eq!(sample_with(&[0.1, 3.0, 2.0], &p, 0, &[1]), 2);
    let p = SamplingParams {
        logit_bias: vec![(0, 100.0)],
        ..SamplingParams::greedy()
    };
    assert_eq!(sample_with(&[0.1, 3.0, 2.0], &p, 0, &[]), 0);
}

#[test]
fn tight_filters_reduce_to_the_argmax() {
    let logits: Vec<f32> = (0..1000)
        .map(|i| ((i * 7919) % 1000) as f32 / 100.0)
        .collect();
    let best = kiln_engine::sample::argmax(&logits).expect("finite");
    for p in [
        SamplingParams {
            top_k: 1,
            temperature: 2.0,
            ..Default::default()
        },
        SamplingParams {
            top_p: 1e-6,
            temperature: 2.0,
            ..Default::default()
        },
        SamplingParams {
            min_p: 1.0,
            temperature: 2.0,
            ..Default::default()
        },
    ] {
        for seed in 0..20 {
            assert_eq!(sample_with(&logits, &p, seed, &[]), best, "{p:?}");
        }
    }
}

#[test]
fn seeded_streams_are_reproducible() {
    let logits: Vec<f32> = (0..500).map(|i| (i as f32 * 0.37).sin()).collect();
    let p = SamplingParams {
        temperature: 1.0,
        seed: Some(7),
        ..Default::default()
    };
    let run = |seed| {
        let mut st = SeqSamplingState::new(&p, seed, &[]);
        let mut s = Sampler::new();
        (0..50)
            .map(|_| {
                s.sample(&mut logits.clone(), &p, &mut st, &[])
                    .expect("finite")
                    .token
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(run(7), run(7));
    assert_ne!(run(7), run(8));
}

#[test]
fn draws_follow_the_distribution() {
    let probs = [0.5f32, 0.3, 0.2];
    let logits: Vec<f32> = probs.iter().map(|p| p.ln()).collect();
    let p = SamplingParams::default();
    let mut st = SeqSamplingState::new(&p, 1, &[]);
    let mut s = Sampler::new();
    let n = 20_000;
    let mut counts = [0usize; 3];
    for _ in 0..n {
        counts[s
            .sample(&mut logits.clone(), &p, &mut st, &[])
            .expect("finite")
            .token as usize] += 1;
    }
    for (c, want) in counts.iter().zip(probs) {
        let got = *c as f32 / n as f32;
        assert!((got - want).abs() < 0.02, "{counts:?}");
    }
}

#[test]
fn top_p_keeps_the_smallest_sufficient_set() {
    // Probabilities 0.5, 0.3, 0.2: top_p 0.7 keeps the first two only.
    let logits: Vec<f32> = [0.5f32, 0.3, 0.2].iter().map(|p| p.ln()).collect();
    let p = SamplingParams {
        top_p: 0.7,
        ..Default::default()
    };
    let mut st = SeqSamplingState::new(&p, 3, &[]);
    let mut s = Sampler::new();
    for _ in 0..2000 {
        let t = s
            .sample(&mut logits.clone(), &p, &mut st, &[])
            .expect("finite")
            .token;
        assert_ne!(t, 2);
    }
}

#[test]
fn penalties_push_repeated_tokens_down() {
    let logits = [2.0f32, 1.9, -1.0];
    let p = SamplingParams {
        repetition_penalty: 1.5,
        ..SamplingParams::greedy()
    };
    let mut st = SeqSamplingState::new(&p, 0, &[0]);
    let got = Sampler::new()
        .sample(&mut logits.to_vec(), &p, &mut st, &[])
        .expect("finite")
        .token;
    assert_eq!(got, 1, "2.0/1.5 < 1.9");

    let p = SamplingParams {
        frequency_penalty: 0.1,
        ..SamplingParams::greedy()
    };
    let mut st = SeqSamplingState::new(&p, 0, &[]);
    st.record(0);
    assert_eq!(
        Sampler::new()
            .sample(&mut logits.to_vec(), &p, &mut st, &[])
            .expect("finite")
            .token,
        0
    );
    st.record(0);
    assert_eq!(
        Sampler::new()
            .sample(&mut logits.to_vec(), &p, &mut st, &[])
            .expect("finite")
            .token,
        1
    );

    let p = SamplingParams {
        presence_penalty: 0.2,
        ..SamplingParams::greedy()
    };
    let mut st = SeqSamplingState::new(&p, 0, &[]);
    st.record(0);
    assert_eq!(
        Sampler::new()
            .sample(&mut logits.to_vec(), &p, &mut st, &[])
            .expect("finite")
            .token,
        1
    );
}

#[test]
fn logprobs_come_from_the_raw_distribution() {
    let logits = [1.0f32, 2.0, 3.0, 0.0];
    let p = SamplingParams {
        logprobs: Some(2),
        logit_bias: vec![(0, 10.0)],
        ..SamplingParams::greedy()
    };
    let mut st = SeqSamplingState::new(&p, 0, &[]);
    let s = Sampler::new()
        .sample(&mut logits.to_vec(), &p, &mut st, &[])
        .expect("finite");
    assert_eq!(s.token, 0, "bias decides the token");
    let lse = logits.iter().map(|l| l.exp()).sum::<f32>().ln();
    let lp = s.logprob.expect("asked for logprobs");
    assert!((lp - (1.0 - lse)).abs() < 1e-5, "logprob of the raw logit");
    assert_eq!(s.top_logprobs.len(), 2);
    assert_eq!(s.top_logprobs[0].0, 2);
    assert_eq!(s.top_logprobs[1].0, 1);
    assert!((s.top_logprobs[0].1 - (3.0 - lse)).abs() < 1e-5);
}

#[test]
fn a_non_finite_row_makes_no_token_however_it_is_sampled() {
    let mut logits = vec![0.5f32; 300];
    logits[7] = 2.0;
    let masked = [u32::MAX; 10];
    for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
        // The bad logit sits on a banned token: still refused, as the scan used to.
        logits[200] = bad;
        for p in [
            SamplingParams::greedy(),
            SamplingParams {
                temperature: 0.8,
                top_p: 0.9,
                ..Default::default()
            },
            SamplingParams {
                logprobs: Some(3),
                ..SamplingParams::greedy()
            },
        ] {
            let mut st = SeqSamplingState::new(&p, 1, &[]);
            let mut s = Sampler::new();
            for mask in [None, Some(&masked[..])] {
                let r = s.sample_masked(&mut logits.clone(), &p, &mut st, &[200], mask);
                assert!(r.is_err(), "{bad} {p:?} mask {}", mask.is_some());
            }
            assert!(s.logprobs_of(&logits, 7, 2).is_err());
        }
    }
    logits[200] = 0.5;
    let p = SamplingParams::greedy();
    let mut st = SeqSamplingState::new(&p, 1, &[]);
    let r = Sampler::new().sample(&mut logits, &p, &mut st, &[7]);
    assert_eq!(r.expect("finite").token, 0, "the banned best is skipped");
}
