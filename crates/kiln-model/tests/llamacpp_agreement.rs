//! Kiln against llama.cpp on the same GGUF files: greedy tokens and teacher-forced logits.
//!
//! Fixtures (`tests/fixtures/llamacpp/*.json`) were recorded with llama.cpp (commit in each
//! file); see `scripts/fixtures/llamacpp_reference.py`.
//!
//! Kiln quantizes activations exactly as llama.cpp does and follows its f16 roundings, but
//! it does not reproduce every kernel's summation order or ggml's approximate `exp`.
//! Those ~1e-7 differences occasionally flip one 8-bit activation quant, and these small
//! quantized models amplify that to logit differences of ~0.1 on average (measured: mean
//! |diff| over llama.cpp's top-10 of 0.07–0.22, max 0.5–1.7). So the checks are:
//! - teacher-forced, Kiln's top-1 equals llama.cpp's at every position where llama.cpp's
//!   own top-1/top-2 margin is at least `NEAR_TIE`, and wherever they differ Kiln's choice
//!   is in llama.cpp's top 3;
//! - greedy continuations match for the first 32 tokens, except that a continuation may
//!   part ways at a near-tie by taking a token llama.cpp scored within `NEAR_TIE` of its
//!   own choice (its runner-up, or a third candidate in a three-way tie); at most
//!   `max_near_tie_splits` prompts per model may do so;
//! - mean |logit diff| ≤ `MEAN_LOGIT_DIFF` and max ≤ `MAX_LOGIT_DIFF`.

mod common;

use serde::Deserialize;

#[derive(Deserialize)]
struct Fixture {
    model: String,
    prompts: Vec<Prompt>,
}

#[derive(Deserialize)]
struct Prompt {
    prompt_tokens: Vec<u32>,
    greedy_tokens: Vec<u32>,
    top_logits: Vec<Vec<(u32, f32)>>,
}

impl Prompt {
    fn margin(&self, i: usize) -> f32 {
        self.top_logits[i][0].1 - self.top_logits[i][1].1
    }

    /// How far below llama.cpp's top logit it scored `token` at step `i` (None if the
    /// token isn't among the recorded candidates).
    fn gap(&self, i: usize, token: u32) -> Option<f32> {
        let top = self.top_logits[i][0].1;
        self.top_logits[i]
            .iter()
            .find(|(t, _)| *t == token)
            .map(|(_, l)| top - l)
    }
}

/// llama.cpp's own top-1/top-2 margin below which a different choice is numeric noise:
/// about 1.5× the largest model's mean |logit diff| (Gemma 3's, 0.20–0.22 with either
/// the packed or the `vec_dot` k-quant kernels, whose one decisive-looking disagreement
/// sits at a margin of 0.252 with both).
const NEAR_TIE: f32 = 0.3;
const MEAN_LOGIT_DIFF: f64 = 0.3;
const MAX_LOGIT_DIFF: f32 = 2.0;
const MATCH_PREFIX: usize = 32;

