//! `kiln run`: stream one completion to the terminal.

use std::io::Write;
use std::time::Instant;

use kiln_engine::output::TextEvent;
use kiln_engine::sample::SamplingParams;
use kiln_engine::{GenerateRequest, ServingModel, ServingOptions, StopConditions};

use super::GlobalArgs;
use crate::chat_prompt;

/// Arguments of `kiln run`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The prompt (sent as a user message through the chat template unless --raw)
    prompt: String,

    /// Catalogue model name or alias
    #[arg(long, short, default_value = kiln_catalog::DEFAULT_MODEL, env = "KILN_MODEL")]
    model: String,

    /// Feed the prompt as-is, without the model's chat template
    #[arg(long)]
    raw: bool,

    /// Most tokens to generate
    #[arg(long, default_value_t = 256)]
    max_tokens: usize,

    /// Sampling temperature (0 = greedy)
    #[arg(long, default_value_t = 0.0)]
    temperature: f32,

    #[arg(long, default_value_t = 1.0)]
    top_p: f32,

    #[arg(long, default_value_t = 0)]
    top_k: usize,

    /// Seed for reproducible sampling
    #[arg(long)]
    seed: Option<u64>,

    /// Keep generating past end-of-sequence tokens (for benchmarks)
    #[arg(long)]
    ignore_eos: bool,

    /// Don't print the timing summary to stderr
    #[arg(long, short)]
    quiet: bool,
}

/// Runs `kiln run`.
pub fn run(global: &GlobalArgs, args: Args) -> anyhow::Result<()> {
    let mut opts = ServingOptions::detect();
    opts.max_num_seqs = 1;
    opts.load.pack_cache = global.pack_cache()?;
    let model = crate::load::text_model(global, &args.model, &opts)?;
    let prompt = if args.raw || model.chat_template.is_none() {
        args.prompt.clone()
    } else {
        chat_prompt::render(&model, &[chat_prompt::user(&args.prompt)])?
    };
    let result = generate(&model, &prompt, &args);
    model.shutdown();
    result
}

fn generate(model: &ServingModel, prompt: &str, args: &Args) -> anyhow::Result<()> {
    let tokens = model.tokenizer.encode(prompt, true, true)?;
    let max_len = model.engine_config.max_model_len;
    let max_tokens = args.max_tokens.min(max_len.saturating_sub(tokens.len()));
    let req = GenerateRequest {
        prompt: tokens.clone(),
        sampling: SamplingParams {
            temperature: args.temperature,
            top_p: args.top_p,
            top_k: args.top_k,
            seed: args.seed,
            ..SamplingParams::default()
        },
        stop: StopConditions {
            max_tokens,
            ignore_eos: args.ignore_eos,
            ..StopConditions::default()
        },
        n: 1,
        priority: 0,
        cache_key: Vec::new(),
        adapter: None,
        constraint: None,
        speculative: true,
    };
    let start = Instant::now();
    let mut stream = model.generate(req, true)?;
    let mut first: Option<Instant> = None;
    let mut n_out = 0;
    let mut out = std::io::stdout().lock();
    while let Some(ev) = stream.blocking_next() {
        match ev {
            TextEvent::Delta {
                text, token_ids, ..
            } => {
                if first.is_none() && !token_ids.is_empty() {
                    first = Some(Instant::now());
                }
                out.write_all(text.as_bytes())?;
                out.flush()?;
            }
            TextEvent::Finished {
                completion_tokens, ..
            } => n_out = completion_tokens,
            TextEvent::Started { .. } | TextEvent::PromptLogprob { .. } => {}
        }
    }
    writeln!(out)?;
    out.flush()?;
    if !args.quiet {
        let end = Instant::now();
        let first = first.unwrap_or(end);
        let prefill = (first - start).as_secs_f64();
        let decode = (end - first).as_secs_f64();
        let rate = n_out.saturating_sub(1) as f64 / decode.max(1e-9);
        // Batch-1 decode streams every matmul weight once per token.
        let weights_gbs = rate * model.matmul_weight_bytes as f64 / 1e9;
        eprintln!(
            "prompt: {} tokens in {:.3} s ({:.1} tok/s); generation: {} tokens in {:.3} s \
             ({rate:.1} tok/s, weights read at {weights_gbs:.1} GB/s)",
            tokens.len(),
            prefill,
            tokens.len() as f64 / prefill.max(1e-9),
            n_out,
            decode,
        );
    }
    Ok(())
}
