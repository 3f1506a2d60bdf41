//! Running the server: bind, load the pinned models in the background (so `/health`
//! answers and `/ready` says 503 meanwhile), serve, and shut down gracefully. A server of
//! one model pins it; other models load on their first request.
//!
//! Connections go through `kiln_http::serve`: deadlines for request heads and bodies, a
//! cap on open connections.
//!
//! Shutdown, on the `shutdown` future (SIGTERM / Ctrl-C in the binary) or a pinned model
//! that fails to load: stop accepting connections, answer 503 to new requests on open
//! ones, let in-flight requests finish for up to `shutdown_timeout`. Past it, the
//! requests still running are cut: streams get a `server_shutdown` error event and
//! `[DONE]`, waiting requests a 503, and the run ends with [`Error::RequestsCut`]. Then
//! each engine drains and its thread is joined, and the usage still queued is committed.

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use kiln_agents::Agents;
use kiln_files::FileStore;
use kiln_generate::{Generator, Rounds, StoreEmbedder};
use kiln_host::{Host, HostError, HostedModel, ModelSource};
use kiln_http::ConnectionLimits;
use kiln_rag::VectorStores;
use kiln_responses::{Limits, ResponseStore, Responses};
use kiln_usage::{Meter, UsageStore};
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::app::app;
use crate::batch_runner::{start_batches, ServerBatch};
use crate::error::{Error, Result};
use crate::gate::Gates;
use crate::state::{AppState, ServerConfig, Services};

/// Where to listen, how long to wait for in-flight requests at shutdown, and where
/// usage goes.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    pub addr: SocketAddr,
    pub limits: ConnectionLimits,
    pub shutdown_timeout: Duration,
    pub server: ServerConfig,
    /// The SQLite file usage is metered into; `None`: no metering.
    pub usage_db: Option<PathBuf>,
    /// Where stored responses (`responses.sqlite3`) and agents (`agents/`) live;
    /// `None`: responses in memory only, and no agents.
    pub data_dir: Option<PathBuf>,
    /// Per-key storage caps and per-response bounds of the Responses API.
    pub responses: Limits,
    /// Bounds on agents' schedules (minimum interval, schedules per agent).
    pub agent_schedules: kiln_agents::ScheduleLimits,
    /// Size caps of uploaded files.
    pub files: kiln_files::Limits,
    /// Batch lines in flight and batch sizes.
    pub batches: kiln_batch::Limits,
    /// Caps of Vectorize indexes and queries.
    pub vectors: kiln_vectors::Limits,
    /// The remote engine indexes may be created on (`config.backend`), if any.
    pub vector_remote: Option<std::sync::Arc<dyn kiln_vectors::RemoteIndexes>>,
}

/// The response store's file in the data directory.
pub const RESPONSES_FILE: &str = "responses.sqlite3";
/// The agents' directory (one file per agent) in the data directory.
pub const AGENTS_DIR: &str = "agents";
/// The vector indexes' directory in the data directory.
pub const VECTORS_DIR: &str = "vectors";
/// The vector stores' directory in the data directory.
pub const VECTOR_STORES_DIR: &str = "vector_stores";

