//! `kiln pull`: fetch catalogue entries into the cache, convert those that are
//! converted on first load (NanoGuard) and repack text models into the pack cache at
//! once, so the cache can be read-only after and the first start repacks nothing.

use std::path::Path;

use anyhow::Context;
use kiln_catalog::{catalog, ModelSpec, ModelStatus, Task};
use kiln_encoder::nanoguard;
use kiln_model::{LoadOptions, Model};

use super::GlobalArgs;
use crate::progress::BarProgress;

/// Arguments of `kiln pull`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Model names or aliases (see `kiln models`)
    #[arg(
        value_name = "NAME",
        required_unless_present = "all",
        conflicts_with = "all"
    )]
    names: Vec<String>,

    /// Fetch every catalogue entry
    #[arg(long)]
    all: bool,
}

/// Runs `kiln pull`: fetches each named entry (or all) that is not cached yet.
pub fn run(global: &GlobalArgs, args: Args) -> anyhow::Result<()> {
    let specs: Vec<&'static ModelSpec> = if args.all {
        catalog::all().iter().collect()
    } else {
        args.names
            .iter()
            .map(|n| catalog::find(n))
            .collect::<Result<_, _>>()?
    };
    let cache = global.cache()?;
    for spec in specs {
        let path = cache.primary_path(spec);
        if cache.status(spec) == ModelStatus::Present {
            println!("{}: already cached at {}", spec.name, path.display());
        } else {
            let progress = BarProgress::new(spec.name);
            cache
                .ensure(spec, &progress)
                .with_context(|| format!("cannot pull {}", spec.name))?;
            println!("{}: ready at {}", spec.name, path.display());
        }
        convert_if_needed(spec, &cache.model_dir(spec))?;
        prepack_if_needed(global, spec, &path)?;
    }
    Ok(())
}

/// Repacks a text model's weights into the pack cache now, so the first `kiln serve`
/// after the pull (an init container's, say) maps them instead of repacking.
fn prepack_if_needed(global: &GlobalArgs, spec: &ModelSpec, path: &Path) -> anyhow::Result<()> {
    let Some(pack_cache) = global.pack_cache()? else {
        return Ok(());
    };
    if spec.task != Task::TextGeneration {
        return Ok(());
    }
    let opts = LoadOptions {
        pack_cache: Some(pack_cache),
        ..LoadOptions::detect()
    };
    let model = Model::load(path, &opts).with_context(|| format!("cannot load {}", spec.name))?;
    if model.prepared_from_cache() {
        println!("{}: already packed for this CPU", spec.name);
        return Ok(());
    }
    match model.finish_pack_cache() {
        Some(Ok(())) => println!("{}: packed for this CPU", spec.name),
        Some(Err(e)) => println!("{}: could not keep its packed weights: {e}", spec.name),
        None => {}
    }
    Ok(())
}

/// Writes NanoGuard's safetensors and `tokenizer.json` beside its PyTorch files, unless
/// a current conversion is there.
fn convert_if_needed(spec: &ModelSpec, dir: &Path) -> anyhow::Result<()> {
    if spec.architecture != "nanoguard" || nanoguard::is_converted(dir) {
        return Ok(());
    }
    nanoguard::convert(dir, dir).with_context(|| format!("cannot convert {}", spec.name))?;
    println!(
        "{}: converted to safetensors in {}",
        spec.name,
        dir.display()
    );
    Ok(())
}
