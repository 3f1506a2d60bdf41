//! `kiln`: command-line front end of the Kiln inference engine.
//!
//! This file only parses arguments and dispatches; each subcommand lives in
//! `cmd/<name>.rs` with an `Args` struct and a `run(&GlobalArgs, Args)` function.

mod chat_prompt;
mod cmd;
mod load;
mod logging;
mod progress;

use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};

use crate::cmd::GlobalArgs;

#[derive(Debug, Parser)]
#[command(
    name = "kiln",
    version,
    about = "Run small language models locally",
    propagate_version = true
)]
struct Cli {
    #[command(flatten)]
    global: GlobalArgs,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Fetch models from the catalogue into the local cache
    Pull(cmd::pull::Args),
    /// List the catalogue and what is cached
    Models(cmd::models::Args),
    /// Benchmark OpenAI-compatible servers (serving throughput and latency) and the kernels
    Bench(Box<cmd::bench::Args>),
    /// Serve models over an OpenAI-compatible HTTP API
    Serve(Box<cmd::serve::Args>),
    /// Route requests across many `kiln serve` nodes as one service
    Route(Box<cmd::route::Args>),
    /// Stream one completion to the terminal
    Run(cmd::run::Args),
    /// Chat interactively using the model's chat template
    Chat(cmd::chat::Args),
    /// Measure a model's perplexity over a text file (as llama.cpp's llama-perplexity)
    Perplexity(cmd::perplexity::Args),
    /// Run a JSONL file of requests as a batch on a server and write the results
    Batch(cmd::batch::Args),
}

/// `KILN_CPU=scalar|avx2|avx512` runs that instruction set's kernels instead of the
/// fastest this CPU has (to measure the AVX2 path on an AVX-512 machine, say).
fn force_isa_from_env() -> anyhow::Result<()> {
    let Ok(name) = std::env::var("KILN_CPU") else {
        return Ok(());
    };
    let isa = kiln_kernels::Isa::from_name(name.trim()).context("KILN_CPU")?;
    kiln_kernels::Isa::force(isa).context("KILN_CPU")
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    logging::init(cli.global.log_format);
    if let Err(e) = force_isa_from_env() {
        eprintln!("error: {e:#}");
        return ExitCode::FAILURE;
    }
    let result = match cli.command {
        Command::Pull(args) => cmd::pull::run(&cli.global, args),
        Command::Models(args) => cmd::models::run(&cli.global, args),
        Command::Bench(args) => cmd::bench::run(&cli.global, *args),
        Command::Serve(args) => cmd::serve::run(&cli.global, *args),
        Command::Route(args) => cmd::route::run(&cli.global, *args),
        Command::Run(args) => cmd::run::run(&cli.global, args),
        Command::Chat(args) => cmd::chat::run(&cli.global, args),
        Command::Perplexity(args) => cmd::perplexity::run(&cli.global, args),
        Command::Batch(args) => cmd::batch::run(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
