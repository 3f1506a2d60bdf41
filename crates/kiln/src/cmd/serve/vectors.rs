//! `kiln serve`'s vector-index settings: Vectorize's caps, and the Qdrant deployment
//! indexes may be created on (`config.backend: "qdrant"`).

use std::sync::Arc;
#[cfg(feature = "qdrant")]
use std::time::Duration;

#[cfg(feature = "qdrant")]
use anyhow::Context;
use kiln_vectors::{Limits, RemoteIndexes};

use super::config::FileConfig;

#[derive(Debug, clap::Args)]
pub struct VectorArgs {
    /// Most dimensions a Vectorize index may have [default: 1536]
    #[arg(long, value_name = "N")]
    vector_max_dimensions: Option<usize>,

    /// Most matches a Vectorize query may ask for (`topK`); queries returning values or
    /// all metadata get at most a fifth of it [default: 100]
    #[arg(long, value_name = "N")]
    vector_max_top_k: Option<usize>,

    /// Largest metadata of one vector, as JSON bytes [default: 10240]
    #[arg(long, value_name = "BYTES")]
    vector_max_metadata_bytes: Option<usize>,

    /// A Qdrant deployment's gRPC URL (e.g. http://qdrant:6334): Vectorize indexes
    /// created with `"config": {"backend": "qdrant"}` keep their vectors there
    #[arg(long, value_name = "URL")]
    qdrant_url: Option<String>,

    /// Qdrant's API key, if it needs one
    #[arg(
        long,
        value_name = "KEY",
        env = "KILN_QDRANT_API_KEY",
        hide_env_values = true
    )]
    qdrant_api_key: Option<String>,
}

/// Per call to Qdrant.
#[cfg(feature = "qdrant")]
const QDRANT_TIMEOUT: Duration = Duration::from_secs(30);

#[cfg(feature = "qdrant")]
fn qdrant(url: &str, key: Option<String>) -> anyhow::Result<Arc<dyn RemoteIndexes>> {
    let q = kiln_qdrant::QdrantIndexes::connect(url, key, QDRANT_TIMEOUT)
        .with_context(|| format!("--qdrant-url {url}"))?;
    Ok(Arc::new(q))
}

/// Qdrant's client is an optional feature, so a default build stays small.
#[cfg(not(feature = "qdrant"))]
fn qdrant(_url: &str, _key: Option<String>) -> anyhow::Result<Arc<dyn RemoteIndexes>> {
    anyhow::bail!(
        "--qdrant-url: this kiln was built without Qdrant support; build it with \
         `cargo build --release -p kiln --features qdrant`"
    )
}

/// The caps, and the remote engine when one is configured.
pub fn settings(
    args: &VectorArgs,
    file: &FileConfig,
) -> anyhow::Result<(Limits, Option<Arc<dyn RemoteIndexes>>)> {
    let mut limits = Limits::default();
    if let Some(n) = args.vector_max_dimensions.or(file.vector_max_dimensions) {
        anyhow::ensure!(n > 0, "--vector-max-dimensions must be at least 1");
        limits.max_dimensions = n;
    }
    if let Some(n) = args.vector_max_top_k.or(file.vector_max_top_k) {
        anyhow::ensure!(n > 0, "--vector-max-top-k must be at least 1");
        limits.max_top_k = n;
        limits.max_top_k_with_payload = (n / 5).max(1);
    }
    if let Some(n) = args
        .vector_max_metadata_bytes
        .or(file.vector_max_metadata_bytes)
    {
        limits.max_metadata_bytes = n;
    }
    let url = args.qdrant_url.clone().or_else(|| file.qdrant_url.clone());
    let remote = match url {
        None => None,
        Some(url) => {
            anyhow::ensure!(
                url.starts_with("http://") || url.starts_with("https://"),
                "--qdrant-url must be an http:// or https:// URL, not {url}"
            );
            let key = args
                .qdrant_api_key
                .clone()
                .or_else(|| file.qdrant_api_key.clone());
            Some(qdrant(&url, key)?)
        }
    };
    Ok((limits, remote))
}
