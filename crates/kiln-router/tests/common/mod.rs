//! What the router's integration tests share: a router on a free loopback port.

use kiln_router::{RouterConfig, SystemResolver};
use tokio::net::TcpListener;

/// Starts the router; returns its base URL.
pub async fn start_router(config: RouterConfig) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("test setup"));
    tokio::spawn(kiln_router::serve(
        listener,
        config,
        SystemResolver,
        std::future::pending(),
    ));
    url
}
