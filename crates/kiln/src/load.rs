//! Resolving a catalogue name to a loaded, serving model (fetching it on first use).

use anyhow::Context;
use kiln_engine::{ServingModel, ServingOptions};

use crate::cmd::GlobalArgs;
use crate::progress::BarProgress;

/// Fetches `name` if needed (with a progress bar) and loads it with `opts`.
pub fn serving_model(
    global: &GlobalArgs,
    name: &str,
    opts: &ServingOptions,
) -> anyhow::Result<ServingModel> {
    let spec = kiln_catalog::find(name)?;
    if spec.task != kiln_catalog::Task::TextGeneration {
        anyhow::bail!(
            "{} is a {} model, not a text-generation model",
            spec.name,
            spec.task
        );
    }
    let cache = global.cache()?;
    let progress = BarProgress::new(spec.name);
    cache
        .ensure(spec, &progress)
        .with_context(|| format!("cannot fetch {}", spec.name))?;
    let path = cache.primary_path(spec);
    tracing::info!(model = spec.name, path = %path.display(), "loading");
    ServingModel::load(spec.name, &path, opts)
        .with_context(|| format!("cannot load {}", path.display()))
}
