//! Running the router: find the nodes and check them once (so the first requests find
//! a placement), then serve, with discovery, health checks and the config file's rule
//! reloads in the background, until the shutdown future completes; in-flight requests
//! get `shutdown_timeout` to finish.

use std::future::Future;

use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::app::app;
use crate::config::RouterConfig;
use crate::discovery::{Discovery, Resolver, SystemResolver};
use crate::error::{Error, Result};
use crate::health;
use crate::reload;
use crate::state::RouterState;

/// Binds `config.addr` and routes until `shutdown` completes.
pub async fn run(
    config: RouterConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<()> {
    config.validate()?;
    let listener = TcpListener::bind(config.addr)
        .await
        .map_err(|source| Error::Bind {
            addr: config.addr,
            source,
        })?;
    serve(listener, config, SystemResolver, shutdown).await
}

/// Like [`run`] on a listener the caller bound, with the caller's DNS resolver.
pub async fn serve<R: Resolver>(
    listener: TcpListener,
    config: RouterConfig,
    resolver: R,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<()> {
    config.validate()?;
    let state = RouterState::new(config)?;
    let mut discovery = Discovery::new(state.config(), resolver);
    state.set_members(discovery.members().await);
    health::probe_all(&state).await;

    let (stop_tx, stop_rx) = watch::channel(false);
    let discovering = {
        let state = state.clone();
        let mut stop = stop_rx.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(state.config().discovery_interval);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            tick.tick().await;
            loop {
                tokio::select! {
                    _ = tick.tick() => {
                        if state.set_members(discovery.members().await) {
                            // Check newcomers now rather than at the next health tick.
                            health::probe_all(&state).await;
                        }
                    }
                    () = health::stopped(&mut stop) => return,
                }
            }
        })
    };
    let checking = tokio::spawn(health::run(state.clone(), stop_rx.clone()));
    let reloading = state
        .config()
        .config_file
        .clone()
        .map(|path| tokio::spawn(reload::run(state.clone(), path, stop_rx.clone())));

    let addr = listener.local_addr().map_err(Error::Serve)?;
    tracing::info!(
        nodes = state.placement().nodes.len(),
        models = state.placement().models.len(),
        "listening on http://{addr}"
    );
    let graceful = {
        let state = state.clone();
        let stop_tx = stop_tx.clone();
        async move {
            shutdown.await;
            tracing::info!("shutdown requested");
            state.begin_shutdown();
            let _ = stop_tx.send(true);
        }
    };
    let limits = state.config().limits;
    let server = kiln_http::serve(listener, app(state.clone()), limits, graceful);
    let mut server = tokio::spawn(server);
    let deadline = {
        let mut rx = stop_rx.clone();
        let timeout = state.config().shutdown_timeout;
        async move {
            let _ = rx.wait_for(|s| *s).await;
            tokio::time::sleep(timeout).await;
        }
    };
    let served = tokio::select! {
        r = &mut server => r.map_err(|e| Error::Serve(std::io::Error::other(e))),
        () = deadline => {
            tracing::warn!("shutdown deadline passed; abandoning the requests still running");
            server.abort();
            Ok(())
        }
    };
    let _ = stop_tx.send(true);
    let _ = discovering.await;
    let _ = checking.await;
    if let Some(r) = reloading {
        let _ = r.await;
    }
    if let Err(e) = state.observer().flush() {
        tracing::warn!("cannot write the last inference events: {e}");
    }
    tracing::info!("stopped");
    served
}
