//! Inter-process lock serialising fetches of one model.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::ErrorKind;
use std::path::Path;

use crate::error::{Error, Result};
use crate::progress::Progress;

/// Holds an OS advisory lock on `<model_dir>/.kiln/lock` until dropped. The OS releases it
/// when the holder dies, so a crashed fetch never leaves a stale lock behind.
#[derive(Debug)]
pub(crate) struct ModelLock {
    _file: Option<File>,
}

impl ModelLock {
    /// Takes the lock, waiting (and saying so) while another process holds it.
    pub(crate) fn acquire(path: &Path, model: &str, progress: &dyn Progress) -> Result<Self> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(Error::io("create directory", dir))?;
        }
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(Error::io("open lock file", path))?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                progress.stage(&format!(
                    "waiting for another kiln process fetching {model}"
                ));
                file.lock().map_err(Error::io("lock", path))?;
            }
            Err(TryLockError::Error(e)) if e.kind() == ErrorKind::Unsupported => {
                // Some network file systems lack locks; fetching unguarded beats failing.
                tracing::warn!(path = %path.display(), "file locking unsupported; fetching without a lock");
                return Ok(ModelLock { _file: None });
            }
            Err(TryLockError::Error(e)) => return Err(Error::io("lock", path)(e)),
        }
        Ok(ModelLock { _file: Some(file) })
    }
}
