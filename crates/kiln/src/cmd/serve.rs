//! `kiln serve`: the OpenAI-compatible HTTP server.
//!
//! With no arguments it serves the default model on 127.0.0.1:8000, fetching it first if
//! needed. Settings come from flags, then their environment variables, then the
//! `--config` file, then defaults. Several models share `--models-memory`; pinned ones
//! (and a lone model) load at start, the others on their first request. Embedding and
//! text-classification models are served beside text models, under the same budget.

mod config;
mod guard;
mod outbound;
mod services;
mod vectors;

use std::net::{SocketAddr, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use kiln_catalog::{ModelSpec, Task};
use kiln_host::lora::LoraConfig;
use kiln_server::{ApiKey, ModelSource, ServeOptions, ServerConfig, ServingOptions};

use self::config::{FileConfig, KeyEntry, Size};
use super::GlobalArgs;

const DEFAULT_HOST: &str = "127.0.0.1";
const DEFAULT_PORT: u16 = 8000;
const DEFAULT_SHUTDOWN_TIMEOUT_S: f64 = 30.0;
/// Share of the memory available at start that loaded models may take by default.
const DEFAULT_MODELS_MEMORY_SHARE: f64 = 0.8;
/// The budget when available memory is unknown.
const FALLBACK_MODELS_MEMORY: u64 = 8 << 30;
const USAGE_DB_FILE: &str = "usage.sqlite3";

/// Usage is state like the rest: it lives in the data directory, so servers on
/// different `--data-dir`s never share a meter. Without a data directory chosen, an
/// existing usage file in the Kiln home (where releases before this one kept it) is
/// used rather than started afresh beside it.
fn default_usage_db(cache: &kiln_catalog::Cache, data_dir: Option<&Path>) -> PathBuf {
    let legacy = cache.root().join(USAGE_DB_FILE);
    match data_dir {
        Some(dir) => dir.join(USAGE_DB_FILE),
        None if legacy.exists() => legacy,
        None => cache.root().join(DATA_DIR).join(USAGE_DB_FILE),
    }
}
/// The server's state directory in the Kiln home.
const DATA_DIR: &str = "data";
/// Disk each model's prefix cache may keep (`--kv-disk-size`).
const DEFAULT_KV_DISK: u64 = 2 << 30;
/// The prompt firewall's classifier when none is served.
const FIREWALL_MODEL: &str = "nanoguard-prompt-injection";

/// Arguments of `kiln serve`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Address to listen on [default: 127.0.0.1]
    #[arg(long, env = "KILN_HOST")]
    host: Option<String>,

    /// Port to listen on (0 picks a free one) [default: 8000]
    #[arg(long, env = "KILN_PORT")]
    port: Option<u16>,

    /// Model to serve (catalogue name or alias, or a local .gguf file, served under its
    /// file stem); repeat to serve several [default: smollm2-135m-instruct]
    #[arg(
        long = "model",
        short,
        value_name = "NAME",
        env = "KILN_MODEL",
        value_delimiter = ','
    )]
    models: Vec<String>,

    /// Model to load at start and never unload (it is served too); repeat for several.
    /// A lone served model is always pinned
    #[arg(
        long = "pin",
        value_name = "NAME",
        env = "KILN_PIN",
        value_delimiter = ','
    )]
    pins: Vec<String>,

    /// Memory all loaded models may take together (weights file plus KV cache), e.g.
    /// 8GiB; the least recently used idle unpinned model is unloaded to make room
    /// [default: 80% of the memory available at start]
    #[arg(long, value_name = "SIZE", env = "KILN_MODELS_MEMORY")]
    models_memory: Option<Size>,

    /// TOML file with any of these settings (flags override it)
    #[arg(long, value_name = "PATH")]
    config: Option<PathBuf>,

    /// Accepted API key (`Authorization: Bearer <key>`); repeat for several. Without
    /// any, the API is open
    #[arg(
        long = "api-key",
        value_name = "KEY",
        env = "KILN_API_KEY",
        hide_env_values = true
    )]
    api_keys: Vec<String>,

    /// Key for the admin endpoints (`GET /admin/usage`); repeat for several. Without
    /// one they are open when no API key is set, and closed when one is
    #[arg(
        long = "admin-key",
        value_name = "KEY",
        env = "KILN_ADMIN_KEY",
        hide_env_values = true
    )]
    admin_keys: Vec<String>,

    /// SQLite file where usage per API key and model is kept across restarts
    /// [default: usage.sqlite3 in the data directory (an existing one in the Kiln home
    /// is kept when no data directory is given)]
    #[arg(long, value_name = "PATH", env = "KILN_USAGE_DB")]
    usage_db: Option<PathBuf>,

    /// Directory of the server's state: stored responses (responses.sqlite3), kept
    /// across restarts [default: data/ in the Kiln home directory]
    #[arg(long, value_name = "DIR", env = "KILN_DATA_DIR")]
    data_dir: Option<PathBuf>,

    /// A host name (`mcp.internal`, `*.corp.example`) or network (`10.1.0.0/16`,
    /// `127.0.0.1/32`) that server-side fetches made for clients (MCP servers) may
    /// reach although it is loopback, private, link-local or metadata; repeatable
    /// [default: none: such addresses are refused]
    #[arg(long, value_name = "HOST|CIDR")]
    outbound_allow: Vec<String>,

    /// Responses one API key may keep stored (`store: true`); more get 400 until some
    /// are deleted [default: 10000]
    #[arg(long, value_name = "N")]
    max_stored_responses: Option<u64>,

    /// Shortest time between two runs of an agent's cron schedule, in seconds; a
    /// pattern that fires more often is refused [default: 60]
    #[arg(long, value_name = "SECS")]
    agent_min_interval: Option<u64>,

    /// Schedules one agent may have pending [default: 100]
    #[arg(long, value_name = "N")]
    agent_max_schedules: Option<usize>,

    /// Largest file `POST /v1/files` takes, e.g. 512MiB; larger ones get 413
    /// [default: 512MiB]
    #[arg(long, value_name = "SIZE")]
    max_file_size: Option<Size>,

    /// Seconds a file upload may take to arrive [default: 600]
    #[arg(long, value_name = "SECS")]
    upload_timeout: Option<f64>,

    /// Batch lines (OpenAI batches and queued Workers AI requests) in flight on this
    /// node, all batches together; they run at low priority [default: 48]
    #[arg(long, value_name = "N")]
    batch_concurrency: Option<usize>,

    #[command(flatten)]
    vectors: vectors::VectorArgs,

    #[command(flatten)]
    guard: guard::GuardArgs,

    /// KV-cache memory per model, e.g. 512MiB, 2GiB or a byte count
    /// [default: a quarter of available memory, at most 4GiB]
    #[arg(long, value_name = "SIZE")]
    kv_cache_memory: Option<Size>,

    /// Disk each model's prefix cache may keep under the data directory (kv/), so
    /// prompts seen before a restart, or evicted from RAM, are read back instead of
    /// recomputed; 0 turns the disk tier off [default: 2GiB]
    #[arg(long, value_name = "SIZE")]
    kv_disk_size: Option<Size>,

    /// Element type of the KV cache: f16, f32 or q8_0 (about half of f16's memory)
    /// [default: f16]
    #[arg(long, value_name = "TYPE")]
    kv_cache_dtype: Option<String>,

    /// Most sequences running at once per model [default: 64]
    #[arg(long)]
    max_num_seqs: Option<usize>,

    /// Tokens per engine step for batch lines while interactive requests are about, so
    /// an interactive request waits little for the step in flight [default: 8]
    #[arg(long, value_name = "N")]
    batch_step_tokens: Option<usize>,

    /// Token budget of one engine step [default: 512]
    #[arg(long)]
    max_num_batched_tokens: Option<usize>,

    /// Speculative decoding from each sequence's own prompt and output: `auto` drafts
    /// while the measured step times say it pays (batch 1 to a few sequences), `off`
    /// never; the output is the same either way [default: auto]
    #[arg(long, value_name = "MODE")]
    speculative: Option<config::Speculative>,

    /// Longest prompt plus completion [default: the model's context, capped by the KV cache]
    #[arg(long)]
    max_model_len: Option<usize>,

    /// Sequences that may wait per model beyond the running ones; more get 429 [default: 1024]
    #[arg(long)]
    max_queued: Option<usize>,

    /// Where this node runs, e.g. an IATA-style code (ams); sent in `x-kiln-colo` for
    /// the router's per-colo view
    #[arg(long, value_name = "NAME", env = "KILN_COLO")]
    colo: Option<String>,

    /// Seconds to let in-flight requests finish after SIGTERM/Ctrl-C [default: 30]
    #[arg(long, value_name = "SECS")]
    shutdown_timeout: Option<f64>,

    /// Largest request body, e.g. 4MiB; larger ones get 413 [default: 4MiB]
    #[arg(long, value_name = "SIZE")]
    max_body_size: Option<Size>,

    /// Directory of LoRA adapters (PEFT format), one per subdirectory, named by it;
    /// requests use one with `model: "<model>:<adapter>"` or `lora: "<adapter>"`.
    /// Repeat for several
    #[arg(long = "lora-dir", value_name = "DIR")]
    lora_dirs: Vec<PathBuf>,

    /// A LoRA adapter by name: NAME=PATH to its directory; repeat for several
    #[arg(long = "lora", value_name = "NAME=PATH")]
    loras: Vec<String>,

    /// Most LoRA adapters kept loaded; the least recently used is dropped [default: 8]
    #[arg(long)]
    max_loras: Option<usize>,

    /// Key for `/metrics` and `/ready` (an admin key works too); repeat for several.
    /// Without one they are open
    #[arg(
        long = "metrics-key",
        value_name = "KEY",
        env = "KILN_METRICS_KEY",
        hide_env_values = true
    )]
    metrics_keys: Vec<String>,

    #[command(flatten)]
    http: super::HttpArgs,
}

