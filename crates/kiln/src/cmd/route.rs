//! `kiln route`: many `kiln serve` nodes as one OpenAI-compatible service (see the
//! `kiln-router` crate).
//!
//! Nodes come from `--node` (repeatable), `--dns NAME:PORT` (every address the name
//! resolves to, re-resolved every `--discovery-interval`), and the `nodes` / `dns`
//! lists of the `--config` file, which is re-read at the same interval. Flags override
//! the file, which overrides defaults. The file's `[[rules]]` (routing by rule, first
//! match wins) are re-read every second and swapped in whole when they change.
//!
//! ```toml
//! host = "0.0.0.0"
//! port = 8080
//! nodes = ["http://10.0.0.1:8000@colo=ams", { url = "http://10.0.0.2:8000", colo = "fra", name = "n2" }]
//! dns = ["kiln-nodes.default.svc.cluster.local:8000@colo=ams"]
//! replicas = 2
//! load_factor = 1.25
//! health_interval = 2
//! discovery_interval = 10
//! data_dir = "/var/lib/kiln-router"
//! [upstream]
//! url = "https://central.example.com/v1"
//! api_key = "sk-..."
//! [models."qwen2.5-coder-0.5b-instruct"]
//! replicas = 3
//! [[rules]]
//! name = "long-prompts"
//! min_prompt_tokens = 2000
//! route = "central"
//! ```

use std::net::ToSocketAddrs;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use kiln_router::config_file::{seconds, ByteSize};
use kiln_router::{DnsSpec, FileConfig, NodeSpec, RouterConfig, Upstream};

use super::GlobalArgs;

const DEFAULT_HOST: &str = "127.0.0.1";
const DEFAULT_PORT: u16 = 8080;

