//! Size and sha256 checks of cached files.

use std::fs::File;
use std::io::Read;
use std::path::Path;

use sha2::{Digest, Sha256};

use crate::catalog::FileSpec;
use crate::error::{Error, Result};
use crate::progress::Progress;

/// Read size used when hashing and extracting.
pub(crate) const CHUNK: usize = 1 << 20;

/// Checks an assembled file's size and digest against the catalogue; `path` names the
/// file in errors.
pub(crate) fn check(spec: &FileSpec, path: &Path, size: u64, sha256: &str) -> Result<()> {
    if size != spec.size {
        return Err(Error::SizeMismatch {
            path: path.to_owned(),
            expected: spec.size,
            actual: size,
        });
    }
    match spec.sha256 {
        Some(expected) if !expected.eq_ignore_ascii_case(sha256) => Err(Error::Sha256Mismatch {
            path: path.to_owned(),
            expected: expected.to_owned(),
            actual: sha256.to_owned(),
        }),
        _ => Ok(()),
    }
}

/// Size and lower-case hex sha256 of a file, reporting bytes read to `progress`.
pub(crate) fn hash_file(path: &Path, progress: &dyn Progress) -> Result<(u64, String)> {
    let mut file = File::open(path).map_err(Error::io("open", path))?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; CHUNK];
    let mut size = 0u64;
    loop {
        let n = file.read(&mut buf).map_err(Error::io("read", path))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        size += n as u64;
        progress.inc(n as u64);
    }
    Ok((size, hex::encode(hasher.finalize())))
}
