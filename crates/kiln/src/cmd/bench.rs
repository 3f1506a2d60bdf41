//! `kiln bench`: the serving benchmark (see the `kiln-bench` crate) against any
//! OpenAI-compatible server, alone (`serve`) or two side by side (`compare`); and the
//! compute kernels against the machine's own ceilings (`kernels`).

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context};
use kiln_bench::kernels::{run_kernels, KernelBenchConfig, ShapeSet};
use kiln_bench::{
    block_on, fetch_sharegpt, markdown_runs, parse_extra_body, plot, save_runs, sweep, Comparison,
    Endpoint, GgufTokenCounter, LengthFilter, RunConfig, RunReport, ServerCommand, ServerTarget,
    ShareGpt, Workload,
};

use super::GlobalArgs;
use crate::progress::BarProgress;

/// Arguments of `kiln bench`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: BenchCommand,
}

#[derive(Debug, clap::Subcommand)]
enum BenchCommand {
    /// Benchmark one running server
    Serve(ServeArgs),
    /// Benchmark two servers, one after the other, on the same workload; print B/A ratios
    Compare(CompareArgs),
    /// Time the matmul and f32 kernels against this machine's int8, FMA and memory
    /// ceilings, measured in the same run
    Kernels(KernelsArgs),
}

/// Arguments of `kiln bench kernels`.
#[derive(Debug, clap::Args)]
struct KernelsArgs {
    /// Threads for the ceilings and the matmuls [default: every core]
    #[arg(long, value_name = "N")]
    threads: Option<usize>,
    /// A short run: one shape per kernel, 1 and 8 tokens, brief timings, small buffers
    #[arg(long)]
    quick: bool,
    /// Write every measurement as JSON
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// MiB of distinct weights each matmul's calls rotate through, so batch-1 calls read
    /// weights from memory; 0 keeps one matrix in cache [default: 128; --quick: 8]
    #[arg(long, value_name = "MIB")]
    weight_set: Option<usize>,
    /// MiB streamed by the memory-bandwidth ceiling [default: 512; --quick: 64]
    #[arg(long, value_name = "MIB")]
    memory_buffer: Option<usize>,
    /// Which kernels at which shapes: `catalogue` (every packed type at the catalogue
    /// models' shapes) or `kquant` (the k-quants at the rows 1536–4096 wide of popular
    /// Q4_K_M files: Qwen2.5-1.5B, Llama 3.2 1B/3B, Llama 3.1 8B)
    #[arg(long, value_name = "SET", default_value = "catalogue")]
    shapes: String,
    /// Only these matmul kernels of the set, comma-separated, by the names the report
    /// gives them, e.g. `--kernels "q4_K packed,q6_K packed"` [default: all]
    #[arg(long, value_name = "NAMES", value_delimiter = ',')]
    kernels: Vec<String>,
}

/// Where the requests come from.
#[derive(Debug, clap::Args)]
struct WorkloadArgs {
    /// The requests: `sharegpt` (chat prompts, ShareGPT V3) or `code-edit` (Kiln source
    /// files of 60–200 lines to return with one function renamed)
    #[arg(long, value_name = "NAME", default_value = "sharegpt")]
    dataset: Dataset,
    /// Workload file: reused if it exists, else sampled and saved there
    #[arg(long, value_name = "FILE")]
    workload: Option<PathBuf>,
    /// Prompts to sample [default: 200]
    #[arg(long, value_name = "N")]
    num_prompts: Option<usize>,
    /// Seed of the workload's shuffle and of Poisson arrivals [default: 0]
    #[arg(long, value_name = "S")]
    seed: Option<u64>,
    /// Catalogue model whose tokenizer counts tokens [default: --model, if catalogued]
    #[arg(long, value_name = "NAME", conflicts_with = "gguf")]
    tokenizer_model: Option<String>,
    /// GGUF file whose tokenizer counts tokens
    #[arg(long, value_name = "PATH")]
    gguf: Option<PathBuf>,
    /// Drop prompts or outputs shorter than this many tokens
    #[arg(long, default_value_t = 4, value_name = "TOKENS")]
    min_tokens: usize,
    /// Drop prompts longer than this
    #[arg(long, default_value_t = 1024, value_name = "TOKENS")]
    max_prompt_tokens: usize,
    /// Drop pairs whose prompt + output is longer than this
    #[arg(long, default_value_t = 2048, value_name = "TOKENS")]
    max_total_tokens: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Dataset {
    Sharegpt,
    CodeEdit,
}

/// How requests are sent.
#[derive(Debug, clap::Args)]
struct RequestArgs {
    /// `model` field of the requests
    #[arg(long, value_name = "NAME")]
    model: String,
    /// API to call: chat (/v1/chat/completions) or completions (/v1/completions)
    #[arg(long, default_value = "chat", value_name = "API")]
    endpoint: Endpoint,
    /// Poisson arrival rate in requests/s [default: all released at once]
    #[arg(long, value_name = "R")]
    request_rate: Option<f64>,
    /// JSON object of extra keys for every request body, e.g. '{"cache_prompt":false}'
    #[arg(long, value_name = "JSON")]
    extra_body: Option<String>,
    /// Bearer token sent with every request
    #[arg(
        long,
        env = "KILN_BENCH_API_KEY",
        value_name = "KEY",
        hide_env_values = true
    )]
    api_key: Option<String>,
    /// Fail a request still streaming after this many seconds
    #[arg(long, value_name = "SECONDS")]
    request_timeout: Option<u64>,
    /// Skip the unmeasured warm-up request
    #[arg(long)]
    no_warmup: bool,
}

