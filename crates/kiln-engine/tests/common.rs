//! Shared set-up for engine tests on the real default model.

#![allow(dead_code)]

use kiln_backend::KvDtype;
use kiln_engine::core::EngineCore;
use kiln_engine::{EngineConfig, EngineEvent, GenerateRequest};
use kiln_model::{LoadOptions, Model};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};

pub const MODEL: &str = "smollm2-135m-instruct";

pub fn model() -> Model {
    Model::load(kiln_testkit::gguf(MODEL), &LoadOptions::detect()).expect("model loads")
}

pub fn config(num_kv_blocks: usize) -> EngineConfig {
    config_with(num_kv_blocks, 1024)
}

pub fn config_with(num_kv_blocks: usize, max_model_len: usize) -> EngineConfig {
    EngineConfig {
        block_size: 16,
        num_kv_blocks,
        kv_dtype: KvDtype::F16,
        max_num_batched_tokens: 256,
        max_num_seqs: 64,
        background_step_tokens: 16,
        max_model_len,
        enable_prefix_caching: true,
        speculative: kiln_engine::SpecMode::Auto,
        kv_disk: None,
    }
}

pub fn core(num_kv_blocks: usize) -> EngineCore {
    EngineCore::new(model(), config(num_kv_blocks), vec![2]).expect("engine builds")
}

/// Varied prompts of different lengths (token ids of the real vocabulary).
pub fn prompt(i: usize, len: usize) -> Vec<u32> {
    (0..len)
        .map(|j| (1000 + (i * 7919 + j * 104_729) % 40_000) as u32)
        .collect()
}

/// Submits directly to a core (no thread) and returns the event receiver.
pub fn add(core: &mut EngineCore, id: u64, req: GenerateRequest) -> UnboundedReceiver<EngineEvent> {
    let (tx, rx) = unbounded_channel();
    core.add_request(id, req, tx, std::time::Instant::now())
        .expect("accepted");
    rx
}

/// Drains a receiver: tokens per completion index, and finish reasons.
pub fn collect(
    rx: &mut UnboundedReceiver<EngineEvent>,
) -> (Vec<Vec<u32>>, Vec<Option<kiln_engine::FinishReason>>) {
    let mut toks: Vec<Vec<u32>> = vec![];
    let mut fin = vec![];
    while let Ok(ev) = rx.try_recv() {
        match ev {
            EngineEvent::Token { index, token, .. } => {
                if toks.len() <= index {
                    toks.resize(index + 1, vec![]);
                }
                toks[index].push(token);
            }
            EngineEvent::Finished { index, reason, .. } => {
                if fin.len() <= index {
                    fin.resize(index + 1, None);
                }
                fin[index] = Some(reason);
            }
            EngineEvent::Scheduled { .. } | EngineEvent::PromptLogprob { .. } => {}
        }
    }
    (toks, fin)
}

pub fn run_to_completion(core: &mut EngineCore) {
    let mut guard = 0;
    while core.has_work() {
        core.step();
        guard += 1;
        assert!(guard < 100_000, "engine made no progress");
    }
}

/// Tokens of one request run alone on a fresh engine.
pub fn alone(req: GenerateRequest) -> Vec<u32> {
    let mut c = core(256);
    let mut rx = add(&mut c, 1, req);
    run_to_completion(&mut c);
    collect(&mut rx).0.remove(0)
}
