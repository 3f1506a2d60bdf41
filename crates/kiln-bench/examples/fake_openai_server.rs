//! A fake OpenAI-compatible streaming server (the one the tests use), for smoke runs of
//! `kiln bench` without a model:
//!
//! ```text
//! cargo run -p kiln-bench --example fake_openai_server -- 18080 50 10
//! kiln bench serve --base-url http://127.0.0.1:18080 --model fake --workload w.json ...
//! ```
//!
//! Arguments: port, first-token delay in ms, delay between tokens in ms.

#[path = "../tests/common/fake_server.rs"]
mod fake_server;

use std::time::Duration;

use fake_server::{FakeConfig, FakeServer};

fn arg(i: usize, default: u64) -> u64 {
    std::env::args()
        .nth(i)
        .and_then(|a| a.parse().ok())
        .unwrap_or(default)
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> std::io::Result<()> {
    let port = u16::try_from(arg(1, 18080)).unwrap_or(18080);
    let config = FakeConfig {
        first_token_delay: Duration::from_millis(arg(2, 50)),
        token_delay: Duration::from_millis(arg(3, 10)),
    };
    let server = FakeServer::start(config, port).await?;
    println!("fake OpenAI server on {}", server.base_url);
    // Serve until killed.
    std::future::pending::<()>().await;
    Ok(())
}
