//! Reading small JSON configuration files.

use std::path::Path;

use serde::de::DeserializeOwned;

use crate::error::{Error, Result};

/// Parses `path` as `T`.
pub(crate) fn read<T: DeserializeOwned>(path: &Path) -> Result<T> {
    let text = std::fs::read(path).map_err(Error::io(path))?;
    serde_json::from_slice(&text).map_err(|source| Error::Json {
        path: path.to_path_buf(),
        source,
    })
}

/// Parses `path` as `T` if the file exists.
pub(crate) fn read_optional<T: DeserializeOwned>(path: &Path) -> Result<Option<T>> {
    if path.is_file() {
        read(path).map(Some)
    } else {
        Ok(None)
    }
}
