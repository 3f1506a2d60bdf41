//! Log output: `tracing` events to stderr as plain text or JSON lines, filtered by
//! `RUST_LOG` (default: warnings, plus the server's request and lifecycle logs, what
//! `kiln serve` sets up, and the vector index's graph loads, builds and saves).

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

/// How log lines look.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines
    Plain,
    /// One JSON object per line (for log collectors)
    Json,
}

/// Installs the global subscriber; call once, early in `main`.
pub fn init(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| {
        EnvFilter::new(
            "warn,kiln_server=info,kiln::cmd::serve=info,kiln_vectors=info,kiln_model=info,kiln_engine::kv=info,kiln_agents::turns=info",
        )
    });
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal());
    // Fails only if a subscriber is already set, in which case that one keeps working.
    let _ = match format {
        LogFormat::Plain => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
}
