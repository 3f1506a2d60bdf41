//! Verification markers: proof that a cached file's sha256 matched, so that later starts
//! need only compare its size and modification time instead of rehashing it.
//!
//! A marker records the size, the expected digest and the file's mtime at verification.
//! Any mismatch (file replaced or edited, catalogue digest changed) invalidates it.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::UNIX_EPOCH;

use crate::catalog::FileSpec;
use crate::error::{Error, Result};

const HEADER: &str = "kiln-verified v1";

/// Where the marker of `file` lives: `<model_dir>/.kiln/verified/<file_name>`.
pub(crate) fn path(model_dir: &Path, file: &FileSpec) -> PathBuf {
    model_dir
        .join(".kiln")
        .join("verified")
        .join(file.file_name)
}

/// Records that `file_path` (already checked against `file`) is verified.
pub(crate) fn write(marker: &Path, file: &FileSpec, file_path: &Path) -> Result<()> {
    let contents = render(file, file_path)?;
    if let Some(dir) = marker.parent() {
        fs::create_dir_all(dir).map_err(Error::io("create directory", dir))?;
    }
    fs::write(marker, contents).map_err(Error::io("write", marker))
}

/// Whether `marker` vouches for `file_path` as it is now.
pub(crate) fn is_valid(marker: &Path, file: &FileSpec, file_path: &Path) -> bool {
    match (fs::read_to_string(marker), render(file, file_path)) {
        (Ok(recorded), Ok(current)) => recorded == current,
        _ => false,
    }
}

/// Removes a marker; a missing one is fine.
pub(crate) fn remove(marker: &Path) -> Result<()> {
    match fs::remove_file(marker) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(Error::io("remove", marker)(e)),
        _ => Ok(()),
    }
}

/// The marker text for the file as it is on disk now, or an error if its size is wrong.
fn render(file: &FileSpec, file_path: &Path) -> Result<String> {
    let meta = fs::metadata(file_path).map_err(Error::io("inspect", file_path))?;
    if meta.len() != file.size {
        return Err(Error::SizeMismatch {
            path: file_path.to_owned(),
            expected: file.size,
            actual: meta.len(),
        });
    }
    let mtime = meta
        .modified()
        .ok()
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map_or_else(|| "unknown".to_owned(), |d| d.as_nanos().to_string());
    Ok(format!(
        "{HEADER}\nsize {}\nsha256 {}\nmtime_ns {mtime}\n",
        file.size,
        file.sha256.unwrap_or("none")
    ))
}