fn fixture(name: &str) -> Fixture {
    let path = format!(
        "{}/tests/fixtures/llamacpp/{name}.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(&path).expect("fixture exists");
    let f: Fixture = serde_json::from_str(&text).expect("fixture parses");
    assert_eq!(f.model, name);
    assert!(f.prompts.len() >= 8, "fixture has at least 8 prompts");
    f
}

fn check_greedy(name: &str, max_near_tie_splits: usize) {
    let model = common::load(name);
    let f = fixture(name);
    let mut splits = 0;
    for (i, p) in f.prompts.iter().enumerate() {
        let got = common::greedy(&model, &p.prompt_tokens, MATCH_PREFIX);
        let Some(at) = got.iter().zip(&p.greedy_tokens).position(|(a, b)| a != b) else {
            eprintln!("{name} prompt {i}: all {MATCH_PREFIX} greedy tokens agree");
            continue;
        };
        let gap = p.gap(at, got[at]);
        eprintln!(
            "{name} prompt {i}: agree for {at} tokens, then a near-tie (llama.cpp scored ours \
             {gap:?} below its choice)"
        );
        assert!(
            gap.is_some_and(|g| g < NEAR_TIE),
            "{name} prompt {i}: token {at} is {} but llama.cpp chose {}, scoring ours {gap:?} \
             lower (its top candidates: {:?})",
            got[at],
            p.greedy_tokens[at],
            &p.top_logits[at][..4.min(p.top_logits[at].len())]
        );
        splits += 1;
    }
    assert!(
        splits <= max_near_tie_splits,
        "{name}: {splits} prompts split at near-ties, at most {max_near_tie_splits} may"
    );
}

fn check_teacher_forced(name: &str) {
    let model = common::load(name);
    let f = fixture(name);
    let (mut positions, mut agree, mut decisive, mut decisive_agree) = (0, 0, 0, 0);
    let (mut sum_diff, mut n_diff, mut max_diff) = (0f64, 0usize, 0f32);
    for p in &f.prompts {
        let n_gen = p.greedy_tokens.len();
        let mut tokens = p.prompt_tokens.clone();
        tokens.extend_from_slice(&p.greedy_tokens[..n_gen - 1]);
        let mut kv = common::kv_for(&model, tokens.len().div_ceil(common::BLOCK_SIZE) + 1);
        let mut ws = kiln_model::Workspace::new();
        let mut seq = common::Seq::new(0, tokens.len());
        let all = common::step(&model, &mut kv, &mut ws, &mut [&mut seq], &[&tokens], true);
        let first = p.prompt_tokens.len() - 1;
        for (i, top) in p.top_logits.iter().enumerate() {
            let logits = &all[first + i];
            let ours = common::argmax(logits);
            positions += 1;
            agree += usize::from(ours == top[0].0);
            if p.margin(i) >= NEAR_TIE {
                decisive += 1;
                decisive_agree += usize::from(ours == top[0].0);
            }
            assert!(
                top[..3].iter().any(|&(id, _)| id == ours),
                "{name}: Kiln's top-1 {ours} is outside llama.cpp's top 3 {:?}",
                &top[..3]
            );
            for &(id, want) in top {
                let d = (logits[id as usize] - want).abs();
                sum_diff += f64::from(d);
                n_diff += 1;
                max_diff = max_diff.max(d);
            }
        }
    }
    let mean = sum_diff / n_diff as f64;
    eprintln!(
        "{name}: top-1 agreement {agree}/{positions} overall, {decisive_agree}/{decisive} where \
         llama.cpp's margin ≥ {NEAR_TIE}; |logit diff| mean {mean:.4}, max {max_diff:.4}"
    );
    assert_eq!(
        decisive_agree, decisive,
        "{name}: disagreement at a decisive position"
    );
    assert!(mean <= MEAN_LOGIT_DIFF, "{name}: mean |logit diff| {mean}");
    assert!(
        max_diff <= MAX_LOGIT_DIFF,
        "{name}: max |logit diff| {max_diff}"
    );
}

#[test]
fn smollm2_greedy_matches_llamacpp() {
    // Which near-ties tip is chaotic: with vec_dot 3 of 9 prompts split, with the packed
    // kernels (same integer work, another float summation order) 5 do, at gaps of
    // 0.09–0.18, while teacher-forced agreement stays the same (97.4% vs 97.7%).
    check_greedy("smollm2-135m-instruct", 5);
}

#[test]
fn smollm2_teacher_forced_logits_match_llamacpp() {
    check_teacher_forced("smollm2-135m-instruct");
}

#[test]
fn qwen2_greedy_matches_llamacpp() {
    check_greedy("qwen2.5-coder-0.5b-instruct", 3);
}

#[test]
fn qwen2_teacher_forced_logits_match_llamacpp() {
    check_teacher_forced("qwen2.5-coder-0.5b-instruct");
}

#[test]
fn gemma3_greedy_matches_llamacpp() {
    check_greedy("gemma3-270m", 5);
}

#[test]
fn gemma3_teacher_forced_logits_match_llamacpp() {
    check_teacher_forced("gemma3-270m");
}
