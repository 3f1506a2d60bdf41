//! Serving a built [`AppState`]: load the pinned models in the background (so `/health`
//! answers and `/ready` says 503 meanwhile), serve, and shut down gracefully. The state
//! and the services in it are built by the binary (`kiln serve`).
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
use std::sync::Arc;
use std::time::Duration;

use kiln_host::HostError;
use kiln_http::ConnectionLimits;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::app::app;
use crate::error::{Error, Result};
use crate::state::AppState;

/// How connections are bounded, and how long in-flight requests get at shutdown.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    pub limits: ConnectionLimits,
    pub shutdown_timeout: Duration,
}

/// Serves `state` on `listener` until `shutdown` completes, then shuts down gracefully.
pub async fn serve(
    listener: TcpListener,
    state: AppState,
    opts: ServeOptions,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<()> {
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