/// Where results go.
#[derive(Debug, clap::Args)]
struct OutputArgs {
    /// Write the results as JSON
    #[arg(long, value_name = "FILE")]
    output_json: Option<PathBuf>,
    /// Draw SVG plots (latency CDFs; throughput vs concurrency) into this directory
    #[arg(long, value_name = "DIR")]
    plot_dir: Option<PathBuf>,
    /// Write a Markdown table of the runs (for docs/BENCHMARKS.md)
    #[arg(long, value_name = "FILE")]
    markdown: Option<PathBuf>,
}

/// Arguments of `kiln bench serve`.
#[derive(Debug, clap::Args)]
struct ServeArgs {
    /// The server, e.g. http://127.0.0.1:8080
    #[arg(long, value_name = "URL")]
    base_url: String,
    /// Requests in flight at most; a list (1,8,32) runs one after another [default: no cap]
    #[arg(long, alias = "concurrency", value_delimiter = ',', value_name = "C")]
    max_concurrency: Vec<usize>,
    /// The server's process id, to measure its CPU time and peak memory
    #[arg(long, value_name = "PID")]
    server_pid: Option<u32>,
    /// Name of the server in tables and plots
    #[arg(long, default_value = "server")]
    label: String,
    #[command(flatten)]
    workload: WorkloadArgs,
    #[command(flatten)]
    request: RequestArgs,
    #[command(flatten)]
    output: OutputArgs,
}

/// Arguments of `kiln bench compare`.
#[derive(Debug, clap::Args)]
struct CompareArgs {
    /// Server A's address
    #[arg(long, value_name = "URL")]
    a_url: String,
    /// Server A's process id, if it is already running
    #[arg(long, value_name = "PID", conflicts_with = "a_cmd")]
    a_pid: Option<u32>,
    /// Shell command that starts server A (it is waited for, measured, then stopped)
    #[arg(long, value_name = "COMMAND")]
    a_cmd: Option<String>,
    /// Name of server A
    #[arg(long, default_value = "A")]
    a_label: String,
    /// Server B's address
    #[arg(long, value_name = "URL")]
    b_url: String,
    /// Server B's process id, if it is already running
    #[arg(long, value_name = "PID", conflicts_with = "b_cmd")]
    b_pid: Option<u32>,
    /// Shell command that starts server B
    #[arg(long, value_name = "COMMAND")]
    b_cmd: Option<String>,
    /// Name of server B
    #[arg(long, default_value = "B")]
    b_label: String,
    /// Concurrencies to run, in order, e.g. 1,8,32,64 [default: no cap]
    #[arg(
        long,
        alias = "max-concurrency",
        value_delimiter = ',',
        value_name = "C"
    )]
    concurrency: Vec<usize>,
    /// Seconds to wait for a spawned server to answer /health or /v1/models
    #[arg(long, default_value_t = 300, value_name = "SECONDS")]
    startup_timeout: u64,
    /// Directory for the logs of spawned servers [default: the temporary directory]
    #[arg(long, value_name = "DIR")]
    log_dir: Option<PathBuf>,
    #[command(flatten)]
    workload: WorkloadArgs,
    #[command(flatten)]
    request: RequestArgs,
    #[command(flatten)]
    output: OutputArgs,
}

/// Runs `kiln bench`.
pub fn run(global: &GlobalArgs, args: Args) -> anyhow::Result<()> {
    match args.command {
        BenchCommand::Serve(a) => serve(global, a),
        BenchCommand::Compare(a) => compare(global, a),
        BenchCommand::Kernels(a) => kernels(a),
    }
}

