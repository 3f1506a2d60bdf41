//! From `--model NAME` to a model source, the one way `serve`, `run` and `chat` load a
//! model: a local GGUF file as is, or a catalogue model fetched on first use (with a
//! progress bar); then [`ModelSource::load`] (`kiln-host`) loads it.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;
use kiln_catalog::{Cache, ModelSpec, Task};
use kiln_engine::{ServingModel, ServingOptions};
use kiln_host::{LoadedModel, ModelSource};

use crate::cmd::GlobalArgs;
use crate::progress::BarProgress;

/// The text-generation model `model` names, fetched if needed and loaded with `opts`.
pub fn text_model(
    global: &GlobalArgs,
    model: &str,
    opts: &ServingOptions,
) -> anyhow::Result<ServingModel> {
    let source = match local_gguf(model, false, opts)? {
        Some(source) => source,
        None => {
            let spec = text_spec(model)?;
            catalogue_source(&global.cache()?, spec, false, opts)?
        }
    };
    tracing::info!(model = %source.name, path = %source.path.display(), "loading");
    match source.load().map_err(anyhow::Error::msg)? {
        LoadedModel::Generate(m) => {
            Arc::try_unwrap(m).map_err(|_| anyhow::anyhow!("the model {} is shared", source.name))
        }
        other => anyhow::bail!(
            "{} is a {} model, not a text-generation model",
            source.name,
            other.kind().task()
        ),
    }
}

/// A `--model` that is a path (it ends in `.gguf` or has a `/`): a text model named by
/// its file stem. `None` for a catalogue name; an error for a path with no file.
pub fn local_gguf(
    model: &str,
    pin: bool,
    opts: &ServingOptions,
) -> anyhow::Result<Option<ModelSource>> {
    let Some(path) = as_path(model) else {
        return Ok(None);
    };
    anyhow::ensure!(path.is_file(), "no model file at {}", path.display());
    let name = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .with_context(|| format!("{} has no file name", path.display()))?;
    Ok(Some(ModelSource {
        name,
        aliases: Vec::new(),
        task: Task::TextGeneration.as_str().to_string(),
        path: path.to_path_buf(),
        options: opts.clone(),
        pin,
    }))
}

/// Catalogue model `spec`, fetched into `cache` if needed.
pub fn catalogue_source(
    cache: &Cache,
    spec: &'static ModelSpec,
    pin: bool,
    opts: &ServingOptions,
) -> anyhow::Result<ModelSource> {
    Ok(ModelSource {
        name: spec.name.to_string(),
        aliases: spec.aliases.iter().map(|a| a.to_string()).collect(),
        task: spec.task.as_str().to_string(),
        path: fetched_path(cache, spec)?,
        options: opts.clone(),
        pin,
    })
}

/// Where catalogue model `spec` lies once fetched into `cache` (fetching it if needed,
/// with a progress bar): a GGUF model's file, an encoder's directory.
fn fetched_path(cache: &Cache, spec: &'static ModelSpec) -> anyhow::Result<PathBuf> {
    let progress = BarProgress::new(spec.name);
    cache
        .ensure(spec, &progress)
        .with_context(|| format!("cannot fetch {}", spec.name))?;
    Ok(match spec.task {
        Task::TextGeneration => cache.primary_path(spec),
        _ => cache.model_dir(spec),
    })
}

/// The GGUF file `model` names: a path as is, else a catalogue text-generation model,
/// fetched if needed.
pub fn gguf_path(global: &GlobalArgs, model: &str) -> anyhow::Result<PathBuf> {
    if let Some(path) = as_path(model) {
        anyhow::ensure!(path.is_file(), "no model file at {}", path.display());
        return Ok(path.to_path_buf());
    }
    fetched_path(&global.cache()?, text_spec(model)?)
}

/// `model` as a file path, when it is one rather than a catalogue name.
fn as_path(model: &str) -> Option<&Path> {
    let path = Path::new(model);
    let is_gguf = path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("gguf"));
    (is_gguf || model.contains(std::path::MAIN_SEPARATOR)).then_some(path)
}

/// Catalogue text-generation model `name`.
fn text_spec(name: &str) -> anyhow::Result<&'static ModelSpec> {
    let spec = kiln_catalog::find(name)?;
    anyhow::ensure!(
        spec.task == Task::TextGeneration,
        "{} is a {} model, not a text-generation model",
        spec.name,
        spec.task
    );
    Ok(spec)
}
