//! `kiln pull`: fetch catalogue entries into the cache.

use anyhow::Context;
use kiln_catalog::{catalog, ModelSpec, ModelStatus};

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
            continue;
        }
        let progress = BarProgress::new(spec.name);
        cache
            .ensure(spec, &progress)
            .with_context(|| format!("cannot pull {}", spec.name))?;
        println!("{}: ready at {}", spec.name, path.display());
    }
    Ok(())
}