fn kernels(args: KernelsArgs) -> anyhow::Result<()> {
    let threads = args
        .threads
        .unwrap_or_else(KernelBenchConfig::default_threads);
    let mut config = KernelBenchConfig::new(threads, args.quick);
    config.shapes = ShapeSet::from_name(&args.shapes)
        .with_context(|| format!("--shapes {}: expected `catalogue` or `kquant`", args.shapes))?;
    let mib = |m: usize, flag: &str| {
        m.checked_mul(1 << 20)
            .with_context(|| format!("{flag} {m} MiB is too large"))
    };
    config.kernels = args.kernels.iter().map(|k| k.trim().to_owned()).collect();
    if let Some(m) = args.weight_set {
        config.weight_set_bytes = mib(m, "--weight-set")?;
    }
    if let Some(m) = args.memory_buffer {
        config.memory_bytes = mib(m, "--memory-buffer")?;
    }
    let report = run_kernels(&config)?;
    println!("{}", report.table());
    if let Some(path) = &args.json {
        report.save(path)?;
        println!("results: {}", path.display());
    }
    Ok(())
}

fn serve(global: &GlobalArgs, args: ServeArgs) -> anyhow::Result<()> {
    let workload = workload(global, &args.workload, &args.request.model)?;
    let config = run_config(&args.label, &args.base_url, &args.request, workload.seed)?;
    let target = ServerTarget::Running {
        base_url: args.base_url.clone(),
        pid: args.server_pid,
    };
    let runs = block_on(sweep(
        &target,
        &workload,
        &config,
        &concurrencies(&args.max_concurrency),
        &mut |r| println!("{}", r.table()),
    ))??;
    if let Some(path) = &args.output.output_json {
        match runs.as_slice() {
            [one] => one.save(path)?,
            many => save_runs(path, many)?,
        }
        println!("results: {}", path.display());
    }
    let markdown = markdown_runs(&runs);
    finish_outputs(&args.output, &runs, &markdown)
}

fn compare(global: &GlobalArgs, args: CompareArgs) -> anyhow::Result<()> {
    let log_dir = args.log_dir.clone().unwrap_or_else(std::env::temp_dir);
    // Made before any work, so a bad path fails now, not after side A's run.
    fs::create_dir_all(&log_dir)
        .with_context(|| format!("cannot create the log directory {}", log_dir.display()))?;
    let workload = workload(global, &args.workload, &args.request.model)?;
    let levels = concurrencies(&args.concurrency);
    let side = |label: &str, url: &str, pid, cmd: &Option<String>| -> anyhow::Result<_> {
        let config = run_config(label, url, &args.request, workload.seed)?;
        let target = match cmd {
            Some(command) => {
                let log_path = log_dir.join(format!("kiln-bench-{}.log", file_safe(label)));
                eprintln!(
                    "{label}: starting `{command}` (log: {})",
                    log_path.display()
                );
                ServerTarget::Spawn(ServerCommand {
                    command: command.clone(),
                    base_url: url.to_owned(),
                    log_path,
                    startup_timeout: Duration::from_secs(args.startup_timeout),
                })
            }
            None => ServerTarget::Running {
                base_url: url.to_owned(),
                pid,
            },
        };
        Ok((config, target))
    };
    let (a_config, a_target) = side(&args.a_label, &args.a_url, args.a_pid, &args.a_cmd)?;
    let (b_config, b_target) = side(&args.b_label, &args.b_url, args.b_pid, &args.b_cmd)?;
    let mut print = |r: &RunReport| println!("{}", r.table());
    let a_runs = block_on(sweep(&a_target, &workload, &a_config, &levels, &mut print))?
        .with_context(|| format!("benchmark of {} failed", args.a_label))?;
    let b_runs = block_on(sweep(&b_target, &workload, &b_config, &levels, &mut print))?
        .with_context(|| format!("benchmark of {} failed", args.b_label))?;
    let comparison = Comparison::new(a_runs, b_runs);
    println!("{}", comparison.ratio_text());
    if let Some(path) = &args.output.output_json {
        comparison.save(path)?;
        println!("results: {}", path.display());
    }
    let runs: Vec<RunReport> = comparison
        .pairs
        .iter()
        .flat_map(|p| [p.a.clone(), p.b.clone()])
        .collect();
    finish_outputs(&args.output, &runs, &comparison.markdown())
}

/// Prints the Markdown table (and writes it with `--markdown`) and draws the plots.
fn finish_outputs(out: &OutputArgs, runs: &[RunReport], markdown: &str) -> anyhow::Result<()> {
    println!("\n{markdown}");
    if let Some(path) = &out.markdown {
        fs::write(path, markdown).with_context(|| format!("cannot write {}", path.display()))?;
        println!("markdown: {}", path.display());
    }
    if let Some(dir) = &out.plot_dir {
        for path in plot::draw_all(dir, runs)? {
            println!("plot: {}", path.display());
        }
    }
    Ok(())
}

