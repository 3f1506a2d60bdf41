//! Subcommands, one module each, plus the options they share.

pub mod bench;
pub mod chat;
pub mod models;
pub mod perplexity;
pub mod pull;
pub mod route;
pub mod run;
pub mod serve;

use std::path::PathBuf;

use anyhow::Context;
use kiln_catalog::{Cache, Fetcher};

/// A list of keys from `--…-key` flags (or their environment variable) if any were
/// given, else from the config file: the flags replace the file's list, never add to it.
fn keys_from<T>(flags: Vec<T>, file: Option<Vec<T>>) -> Vec<T> {
    if flags.is_empty() {
        file.unwrap_or_default()
    } else {
        flags
    }
}

/// Options accepted by every subcommand.
#[derive(Debug, clap::Args)]
pub struct GlobalArgs {
    /// Directory holding Kiln's model cache [default: the platform cache dir + /kiln]
    #[arg(long, global = true, env = "KILN_HOME", value_name = "DIR")]
    pub kiln_home: Option<PathBuf>,

    /// pip command used to fetch models, e.g. `pip3` or `python3 -m pip`
    /// [default: the first of `python3 -m pip`, `pip3`, `pip` that works]
    #[arg(long, global = true, env = "KILN_PIP", value_name = "COMMAND")]
    pub pip: Option<String>,

    /// Log format on stderr (`RUST_LOG` sets the level)
    #[arg(
        long,
        global = true,
        env = "KILN_LOG_FORMAT",
        value_enum,
        default_value_t = crate::logging::LogFormat::Plain
    )]
    pub log_format: crate::logging::LogFormat,
}

impl GlobalArgs {
    /// The model cache these options select.
    pub fn cache(&self) -> anyhow::Result<Cache> {
        let root =
            Cache::default_root(self.kiln_home.clone()).context("cannot locate the model cache")?;
        let cache = Cache::new(root);
        Ok(
            match self.pip.as_deref().and_then(Fetcher::from_command_line) {
                Some(fetcher) => cache.with_fetcher(fetcher),
                None => cache,
            },
        )
    }
}
