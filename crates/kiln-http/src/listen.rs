//! The accept loop `kiln serve` and `kiln route` share, with the limits a public server
//! needs and `axum::serve` lacks: a deadline for a request's head (which also closes a
//! keep-alive connection idle that long, since hyper waits for the next head the same
//! way), a cap on open connections below the descriptor limit, and backoff when accept
//! fails. The body's deadline is a middleware ([`crate::deadline`]), so a streamed
//! response to a live client is never cut by any of these.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::Request;
use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tower::ServiceExt;

/// Descriptors kept free for everything that is not a client connection: model files,
/// SQLite, the log, outgoing connections of the router.
pub const RESERVED_DESCRIPTORS: u64 = 64;

/// The longest pause between accept attempts after errors (out of descriptors, etc.).
const MAX_ACCEPT_BACKOFF: Duration = Duration::from_secs(1);

/// How long clients may take, and how many may be connected at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// From the moment a connection waits for a request (new, or after the previous
    /// response) until that request's head has arrived.
    pub header_timeout: Duration,
    /// From a request's head until the end of its body (408 past it).
    pub body_timeout: Duration,
    /// Open client connections; further clients wait in the listen backlog.
    pub max_connections: usize,
}

/// The default limits, not checked against the descriptor limit (see [`Self::checked`]).
impl Default for ConnectionLimits {
    fn default() -> Self {
        Self {
            header_timeout: Self::DEFAULT_HEADER_TIMEOUT,
            body_timeout: Self::DEFAULT_BODY_TIMEOUT,
            max_connections: Self::DEFAULT_MAX_CONNECTIONS,
        }
    }
}

impl ConnectionLimits {
    pub const DEFAULT_HEADER_TIMEOUT: Duration = Duration::from_secs(10);
    pub const DEFAULT_BODY_TIMEOUT: Duration = Duration::from_secs(30);
    pub const DEFAULT_MAX_CONNECTIONS: usize = 4096;

    /// The defaults, with `max_connections` (the default if `None`) checked against this
    /// process's descriptor limit: the default shrinks to fit, an explicit value that
    /// does not fit is an error.
    pub fn checked(
        header_timeout: Option<Duration>,
        body_timeout: Option<Duration>,
        max_connections: Option<usize>,
    ) -> Result<Self, LimitError> {
        let room = descriptor_limit()
            .map(|n| n.saturating_sub(RESERVED_DESCRIPTORS))
            .map_or(usize::MAX, |n| usize::try_from(n).unwrap_or(usize::MAX));
        let max_connections = match max_connections {
            Some(0) => return Err(LimitError::ZeroConnections),
            Some(n) if n > room => {
                return Err(LimitError::OverDescriptorLimit {
                    wanted: n,
                    room,
                    reserved: RESERVED_DESCRIPTORS,
                })
            }
            Some(n) => n,
            None if room == 0 => {
                return Err(LimitError::OverDescriptorLimit {
                    wanted: 1,
                    room,
                    reserved: RESERVED_DESCRIPTORS,
                })
            }
            None => Self::DEFAULT_MAX_CONNECTIONS.min(room),
        };
        Ok(Self {
            header_timeout: header_timeout.unwrap_or(Self::DEFAULT_HEADER_TIMEOUT),
            body_timeout: body_timeout.unwrap_or(Self::DEFAULT_BODY_TIMEOUT),
            max_connections,
        })
    }
}

/// Why a connection limit cannot be used.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum LimitError {
    #[error("the connection limit must be at least 1")]
    ZeroConnections,
    #[error("invalid {name} {secs}: expected seconds > 0")]
    BadTimeout { name: &'static str, secs: f64 },
    #[error(
        "a limit of {wanted} connections does not fit the descriptor limit: {room} are \
         left after the {reserved} kept for files (raise `ulimit -n` or lower the limit)"
    )]
    OverDescriptorLimit {
        wanted: usize,
        room: usize,
        reserved: u64,
    },
}

/// This process's soft limit on open descriptors, if it has one.
fn descriptor_limit() -> Option<u64> {
    rustix::process::getrlimit(rustix::process::Resource::Nofile).current
}

/// Serves `app` on `listener` until `shutdown` completes, then stops accepting, lets
/// every open connection finish its request in flight (idle ones close at once) and
/// returns. The caller bounds that wait.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: ConnectionLimits,
    shutdown: impl Future<Output = ()>,
) {
    let permits = Arc::new(Semaphore::new(limits.max_connections));
    let graceful = GracefulShutdown::new();
    let mut builder = Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout);
    let service = app.map_request(|req: Request<Incoming>| req.map(Body::new));
    let mut backoff = Backoff::default();
    tokio::pin!(shutdown);
    loop {
        let permit = tokio::select! {
            p = permits.clone().acquire_owned() => match p {
                Ok(p) => p,
                Err(_) => break,
            },
            () = &mut shutdown => break,
        };
        let stream = tokio::select! {
            r = listener.accept() => r,
            () = &mut shutdown => break,
        };
        let stream = match stream {
            Ok((stream, _peer)) => {
                backoff.reset();
                stream
            }
            Err(e) => {
                backoff.wait(&e).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let hyper_service = TowerToHyperService::new(service.clone());
        let (builder, watcher) = (builder.clone(), graceful.watcher());
        let header_timeout = limits.header_timeout;
        tokio::spawn(async move {
            // Telling HTTP/1 from HTTP/2 waits for the first bytes, before hyper's head
            // timer runs: a client that sends nothing is dropped here.
            let mut first = [0u8; 1];
            let peeked = tokio::time::timeout(header_timeout, stream.peek(&mut first)).await;
            if !matches!(peeked, Ok(Ok(n)) if n > 0) {
                return;
            }
            let conn = builder
                .serve_connection_with_upgrades(TokioIo::new(stream), hyper_service)
                .into_owned();
            if let Err(e) = watcher.watch(conn).await {
                tracing::trace!("connection ended: {e}");
            }
            drop(permit);
        });
    }
    drop(listener);
    graceful.shutdown().await;
}

/// Exponential backoff for accept errors, logged once per streak.
#[derive(Default)]
struct Backoff {
    delay: Option<Duration>,
}

impl Backoff {
    fn reset(&mut self) {
        self.delay = None;
    }

    async fn wait(&mut self, e: &std::io::Error) {
        // A client that gave up before we accepted it is not our problem.
        if matches!(
            e.kind(),
            std::io::ErrorKind::ConnectionAborted | std::io::ErrorKind::ConnectionReset
        ) {
            return;
        }
        let delay = match self.delay {
            None => {
                tracing::warn!("accept failed ({e}); backing off");
                Duration::from_millis(10)
            }
            Some(d) => (d * 2).min(MAX_ACCEPT_BACKOFF),
        };
        self.delay = Some(delay);
        tokio::time::sleep(delay).await;
    }
}