/// Serves `models` until `shutdown` completes, then shuts down gracefully.
pub async fn run(
    opts: ServeOptions,
    models: Vec<ModelSource>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<()> {
    let listener = TcpListener::bind(opts.addr)
        .await
        .map_err(|source| Error::Bind {
            addr: opts.addr,
            source,
        })?;
    serve(listener, opts, models, shutdown).await
}

/// The stateful services over `generator`: the Responses API (stored under the data
/// directory, or in memory without one), and with a data directory the agents, files
/// and batches, vector indexes and stores; background responses and batches a restart
/// cut short are started again. The directory is locked for this process: two servers
/// on one directory would run each other's schedules and resume each other's responses.
fn set_up_services(
    generator: &Arc<Generator>,
    gates: &Arc<Gates>,
    opts: &ServeOptions,
) -> Result<(Services, Option<std::fs::File>)> {
    let Some(dir) = &opts.data_dir else {
        let rounds = Arc::new(Rounds::new(generator.clone(), None));
        let store = Arc::new(ResponseStore::open_in_memory()?);
        let services = Services {
            responses: Some(Responses::new(store, rounds, opts.responses.clone())),
            ..Services::default()
        };
        return Ok((services, None));
    };
    let lock = kiln_db::lock_dir(dir)?;
    let files = Arc::new(FileStore::open(dir, opts.files)?);
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
    let responses = Responses::new(
        Arc::new(ResponseStore::open(&path)?),
        rounds.clone(),
        opts.responses.clone(),
    );
    let resumed = responses.resume()?;
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
    let runner = ServerBatch {
        generator: generator.clone(),
        stores: Some(stores.clone()),
        gates: gates.clone(),
    };
    let (batches, resumed) = start_batches(dir, files, runner, opts.batches.clone())?;
    tracing::info!(resumed, "files and batches");
    let services = Services {
        responses: Some(responses),
        agents: Some(agents),
        batches: Some(batches),
        vectors: Some(db),
        vector_stores: Some(stores),
    };
    Ok((services, Some(lock)))
}

/// Like [`run`] on a listener the caller bound.
pub async fn serve(
    listener: TcpListener,
    opts: ServeOptions,
    models: Vec<ModelSource>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<()> {
    let single = models.len() == 1;
    let hosted_models = models
        .into_iter()
        .map(|mut m| {
            m.pin |= single;
            HostedModel::from_source(m, opts.server.max_queued)
        })
        .collect();
    let meter = match &opts.usage_db {
        Some(path) => {
            let meter = Meter::start(UsageStore::open(path)?)?;
            tracing::info!(path = %path.display(), "metering usage");
            Some(Arc::new(meter))
        }
        None => None,
    };
    let config = opts.server.clone();
    let host = Host::new(hosted_models, config.models_memory, config.lora.clone())?;
    let mut gates = Gates::new(&config.guard);
    let generator = Arc::new(Generator::new(host, meter, gates.limiter.clone()));
    crate::gate::enable_firewall(&mut gates, &generator)?;
    let gates = Arc::new(gates);
    let (services, _data_dir_lock) = set_up_services(&generator, &gates, &opts)?;
    let state = AppState::from_parts(config, generator, gates, services);
    let addr = listener.local_addr().map_err(Error::Serve)?;
    tracing::info!("listening on http://{addr}");

    let (stop_tx, stop_rx) = watch::channel(false);
    let stop_tx = Arc::new(stop_tx);
    {
        let stop_tx = stop_tx.clone();
        tokio::spawn(async move {
            shutdown.await;
            tracing::info!("shutdown requested");
            let _ = stop_tx.send(true);
        });
    }
    let loader = {
        let state = state.clone();
        let stop_tx = stop_tx.clone();
        tokio::spawn(async move { load_pinned(&state, &stop_tx).await })
    };

    let graceful = {
        let state = state.clone();
        let mut rx = stop_rx.clone();
        async move {
            let _ = rx.wait_for(|s| *s).await;
            state.begin_shutdown();
        }
    };
    let server = kiln_http::serve(listener, app(state.clone()), opts.limits, graceful);
    let mut server = tokio::spawn(server);
    let deadline = {
        let mut rx = stop_rx.clone();
        let timeout = opts.shutdown_timeout;
        async move {
            let _ = rx.wait_for(|s| *s).await;
            tracing::info!(
                timeout_s = timeout.as_secs_f64(),
                "finishing in-flight requests"
            );
            tokio::time::sleep(timeout).await;
        }
    };
    let served = tokio::select! {
        r = &mut server => r.map_err(|e| Error::Serve(std::io::Error::other(e))),
        () = deadline => {
            tracing::warn!("shutdown deadline passed; cutting the requests still running");
            state.cut_requests();
            // Let the cut responses reach their clients; drop whatever still hangs on.
            let abandoned = tokio::time::timeout(CUT_GRACE, &mut server).await.is_err();
            if abandoned {
                server.abort();
            }
            match state.requests_cut().max(usize::from(abandoned)) {
                0 => Ok(()),
                cut => Err(Error::RequestsCut { cut }),
            }
        }
    };
    state.begin_shutdown();
    // Shut down mid-start: the load under way is dropped when it finishes. A loader that
    // already failed has returned its error (it does so without yielding after asking
    // for the shutdown), which abort leaves intact.
    loader.abort();
    let load_result = match loader.await {
        Ok(r) => r,
        Err(e) if e.is_cancelled() => Ok(()),
        Err(e) => Err(Error::Serve(std::io::Error::other(e))),
    };
    state.host().stop_models().await;
    let flushed = match state.meter().cloned() {
        Some(meter) => tokio::task::spawn_blocking(move || meter.flush())
            .await
            .map_err(|e| Error::Serve(std::io::Error::other(e)))
            .and_then(|r| r.map_err(Error::from)),
        None => Ok(()),
    };
    tracing::info!("stopped");
    served.and(load_result).and(flushed)
}

/// How long cut requests get to send their last words before connections are dropped.
const CUT_GRACE: Duration = Duration::from_secs(2);

/// Loads each pinned model in turn; on a failure, stops the server.
async fn load_pinned(state: &AppState, stop: &watch::Sender<bool>) -> Result<()> {
    let loaded = state.host().load_pinned(|| *stop.borrow()).await;
    let Err((model, e)) = loaded else {
        return Ok(());
    };
    tracing::error!(%model, error = %e, "cannot load pinned model; shutting down");
    let _ = stop.send(true);
    let reason = match e {
        HostError::ModelUnavailable { reason, .. } => reason,
        other => other.to_string(),
    };
    Err(Error::Load { model, reason })
}

/// Completes on SIGTERM or Ctrl-C (SIGINT).
pub async fn shutdown_signal() {
    let ctrl_c = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = term => {}
    }
}
