//! Building what `kiln serve` runs, below HTTP and beside it: the model host, usage
//! metering, the generation service, and the stateful services over it. Each service
//! gets the `Arc<Generator>` here, once, so none of them reaches back into the HTTP
//! crate; the server gets the finished [`AppState`].
//!
//! With a data directory, the directory is locked for this process first: two servers
//! on one directory would run each other's schedules and resume each other's responses
//! and batches. Background responses and batches a restart cut short are started again.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;
use kiln_agents::Agents;
use kiln_batch::{BatchStore, Batches};
use kiln_files::FileStore;
use kiln_generate::{Generator, Rounds, StoreEmbedder};
use kiln_host::{Host, HostedModel};
use kiln_rag::VectorStores;
use kiln_responses::{ResponseStore, Responses};
use kiln_server::{AppState, BatchLines, Gates, ModelSource, ServerConfig, Services};
use kiln_usage::{Meter, UsageStore};

/// Where each service keeps its state in the data directory.
const RESPONSES_FILE: &str = "responses.sqlite3";
const AGENTS_DIR: &str = "agents";
const VECTORS_DIR: &str = "vectors";
const VECTOR_STORES_DIR: &str = "vector_stores";
const BATCHES_FILE: &str = "batches.sqlite3";

/// What the services are built with.
#[derive(Debug, Clone)]
pub struct ServiceOptions {
    /// The SQLite file usage is metered into; `None`: no metering.
    pub usage_db: Option<PathBuf>,
    /// Where the services keep their state; `None`: responses in memory only, and no
    /// agents, files, batches or vectors.
    pub data_dir: Option<PathBuf>,
    pub responses: kiln_responses::Limits,
    pub agent_schedules: kiln_agents::ScheduleLimits,
    pub files: kiln_files::Limits,
    pub batches: kiln_batch::Limits,
    pub vectors: kiln_vectors::Limits,
    /// The remote engine indexes may be created on (`config.backend`), if any.
    pub vector_remote: Option<Arc<dyn kiln_vectors::RemoteIndexes>>,
}

/// The server's state over `models` (a lone model is pinned, so it loads at start),
/// and the data directory's lock, held for as long as the server runs. Call on the
/// runtime: services start their background work.
pub fn build(
    config: ServerConfig,
    models: Vec<ModelSource>,
    opts: &ServiceOptions,
) -> anyhow::Result<(AppState, Option<std::fs::File>)> {
    let single = models.len() == 1;
    let hosted = models
        .into_iter()
        .map(|mut m| {
            m.pin |= single;
            HostedModel::from_source(m, config.max_queued)
        })
        .collect();
    let meter = match &opts.usage_db {
        Some(path) => {
            let store = UsageStore::open(path)
                .with_context(|| format!("usage metering in {}", path.display()))?;
            tracing::info!(path = %path.display(), "metering usage");
            Some(Arc::new(Meter::start(store).context("usage metering")?))
        }
        None => None,
    };
    let host = Host::new(hosted, config.models_memory, config.lora.clone())?;
    let mut gates = Gates::new(&config.guard);
    let generator = Arc::new(Generator::new(host, meter, gates.limiter.clone()));
    gates.enable_firewall(&generator)?;
    let gates = Arc::new(gates);
    let (services, lock) = match &opts.data_dir {
        Some(dir) => {
            let lock = lock(dir)?;
            (stateful(dir, &generator, &gates, opts)?, Some(lock))
        }
        None => {
            let rounds = Arc::new(Rounds::new(generator.clone(), None));
            let store = Arc::new(ResponseStore::open_in_memory()?);
            let services = Services {
                responses: Some(Responses::new(store, rounds, opts.responses.clone())),
                ..Services::default()
            };
            (services, None)
        }
    };
    Ok((
        AppState::from_parts(config, generator, gates, services),
        lock,
    ))
}

fn lock(dir: &Path) -> anyhow::Result<std::fs::File> {
    kiln_db::lock_dir(dir).map_err(|e| match e {
        kiln_db::LockError::InUse { dir } => anyhow::anyhow!(
            "the data directory {} is in use by another kiln serve; give each server its own \
             --data-dir",
            dir.display()
        ),
        io => anyhow::Error::new(io).context("data directory"),
    })
}

/// The services that keep their state under `dir`.
fn stateful(
    dir: &Path,
    generator: &Arc<Generator>,
    gates: &Arc<Gates>,
    opts: &ServiceOptions,
) -> anyhow::Result<Services> {
    let files = Arc::new(FileStore::open(dir, opts.files).context("file store")?);
    let vectors = dir.join(VECTORS_DIR);
    let db = kiln_vectors::VectorDb::open_with_remote(
        &vectors,
        opts.vectors,
        Default::default(),
        opts.vector_remote.clone(),
    )?;
    let stores = VectorStores::open(
        &dir.join(VECTOR_STORES_DIR),
        db.clone(),
        files.clone(),
        Arc::new(StoreEmbedder(generator.clone())),
        Default::default(),
    )?;
    stores.start();
    tracing::info!(path = %vectors.display(), "vector indexes and stores");
    let rounds = Arc::new(Rounds::new(generator.clone(), Some(stores.clone())));
    let path = dir.join(RESPONSES_FILE);
    let store = ResponseStore::open(&path).context("response store")?;
    let responses = Responses::new(Arc::new(store), rounds.clone(), opts.responses.clone());
    let resumed = responses.resume().context("response store")?;
    tracing::info!(path = %path.display(), resumed, "storing responses");
    let agents_dir = dir.join(AGENTS_DIR);
    let agents = Agents::new(
        agents_dir.clone(),
        rounds,
        opts.responses.clone(),
        opts.agent_schedules,
    );
    let armed = agents.start();
    tracing::info!(path = %agents_dir.display(), armed, "agents");
    let lines = BatchLines {
        generator: generator.clone(),
        stores: Some(stores.clone()),
        gates: gates.clone(),
    };
    let store = BatchStore::open(&dir.join(BATCHES_FILE)).context("batch store")?;
    let batches = Batches::new(store, files, Arc::new(lines), opts.batches.clone());
    let resumed = batches.start().context("batch store")?;
    tracing::info!(resumed, "files and batches");
    Ok(Services {
        responses: Some(responses),
        agents: Some(agents),
        batches: Some(batches),
        vectors: Some(db),
        vector_stores: Some(stores),
    })
}
