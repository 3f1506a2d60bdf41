//! Log output: `tracing` events to stderr, filtered by `RUST_LOG` (default `warn`).

use tracing_subscriber::EnvFilter;

/// Installs the global subscriber; call once, early in `main`.
pub fn init() {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("warn"));
    // Fails only if a subscriber is already set, in which case that one keeps working.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}