/// `[None]` (one run, no cap) when no concurrency was given.
fn concurrencies(list: &[usize]) -> Vec<Option<usize>> {
    if list.is_empty() {
        vec![None]
    } else {
        list.iter().map(|&c| Some(c)).collect()
    }
}

/// Settings of one server's runs; Poisson arrivals use the workload's seed.
fn run_config(label: &str, url: &str, req: &RequestArgs, seed: u64) -> anyhow::Result<RunConfig> {
    let mut config = RunConfig::new(label, url, &req.model);
    config.endpoint = req.endpoint;
    config.request_rate = req.request_rate;
    config.seed = seed;
    config.api_key.clone_from(&req.api_key);
    config.request_timeout = req.request_timeout.map(Duration::from_secs);
    config.warmup = !req.no_warmup;
    if let Some(extra) = &req.extra_body {
        config.extra_body = parse_extra_body(extra)?;
    }
    Ok(config)
}

/// Loads the `--workload` file if it exists; otherwise samples one (saving it there when
/// a path was given).
fn workload(global: &GlobalArgs, args: &WorkloadArgs, model: &str) -> anyhow::Result<Workload> {
    if let Some(path) = args.workload.as_deref().filter(|p| p.exists()) {
        let w = Workload::load(path)?;
        check_reused(path, &w, args)?;
        eprintln!(
            "workload: {} requests from {} (seed {}, tokens by {})",
            w.requests.len(),
            path.display(),
            w.seed,
            w.tokenizer
        );
        return Ok(w);
    }
    let cache = global.cache()?;
    let counter = match (&args.gguf, &args.tokenizer_model) {
        (Some(path), _) => GgufTokenCounter::open(path, None)?,
        (None, name) => {
            let name = name.as_deref().unwrap_or(model);
            let spec = kiln_catalog::find(name).with_context(|| {
                format!("no tokenizer for {name:?}: pass --tokenizer-model NAME or --gguf PATH")
            })?;
            let progress = BarProgress::new(spec.name);
            cache.ensure(spec, &progress)?;
            GgufTokenCounter::open(&cache.primary_path(spec), Some(spec.name))?
        }
    };
    if args.dataset == Dataset::CodeEdit {
        let w = Workload::code_edit(
            &counter,
            args.num_prompts.unwrap_or(16),
            args.seed.unwrap_or(0),
        )?;
        eprintln!(
            "workload: {} code edits (seed {}, tokens by {})",
            w.requests.len(),
            w.seed,
            w.tokenizer
        );
        return save_workload(w, args);
    }
    let data_path = fetch_sharegpt(&cache, &BarProgress::new("sharegpt-v3"))?;
    let data = ShareGpt::load(&data_path)?;
    let filter = LengthFilter {
        min_tokens: args.min_tokens,
        max_prompt_tokens: args.max_prompt_tokens,
        max_total_tokens: args.max_total_tokens,
    };
    let w = Workload::sample(
        &data.conversations,
        &counter,
        args.num_prompts.unwrap_or(200),
        args.seed.unwrap_or(0),
        filter,
    )?;
    eprintln!(
        "workload: {} requests sampled from {} conversations (seed {}, tokens by {})",
        w.requests.len(),
        data.conversations.len(),
        w.seed,
        w.tokenizer
    );
    save_workload(w, args)
}

/// Saves a sampled workload where `--workload` says, if it does.
fn save_workload(w: Workload, args: &WorkloadArgs) -> anyhow::Result<Workload> {
    if let Some(path) = &args.workload {
        w.save(path)?;
        eprintln!("workload saved to {}", path.display());
    }
    Ok(w)
}

/// Refuses sampling options that contradict a reused workload file.
fn check_reused(path: &Path, w: &Workload, args: &WorkloadArgs) -> anyhow::Result<()> {
    if let Some(n) = args.num_prompts.filter(|&n| n != w.requests.len()) {
        bail!(
            "{} holds {} requests, not the {n} asked for; remove it or drop --num-prompts",
            path.display(),
            w.requests.len()
        );
    }
    let code_edit = w.dataset == kiln_bench::CODE_EDIT_DATASET;
    if code_edit != (args.dataset == Dataset::CodeEdit) {
        bail!(
            "{} holds the {} workload, not the --dataset asked for; remove it or change \
             --dataset",
            path.display(),
            w.dataset
        );
    }
    if let Some(s) = args.seed.filter(|&s| s != w.seed) {
        bail!(
            "{} was sampled with seed {}, not {s}; remove it or drop --seed",
            path.display(),
            w.seed
        );
    }
    Ok(())
}

fn file_safe(label: &str) -> String {
    label
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect()
}
