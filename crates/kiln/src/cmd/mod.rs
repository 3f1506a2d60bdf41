//! Subcommands, one module each, plus the options they share.

pub mod batch;
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
use kiln_http::{ConnectionLimits, CorsPolicy, HttpSettings};

/// A list of keys from `--…-key` flags (or their environment variable) if any were
/// given, else from the config file: the flags replace the file's list, never add to it.
fn keys_from<T>(flags: Vec<T>, file: Option<Vec<T>>) -> Vec<T> {
    if flags.is_empty() {
        file.unwrap_or_default()
    } else {
        flags
    }
}

/// Connection limits and CORS, shared by `serve` and `route` (their config files take
/// the same settings in an `[http]` table).
#[derive(Debug, clap::Args)]
pub struct HttpArgs {
    /// Seconds a client has to send a request's head, counted from connecting or from
    /// the previous response (an idle keep-alive connection is closed then) [default: 10]
    #[arg(long, value_name = "SECS")]
    header_timeout: Option<f64>,

    /// Seconds a request's body may take to arrive; a slower one gets 408 [default: 30]
    #[arg(long, value_name = "SECS")]
    body_timeout: Option<f64>,

    /// Most client connections open at once (more wait to be accepted); must fit under
    /// the descriptor limit (`ulimit -n`) less 64 [default: 4096, or what fits]
    #[arg(long, value_name = "N")]
    max_connections: Option<usize>,

    /// Browser origin allowed to call the API (CORS), e.g. https://app.example, or `*`
    /// for any; repeat for several [default: none, CORS off]
    #[arg(long = "cors-origin", value_name = "ORIGIN")]
    cors_origins: Vec<String>,
}

impl HttpArgs {
    /// These flags over the config file's `[http]` table, checked.
    fn over(self, file: Option<HttpSettings>) -> anyhow::Result<(ConnectionLimits, CorsPolicy)> {
        let flags = HttpSettings {
            header_timeout: self.header_timeout,
            body_timeout: self.body_timeout,
            max_connections: self.max_connections,
            cors_origins: (!self.cors_origins.is_empty()).then_some(self.cors_origins),
        };
        let settings = flags.or(file.unwrap_or_default());
        Ok((settings.limits()?, settings.cors()?))
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

    /// Repack weights at every load instead of keeping the repacked copy under the
    /// Kiln home (`packed/`) and mapping it on later loads
    #[arg(long, global = true, env = "KILN_NO_PACK_CACHE")]
    pub no_pack_cache: bool,
}

impl GlobalArgs {
    /// Where repacked weights are kept between loads (`None` with `--no-pack-cache`).
    pub fn pack_cache(&self) -> anyhow::Result<Option<kiln_model::PackCache>> {
        if self.no_pack_cache {
            return Ok(None);
        }
        let root =
            Cache::default_root(self.kiln_home.clone()).context("cannot locate the model cache")?;
        Ok(Some(kiln_model::PackCache::new(root.join("packed"))))
    }

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