/// Arguments of `kiln route`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Address to listen on [default: 127.0.0.1]
    #[arg(long)]
    host: Option<String>,

    /// Port to listen on (0 picks a free one) [default: 8080]
    #[arg(long)]
    port: Option<u16>,

    /// TOML file with any of these settings; its `nodes` and `dns` are re-read every
    /// --discovery-interval, its routing `[[rules]]` every second
    #[arg(long, value_name = "PATH")]
    config: Option<PathBuf>,

    /// A node's base URL, optionally labelled: http://10.0.0.1:8000@colo=ams,name=n1
    /// (a name keeps its placement when its address changes); repeat for each node
    #[arg(long = "node", value_name = "URL")]
    nodes: Vec<String>,

    /// A DNS name whose every address is a node (a Kubernetes headless service):
    /// NAME:PORT[@colo=X]; repeat for several
    #[arg(long = "dns", value_name = "NAME:PORT")]
    dns: Vec<String>,

    /// Nodes per model (the shard size k) [default: 2]
    #[arg(long)]
    replicas: Option<usize>,

    /// Shard size of one model: NAME=K; repeat for several
    #[arg(long = "model-replicas", value_name = "NAME=K")]
    model_replicas: Vec<String>,

    /// Bounded loads: no node holds more than load-factor x the mean number of
    /// models per node [default: 1.25]
    #[arg(long)]
    load_factor: Option<f64>,

    /// Ring points per node [default: 160]
    #[arg(long)]
    vnodes: Option<u32>,

    /// Most nodes one request is tried on [default: 3]
    #[arg(long)]
    max_attempts: Option<usize>,

    /// Seconds between health, load and catalogue checks of each node [default: 2]
    #[arg(long, value_name = "SECS")]
    health_interval: Option<f64>,

    /// Seconds between re-reads of the config file and DNS [default: 10]
    #[arg(long, value_name = "SECS")]
    discovery_interval: Option<f64>,

    /// Seconds to wait for a TCP connection to a node [default: 2]
    #[arg(long, value_name = "SECS")]
    connect_timeout: Option<f64>,

    /// Seconds a node's response may stay silent before it counts as failed
    /// [default: 300]
    #[arg(long, value_name = "SECS")]
    idle_timeout: Option<f64>,

    /// OpenAI-compatible server for what no node can serve (unknown model, prompt over
    /// the nodes' context, every node of the shard busy, none reachable)
    #[arg(long, value_name = "URL")]
    upstream: Option<String>,

    /// Key sent to the upstream (replaces the client's Authorization)
    #[arg(
        long,
        value_name = "KEY",
        env = "KILN_UPSTREAM_API_KEY",
        hide_env_values = true
    )]
    upstream_api_key: Option<String>,

    /// Accepted client API key (`Authorization: Bearer <key>`); repeat for several.
    /// Without any, the router's API is open
    #[arg(
        long = "api-key",
        value_name = "KEY",
        env = "KILN_ROUTER_API_KEY",
        hide_env_values = true
    )]
    api_keys: Vec<String>,

    /// Key sent to the nodes (replaces the client's Authorization, which is passed on
    /// otherwise)
    #[arg(
        long,
        value_name = "KEY",
        env = "KILN_NODE_API_KEY",
        hide_env_values = true
    )]
    node_api_key: Option<String>,

    /// Requests per minute per client key, across every node (routes that run a model)
    #[arg(long, value_name = "N")]
    rate_limit_rpm: Option<u64>,

    /// Tokens per minute per client key, across every node: each request's prompt at
    /// four characters a token plus its max_tokens, counted as it arrives
    #[arg(long, value_name = "N")]
    rate_limit_tpm: Option<u64>,

    /// Model of requests that name none [default: the first model of the first node]
    #[arg(long, value_name = "NAME")]
    default_model: Option<String>,

    /// Largest request body, e.g. 4MiB; larger ones get 413 [default: 4MiB]
    #[arg(long, value_name = "SIZE")]
    max_body_size: Option<ByteSize>,

    /// Seconds to let in-flight requests finish after SIGTERM/Ctrl-C [default: 30]
    #[arg(long, value_name = "SECS")]
    shutdown_timeout: Option<f64>,

    /// Directory for the inference events and per-minute rollups (observe.sqlite3,
    /// the last day); without one they are kept in memory only
    #[arg(long, value_name = "DIR", env = "KILN_ROUTER_DATA_DIR")]
    data_dir: Option<PathBuf>,

    /// Re-run on the upstream any edge text classification whose top-class confidence
    /// is under this (0 to 1); the response's `x-kiln-tier` says which tier answered
    #[arg(long, value_name = "P")]
    escalate_below: Option<f64>,

    #[command(flatten)]
    http: super::HttpArgs,
}

/// Runs `kiln route` until SIGTERM or Ctrl-C.
pub fn run(_global: &GlobalArgs, args: Args) -> anyhow::Result<()> {
    let config = settings(args)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("kiln-route")
        .build()
        .context("cannot start the async runtime")?;
    let result = runtime.block_on(kiln_router::run(config, kiln_server::shutdown_signal()));
    runtime.shutdown_timeout(Duration::from_secs(1));
    result.context("router failed")
}

