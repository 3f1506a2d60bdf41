//! `kiln perplexity`: a model's perplexity over a text file, computed as llama.cpp's
//! `llama-perplexity` does (same chunking, BOS handling, scoring and output lines), so
//! the numbers compare.

use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context;
use kiln_model::perplexity::{perplexity, Estimate, PerplexityParams};
use kiln_model::{LoadOptions, Model};
use kiln_tokenizer::Tokenizer;

use super::GlobalArgs;

/// Arguments of `kiln perplexity`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Catalogue model name or alias, or a path to a .gguf file
    #[arg(long, short, default_value = kiln_catalog::DEFAULT_MODEL, env = "KILN_MODEL")]
    model: String,

    /// The text to score (UTF-8; one trailing newline is dropped, as llama.cpp does)
    #[arg(long, short, value_name = "PATH")]
    file: PathBuf,

    /// Tokens per chunk; the second half of each chunk is scored
    #[arg(long, short = 'c', default_value_t = 512)]
    ctx: usize,

    /// Score at most this many chunks [default: all whole chunks of the text]
    #[arg(long)]
    chunks: Option<usize>,

    /// Most tokens per forward pass (at most --ctx)
    #[arg(long, short, default_value_t = 512)]
    batch: usize,

    /// Threads doing the math [default: all cores]
    #[arg(long, short)]
    threads: Option<usize>,
}

/// Runs `kiln perplexity`.
pub fn run(global: &GlobalArgs, args: Args) -> anyhow::Result<()> {
    let mut params = PerplexityParams {
        ctx: args.ctx,
        batch: args.batch,
        max_chunks: args.chunks,
        bos: None,
    };
    params.check()?;
    let text = read_text(&args.file)?;
    let path = crate::load::gguf_path(global, &args.model)?;
    let mut load = LoadOptions::detect();
    load.pack_cache = global.pack_cache()?;
    if let Some(t) = args.threads {
        anyhow::ensure!(t > 0, "--threads must be at least 1");
        load.threads = t;
    }
    let model =
        Model::load(&path, &load).with_context(|| format!("cannot load {}", path.display()))?;
    let tokenizer = Tokenizer::from_gguf(model.gguf())
        .with_context(|| format!("cannot read the tokenizer of {}", path.display()))?;
    let tokens = tokenizer
        .encode(&text, true, false)
        .context("cannot tokenize the text")?;
    params.bos = tokenizer.adds_bos().then(|| tokenizer.bos_id()).flatten();
    params.validate(&model)?;
    let n_chunks = params.n_chunks(tokens.len())?;
    eprintln!(
        "perplexity: {} tokens; {n_chunks} chunks of {} tokens, batch {}, {} threads",
        tokens.len(),
        params.ctx,
        params.batch.min(params.ctx),
        load.threads
    );
    let start = Instant::now();
    let mut out = std::io::stdout().lock();
    let mut progress = |i: usize, e: &Estimate| {
        if i == 0 {
            eprintln!(
                "perplexity: {:.2} seconds per pass",
                start.elapsed().as_secs_f64()
            );
        }
        // Progress only: a closed stdout shows up at the final line.
        let _ = write!(out, "[{}]{:.4},", i + 1, e.ppl());
        let _ = out.flush();
    };
    let estimate = perplexity(&model, &tokens, &params, &mut progress)?;
    writeln!(out)?;
    match estimate.uncertainty() {
        Some(u) => writeln!(
            out,
            "Final estimate: PPL = {:.4} +/- {u:.5}",
            estimate.ppl()
        )?,
        None => writeln!(
            out,
            "Final estimate: PPL = {:.4} (no uncertainty: too few scored tokens)",
            estimate.ppl()
        )?,
    }
    out.flush()?;
    eprintln!(
        "perplexity: {} tokens scored in {:.2} s",
        estimate.count,
        start.elapsed().as_secs_f64()
    );
    Ok(())
}

/// The file's text without one trailing newline (llama.cpp's `-f` drops it too).
fn read_text(path: &std::path::Path) -> anyhow::Result<String> {
    let bytes = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    let mut text = String::from_utf8(bytes)
        .with_context(|| format!("{} is not UTF-8 text", path.display()))?;
    if text.ends_with('\n') {
        text.pop();
    }
    Ok(text)
}
