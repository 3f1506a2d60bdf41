//! Engine throughput and host overhead at several concurrencies, on the real default model.
//!
//! `cargo run --release -p kiln-engine --example throughput -- 1,8,32,64 [MODEL]`
//! (a catalogue name; the default model if omitted)
//!
//! Each run submits `concurrency` greedy requests (96-token prompts, 64 new tokens, EOS
//! ignored) at once straight to an `EngineCore` (no HTTP), steps until all finish, and
//! reports generated tokens per second and the share of step time spent outside the
//! model's forward pass (scheduling, batch building, sampling, bookkeeping), then the
//! per-phase profile of all steps (matmul, attention, other ops, sampling, ...).

use std::time::Instant;

use kiln_backend::KvDtype;
use kiln_engine::core::EngineCore;
use kiln_engine::{EngineConfig, GenerateRequest, StopConditions};
use kiln_model::{LoadOptions, Model};
use tokio::sync::mpsc::unbounded_channel;

const PROMPT: usize = 96;
const NEW_TOKENS: usize = 64;

fn main() {
    let levels: Vec<usize> = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "1,8,32,64".into())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    let name = std::env::args()
        .nth(2)
        .unwrap_or_else(|| "smollm2-135m-instruct".into());
    let path = kiln_testkit::gguf(&name);
    println!("| concurrency | generated tok/s | steps | host overhead | profile |");
    println!("|---|---|---|---|---|");
    for &c in &levels {
        let model = Model::load(&path, &LoadOptions::detect()).expect("model loads");
        let config = EngineConfig {
            block_size: 16,
            num_kv_blocks: c * (PROMPT + NEW_TOKENS).div_ceil(16) + 16,
            kv_dtype: KvDtype::F16,
            max_num_batched_tokens: 512,
            max_num_seqs: c.max(1),
            background_step_tokens: 16,
            max_model_len: PROMPT + NEW_TOKENS,
            enable_prefix_caching: false,
            speculative: kiln_engine::SpecMode::Off,
            kv_disk: None,
        };
        let mut core = EngineCore::new(model, config, vec![2]).expect("engine");
        let mut rxs = Vec::new();
        for i in 0..c {
            let (tx, rx) = unbounded_channel();
            let prompt = (0..PROMPT)
                .map(|j| (1000 + (i * 7919 + j * 104_729) % 40_000) as u32)
                .collect();
            let req = GenerateRequest {
                stop: StopConditions {
                    max_tokens: NEW_TOKENS,
                    ignore_eos: true,
                    ..StopConditions::default()
                },
                ..GenerateRequest::greedy(prompt, NEW_TOKENS)
            };
            core.add_request(i as u64, req, tx, Instant::now())
                .expect("accepted");
            rxs.push(rx);
        }
        let start = Instant::now();
        while core.has_work() {
            core.step();
            for rx in &mut rxs {
                while rx.try_recv().is_ok() {}
            }
        }
        let secs = start.elapsed().as_secs_f64();
        let s = core.stats.snapshot();
        let profile = s.profile();
        let total: f64 = profile.iter().map(|p| p.time.as_secs_f64()).sum();
        let shares: Vec<String> = profile
            .iter()
            .map(|p| format!("{} {:.1}%", p.phase, 100.0 * p.time.as_secs_f64() / total))
            .collect();
        println!(
            "| {c} | {:.1} | {} | {:.2}% | {} |",
            s.generation_tokens as f64 / secs,
            s.steps,
            100.0 * s.host_overhead(),
            shares.join(", ")
        );
    }
}