/// Merges flags over the file over defaults.
fn settings(args: Args) -> anyhow::Result<RouterConfig> {
    let file = match &args.config {
        Some(p) => FileConfig::load(p)?,
        None => FileConfig::default(),
    };
    let d = RouterConfig::default();
    let host = args
        .host
        .or(file.host.clone())
        .unwrap_or_else(|| DEFAULT_HOST.into());
    let port = args.port.or(file.port).unwrap_or(DEFAULT_PORT);
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    let addr = (bare, port)
        .to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .with_context(|| {
            format!(
                "invalid --host {host:?}: expected an address such as 0.0.0.0, ::1 or localhost"
            )
        })?;
    let nodes = args
        .nodes
        .iter()
        .map(|n| NodeSpec::parse(n))
        .collect::<Result<Vec<_>, _>>()?;
    let dns = args
        .dns
        .iter()
        .map(|n| DnsSpec::parse(n))
        .collect::<Result<Vec<_>, _>>()?;
    // The file's own nodes are read (and re-read) by discovery; check them now so a
    // typo fails at start rather than in a log line.
    file.membership()?;
    let rules = file.rules().with_context(|| match &args.config {
        Some(p) => format!("in {}", p.display()),
        None => "in the config file".into(),
    })?;
    let (limits, cors) = args.http.over(file.http.clone())?;

    let mut model_replicas: std::collections::BTreeMap<String, usize> = file
        .models
        .iter()
        .flatten()
        .filter_map(|(name, m)| m.replicas.map(|k| (name.clone(), k)))
        .collect();
    for spec in &args.model_replicas {
        let (name, k) = spec
            .split_once('=')
            .and_then(|(n, k)| Some((n.trim().to_string(), k.trim().parse::<usize>().ok()?)))
            .with_context(|| format!("--model-replicas {spec:?}: expected NAME=K"))?;
        model_replicas.insert(name, k);
    }
    let secs = |name: &str, flag: Option<f64>, file: Option<f64>, default: Duration| {
        flag.or(file).map_or(Ok(default), |s| seconds(name, s))
    };
    let upstream = match args
        .upstream
        .or(file.upstream.as_ref().map(|u| u.url.clone()))
    {
        Some(url) => {
            let key = args
                .upstream_api_key
                .or(file.upstream.as_ref().and_then(|u| u.api_key.clone()));
            Some(Upstream::new(&url, key)?)
        }
        None => None,
    };
    let escalate_below = args.escalate_below.or(file.escalate_below);
    if let Some(p) = escalate_below {
        anyhow::ensure!(
            (0.0..=1.0).contains(&p),
            "--escalate-below must be from 0 to 1"
        );
    }
    let config = RouterConfig {
        rules,
        escalate_below,
        data_dir: args.data_dir.or(file.data_dir.clone()),
        addr,
        nodes,
        dns,
        config_file: args.config,
        replicas: args.replicas.or(file.replicas).unwrap_or(d.replicas),
        model_replicas,
        load_factor: args
            .load_factor
            .or(file.load_factor)
            .unwrap_or(d.load_factor),
        vnodes: args.vnodes.or(file.vnodes).unwrap_or(d.vnodes),
        max_attempts: args
            .max_attempts
            .or(file.max_attempts)
            .unwrap_or(d.max_attempts),
        health_interval: secs(
            "health_interval",
            args.health_interval,
            file.health_interval,
            d.health_interval,
        )?,
        discovery_interval: secs(
            "discovery_interval",
            args.discovery_interval,
            file.discovery_interval,
            d.discovery_interval,
        )?,
        connect_timeout: secs(
            "connect_timeout",
            args.connect_timeout,
            file.connect_timeout,
            d.connect_timeout,
        )?,
        idle_timeout: secs(
            "idle_timeout",
            args.idle_timeout,
            file.idle_timeout,
            d.idle_timeout,
        )?,
        upstream,
        api_keys: super::keys_from(args.api_keys, file.api_keys),
        node_api_key: args.node_api_key.or(file.node_api_key),
        rate_limits: kiln_guard::RateLimits {
            requests_per_minute: nonzero(
                args.rate_limit_rpm.or(file.rate_limit_rpm),
                "--rate-limit-rpm",
            )?,
            tokens_per_minute: nonzero(
                args.rate_limit_tpm.or(file.rate_limit_tpm),
                "--rate-limit-tpm",
            )?,
        },
        default_model: args.default_model.or(file.default_model),
        body_limit: args
            .max_body_size
            .or(file.max_body_size)
            .map_or(d.body_limit, |s| usize::try_from(s.0).unwrap_or(usize::MAX)),
        shutdown_timeout: secs(
            "shutdown_timeout",
            args.shutdown_timeout,
            file.shutdown_timeout,
            d.shutdown_timeout,
        )?,
        limits,
        cors,
        ..d
    };
    config.validate()?;
    Ok(config)
}

/// A rate limit, when given, of at least 1.
fn nonzero(v: Option<u64>, what: &str) -> anyhow::Result<Option<u64>> {
    anyhow::ensure!(v != Some(0), "{what} must be at least 1");
    Ok(v)
}
