//! Resolving a catalogue name to a loaded, serving model (fetching it on first use).

use std::path::{Path, PathBuf};

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
    let (name, path) = catalogue_gguf(global, name)?;
    tracing::info!(model = name, path = %path.display(), "loading");
    ServingModel::load(name, &path, opts).with_context(|| format!("cannot load {}", path.display()))
}

/// The GGUF file `model` names: a path (one ending in `.gguf` or with a `/`) as is, else
/// a catalogue text-generation model, fetched if needed.
pub fn gguf_path(global: &GlobalArgs, model: &str) -> anyhow::Result<PathBuf> {
    let path = Path::new(model);
    let is_gguf = path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("gguf"));
    if is_gguf || model.contains(std::path::MAIN_SEPARATOR) {
        if !path.is_file() {
            anyhow::bail!("no model file at {}", path.display());
        }
        return Ok(path.to_path_buf());
    }
    Ok(catalogue_gguf(global, model)?.1)
}

/// The canonical name and GGUF file of catalogue model `name`, fetched if needed.
fn catalogue_gguf(global: &GlobalArgs, name: &str) -> anyhow::Result<(&'static str, PathBuf)> {
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
    Ok((spec.name, cache.primary_path(spec)))
}