/// Runs `kiln serve` until SIGTERM or Ctrl-C.
pub fn run(global: &GlobalArgs, args: Args) -> anyhow::Result<()> {
    let file = match &args.config {
        Some(p) => FileConfig::load(p)?,
        None => FileConfig::default(),
    };
    let (settings, models) = settings(global, args, file)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("kiln-http")
        .build()
        .context("cannot start the async runtime")?;
    let result = runtime.block_on(async move {
        let addr = settings.addr;
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("cannot listen on {addr}"))?;
        let (state, _data_dir_lock) = services::build(settings.server, models, &settings.services)?;
        kiln_server::serve(
            listener,
            state,
            settings.serve,
            kiln_server::shutdown_signal(),
        )
        .await
        .context("server failed")
    });
    // Tasks abandoned at the shutdown deadline must not hold the exit up.
    runtime.shutdown_timeout(Duration::from_secs(1));
    result
}

/// Everything `kiln serve` was asked for, merged.
struct Settings {
    addr: SocketAddr,
    serve: ServeOptions,
    server: ServerConfig,
    services: services::ServiceOptions,
}

/// Merges flags over the file over defaults, and fetches the models.
fn settings(
    global: &GlobalArgs,
    args: Args,
    file: FileConfig,
) -> anyhow::Result<(Settings, Vec<ModelSource>)> {
    let (vectors, vector_remote) = vectors::settings(&args.vectors, &file)?;
    let guard = guard::settings(&args.guard, &file)?;
    let (mcp, mcp_per_key) = outbound::mcp_settings(&args.outbound_allow, &file)?;
    let firewall_on = guard.firewall.any_on();
    let host = args
        .host
        .or(file.host)
        .unwrap_or_else(|| DEFAULT_HOST.into());
    let port = args.port.or(file.port).unwrap_or(DEFAULT_PORT);
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    let addr = (bare, port)
        .to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .with_context(|| {
            format!(
                "invalid --host {host:?}: expected an address such as 127.0.0.1, ::1 or localhost"
            )
        })?;
    let shutdown_timeout = args
        .shutdown_timeout
        .or(file.shutdown_timeout)
        .unwrap_or(DEFAULT_SHUTDOWN_TIMEOUT_S);
    anyhow::ensure!(
        shutdown_timeout.is_finite() && shutdown_timeout >= 0.0,
        "invalid shutdown timeout {shutdown_timeout}: expected seconds >= 0"
    );
    let defaults = ServerConfig::default();
    let file_keys = file.api_keys.map(|keys| {
        let parts = keys.into_iter().map(KeyEntry::into_parts);
        parts.map(|(k, label)| ApiKey::new(k, label)).collect()
    });
    let flag_keys = args.api_keys.into_iter().map(ApiKey::from).collect();
    let api_keys: Vec<ApiKey> = super::keys_from(flag_keys, file_keys);
    let admin_keys: Vec<ApiKey> = super::keys_from(args.admin_keys, file.admin_keys)
        .into_iter()
        .map(ApiKey::from)
        .collect();
    let metrics_keys: Vec<ApiKey> = super::keys_from(args.metrics_keys, file.metrics_keys)
        .into_iter()
        .map(ApiKey::from)
        .collect();
    let (limits, cors) = args.http.over(file.http)?;
    let models_memory = match args.models_memory.or(file.models_memory) {
        Some(s) => s.0,
        None => kiln_engine::serving::available_memory().map_or(FALLBACK_MODELS_MEMORY, |m| {
            (m as f64 * DEFAULT_MODELS_MEMORY_SHARE) as u64
        }),
    };
    anyhow::ensure!(models_memory > 0, "--models-memory must be more than 0");
    let lora = lora_config(
        args.lora_dirs,
        args.loras,
        args.max_loras,
        file.lora_dirs,
        file.loras,
        file.max_loras,
    )?;
    let colo = config::colo(args.colo, file.colo)?;
    let server = ServerConfig {
        colo,
        api_keys,
        admin_keys,
        metrics_keys,
        body_timeout: limits.body_timeout,
        upload_timeout: match args.upload_timeout.or(file.upload_timeout) {
            Some(secs) => {
                anyhow::ensure!(
                    secs.is_finite() && secs > 0.0,
                    "--upload-timeout must be a positive number of seconds"
                );
                Duration::from_secs_f64(secs)
            }
            None => defaults.upload_timeout,
        },
        cors,
        models_memory: Some(models_memory),
        lora,
        guard,
        max_queued: args
            .max_queued
            .or(file.max_queued)
            .unwrap_or(defaults.max_queued),
        body_limit: args
            .max_body_size
            .or(file.max_body_size)
            .map_or(defaults.body_limit, |s| {
                usize::try_from(s.0).unwrap_or(usize::MAX)
            }),
    };
    anyhow::ensure!(
        server
            .api_keys
            .iter()
            .chain(&server.admin_keys)
            .chain(&server.metrics_keys)
            .all(|k| !k.key.trim().is_empty()),
        "API, admin and metrics keys must not be empty"
    );

    let mut engine = ServingOptions::detect();
    engine.load.pack_cache = global.pack_cache()?;
    if let Some(kv) = args.kv_cache_memory.or(file.kv_cache_memory) {
        engine.kv_cache_bytes =
            Some(usize::try_from(kv.0).context("--kv-cache-memory is too large")?);
    }
    if let Some(name) = args.kv_cache_dtype.or(file.kv_cache_dtype) {
        engine.kv_dtype = kiln_backend::KvDtype::from_name(&name)
            .with_context(|| format!("--kv-cache-dtype {name:?} is not one of f16, f32, q8_0"))?;
    }
    if let Some(n) = args.max_num_seqs.or(file.max_num_seqs) {
        anyhow::ensure!(n >= 1, "--max-num-seqs must be at least 1");
        engine.max_num_seqs = n;
    }
    if let Some(n) = args.batch_step_tokens.or(file.batch_step_tokens) {
        anyhow::ensure!(n >= 1, "--batch-step-tokens must be at least 1");
        engine.background_step_tokens = n;
    }
    if let Some(n) = args.max_num_batched_tokens.or(file.max_num_batched_tokens) {
        anyhow::ensure!(n >= 1, "--max-num-batched-tokens must be at least 1");
        engine.max_num_batched_tokens = n;
    }
    if let Some(mode) = args.speculative.or(file.speculative) {
        engine.speculative = mode.into();
    }
    if let Some(n) = args.max_model_len.or(file.max_model_len) {
        anyhow::ensure!(n >= 2, "--max-model-len must be at least 2");
        engine.max_model_len = Some(n);
    }

    // (name, pinned): flags replace the file's list; `--pin` adds to either.
    let mut names: Vec<(String, bool)> = if args.models.is_empty() {
        let entries = file.models.unwrap_or_default();
        entries
            .iter()
            .map(|m| (m.name().to_string(), m.pin()))
            .collect()
    } else {
        args.models.into_iter().map(|n| (n, false)).collect()
    };
    names.extend(args.pins.into_iter().map(|n| (n, true)));
    if names.is_empty() {
        names.push((kiln_catalog::DEFAULT_MODEL.to_string(), false));
    }
    // The firewall's classifier, served beside the rest (loaded on first use).
    let classifies =
        |n: &str| kiln_catalog::find(n).is_ok_and(|s| s.task == Task::TextClassification);
    if firewall_on && !names.iter().any(|(n, _)| classifies(n)) {
        names.push((FIREWALL_MODEL.to_string(), false));
    }
    let cache = global.cache()?;
    let chosen_data_dir = args.data_dir.or(file.data_dir);
    let usage_db = args.usage_db.or(file.usage_db);
    let usage_db = usage_db.unwrap_or_else(|| default_usage_db(&cache, chosen_data_dir.as_deref()));
    let data_dir = chosen_data_dir.unwrap_or_else(|| cache.root().join(DATA_DIR));
    let kv_disk = args
        .kv_disk_size
        .or(file.kv_disk_size)
        .map_or(DEFAULT_KV_DISK, |s| s.0);
    engine.kv_disk = (kv_disk > 0).then(|| (data_dir.join("kv"), kv_disk));
    let mut specs: Vec<(&'static ModelSpec, bool)> = Vec::new();
    let mut models = Vec::with_capacity(names.len());
    for (name, pin) in &names {
        if let Some(source) = crate::load::local_gguf(name, *pin, &engine)? {
            models.push(source);
            continue;
        }
        let spec = kiln_catalog::find(name)?;
        anyhow::ensure!(
            spec.task != Task::Dataset,
            "{} is a data set, not a model; `kiln serve` serves text-generation, embeddings \
             and text-classification models",
            spec.name
        );
        match specs.iter_mut().find(|(s, _)| s.name == spec.name) {
            Some((_, p)) => *p |= pin,
            None => specs.push((spec, *pin)),
        }
    }
    let mut responses = kiln_server::ResponseLimits {
        mcp,
        mcp_per_key,
        ..Default::default()
    };
    if let Some(n) = args.max_stored_responses.or(file.max_stored_responses) {
        anyhow::ensure!(n > 0, "--max-stored-responses must be at least 1");
        responses.max_stored_per_key = n;
    }
    let mut agent_schedules = kiln_server::AgentScheduleLimits::default();
    if let Some(s) = args.agent_min_interval.or(file.agent_min_interval) {
        anyhow::ensure!(s >= 1, "--agent-min-interval must be at least 1 second");
        agent_schedules.min_interval_s = s;
    }
    if let Some(n) = args.agent_max_schedules.or(file.agent_max_schedules) {
        anyhow::ensure!(n >= 1, "--agent-max-schedules must be at least 1");
        agent_schedules.max_per_agent = n;
    }
    let mut files = kiln_files::Limits::default();
    if let Some(size) = args.max_file_size.or(file.max_file_size) {
        anyhow::ensure!(size.0 > 0, "--max-file-size must be at least 1 byte");
        files.max_file_bytes = size.0;
    }
    let mut batches = kiln_batch::Limits::default();
    if let Some(n) = args.batch_concurrency.or(file.batch_concurrency) {
        anyhow::ensure!(n > 0, "--batch-concurrency must be at least 1");
        batches.concurrency = n;
    }
    for (spec, pin) in specs {
        models.push(crate::load::catalogue_source(&cache, spec, pin, &engine)?);
    }
    let settings = Settings {
        addr,
        serve: ServeOptions {
            limits,
            shutdown_timeout: Duration::from_secs_f64(shutdown_timeout),
        },
        server,
        services: services::ServiceOptions {
            usage_db: Some(usage_db),
            data_dir: Some(data_dir),
            responses,
            agent_schedules,
            files,
            batches,
            vectors,
            vector_remote,
        },
    };
    Ok((settings, models))
}

/// LoRA settings: flags replace the file's lists; `--lora` entries must be adapters.
fn lora_config(
    dirs: Vec<PathBuf>,
    named: Vec<String>,
    max: Option<usize>,
    file_dirs: Option<Vec<PathBuf>>,
    file_named: Option<std::collections::BTreeMap<String, PathBuf>>,
    file_max: Option<usize>,
) -> anyhow::Result<LoraConfig> {
    let dirs = if dirs.is_empty() {
        file_dirs.unwrap_or_default()
    } else {
        dirs
    };
    for d in &dirs {
        anyhow::ensure!(d.is_dir(), "--lora-dir {} is not a directory", d.display());
    }
    let named: Vec<(String, PathBuf)> = if named.is_empty() {
        file_named.unwrap_or_default().into_iter().collect()
    } else {
        named
            .iter()
            .map(|e| {
                let (n, p) = e
                    .split_once('=')
                    .with_context(|| format!("--lora {e:?}: expected NAME=PATH"))?;
                Ok((n.trim().to_string(), PathBuf::from(p.trim())))
            })
            .collect::<anyhow::Result<_>>()?
    };
    for (n, p) in &named {
        anyhow::ensure!(
            !n.is_empty() && !n.contains(':'),
            "--lora name {n:?} must be non-empty and without ':'"
        );
        anyhow::ensure!(
            kiln_host::lora::is_adapter_dir(p),
            "--lora {n}={}: no adapter_config.json there",
            p.display()
        );
    }
    let max_loaded = max.or(file_max).unwrap_or(LoraConfig::default().max_loaded);
    anyhow::ensure!(max_loaded >= 1, "--max-loras must be at least 1");
    Ok(LoraConfig {
        dirs,
        named,
        max_loaded,
    })
}
