//! Running the server: bind, load the models in the background (so `/health` answers and
//! `/ready` says 503 meanwhile), serve, and shut down gracefully.
//!
//! Shutdown, on the `shutdown` future (SIGTERM / Ctrl-C in the binary) or a model that
//! fails to load: stop accepting connections, answer 503 to new requests on open ones,
//! let in-flight requests finish for up to `shutdown_timeout`, then drain each engine
//! and join its thread.

use std::future::{Future, IntoFuture};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use kiln_engine::{ServingModel, ServingOptions};
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::app::app;
use crate::error::{Error, Result};
use crate::state::{AppState, ModelSlot, ServerConfig};

/// Where to listen and how long to wait for in-flight requests at shutdown.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    pub addr: SocketAddr,
    pub shutdown_timeout: Duration,
    pub server: ServerConfig,
}

/// A model to serve: its names, its GGUF file and its engine settings.
#[derive(Debug, Clone)]
pub struct ModelSource {
    pub name: String,
    pub aliases: Vec<String>,
    pub task: String,
    pub path: PathBuf,
    pub options: ServingOptions,
}

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

/// Like [`run`] on a listener the caller bound.
pub async fn serve(
    listener: TcpListener,
    opts: ServeOptions,
    models: Vec<ModelSource>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<()> {
    let slots = models
        .iter()
        .map(|m| {
            ModelSlot::new(
                m.name.clone(),
                m.aliases.clone(),
                m.task.clone(),
                opts.server.max_queued,
            )
        })
        .collect();
    let state = AppState::new(opts.server.clone(), slots)?;
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
        tokio::task::spawn_blocking(move || load_all(&state, models, &stop_tx))
    };

    let graceful = {
        let state = state.clone();
        let mut rx = stop_rx.clone();
        async move {
            let _ = rx.wait_for(|s| *s).await;
            state.begin_shutdown();
        }
    };
    let server = axum::serve(listener, app(state.clone())).with_graceful_shutdown(graceful);
    let mut server = tokio::spawn(server.into_future());
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
        r = &mut server => r.map_err(|e| Error::Serve(std::io::Error::other(e))).and_then(|r| r.map_err(Error::Serve)),
        () = deadline => {
            tracing::warn!("shutdown deadline passed; abandoning the requests still running");
            server.abort();
            Ok(())
        }
    };
    state.begin_shutdown();
    let load_result = match loader.await {
        Ok(r) => r,
        Err(e) => Err(Error::Serve(std::io::Error::other(e))),
    };
    shutdown_models(&state).await;
    tracing::info!("stopped");
    served.and(load_result)
}

/// Loads each model in turn; on a failure, records it and stops the server.
fn load_all(state: &AppState, models: Vec<ModelSource>, stop: &watch::Sender<bool>) -> Result<()> {
    for (slot, src) in state.models().iter().zip(models) {
        if *stop.borrow() {
            return Ok(());
        }
        tracing::info!(model = %src.name, path = %src.path.display(), "loading model");
        match ServingModel::load(&src.name, &src.path, &src.options) {
            Ok(m) => {
                tracing::info!(
                    model = %src.name,
                    max_model_len = m.engine_config.max_model_len,
                    kv_blocks = m.engine_config.num_kv_blocks,
                    max_num_seqs = m.engine_config.max_num_seqs,
                    "model ready"
                );
                slot.set_loaded(Arc::new(m));
            }
            Err(source) => {
                tracing::error!(model = %src.name, error = %source, "cannot load model; shutting down");
                slot.set_failed(source.to_string());
                let _ = stop.send(true);
                return Err(Error::Load {
                    model: src.name,
                    path: src.path,
                    source: Box::new(source),
                });
            }
        }
    }
    Ok(())
}

/// Drains every engine and joins its thread. A model still referenced (requests that
/// outlived the deadline) is only told to drain; its thread ends with the process.
async fn shutdown_models(state: &AppState) {
    for slot in state.models() {
        let Some(model) = slot.take() else { continue };
        match Arc::try_unwrap(model) {
            Ok(model) => {
                let name = slot.name.clone();
                let _ = tokio::task::spawn_blocking(move || model.shutdown()).await;
                tracing::info!(model = %name, "engine stopped");
            }
            Err(shared) => shared.handle().drain(),
        }
    }
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
