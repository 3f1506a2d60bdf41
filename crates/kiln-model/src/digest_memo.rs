//! The content digest of a model file, remembered between starts by the file's identity.
//!
//! Hashing a 1.5B model's 1 GB took 226 ms of both cores at every start, a third of a
//! cached start's CPU. A memo maps the file's identity (device, inode, size, mtime and
//! ctime, to the nanosecond) to the digest computed from it.
//!
//! **Never wrong**, given one rule of the kernel: writing a file sets its mtime and
//! ctime to the current time, and nothing can set a ctime back (`utimes` moves mtime
//! only, and sets ctime to now). So a file whose identity matches its memo has not
//! been written since, with two guards:
//! - racy timestamps (as in git's index): a write in the same clock tick as the stat
//!   would leave the timestamps unchanged. A memo is written only for a file whose
//!   mtime and ctime were at least [`SETTLED`] old when its hashing started;
//! - a write during the hashing: the file is stat'ed before and after, and a memo is
//!   written only if both agree.
//!
//! A memo is a small file under the pack cache (`digests/`), named by the file's device
//! and inode, replaced whole (`kiln_formats::write_atomically`); its own BLAKE3
//! makes a torn or damaged one a miss, never a wrong answer.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

const MAGIC: &[u8; 8] = b"KILNDGST";
/// How old a file's timestamps must be before a digest of it is remembered.
const SETTLED: Duration = Duration::from_secs(2);

/// A file's identity: (device, inode, size, mtime ns, ctime ns) since the epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Identity([i128; 5]);

impl Identity {
    #[cfg(unix)]
    fn of(path: &Path) -> Option<Self> {
        use std::os::unix::fs::MetadataExt;
        let m = fs::metadata(path).ok()?;
        let ns = |s: i64, n: i64| i128::from(s) * 1_000_000_000 + i128::from(n);
        Some(Identity([
            i128::from(m.dev()),
            i128::from(m.ino()),
            i128::from(m.size()),
            ns(m.mtime(), m.mtime_nsec()),
            ns(m.ctime(), m.ctime_nsec()),
        ]))
    }

    /// No identity without a ctime: nothing is remembered there.
    #[cfg(not(unix))]
    fn of(_: &Path) -> Option<Self> {
        None
    }

    /// Whether both timestamps are at least [`SETTLED`] before `time`.
    fn settled_at(&self, time: SystemTime) -> bool {
        let Ok(since) = time.duration_since(SystemTime::UNIX_EPOCH) else {
            return false;
        };
        let limit = since.saturating_sub(SETTLED).as_nanos() as i128;
        self.0[3] <= limit && self.0[4] <= limit
    }

    fn bytes(&self) -> Vec<u8> {
        self.0.iter().flat_map(|v| v.to_le_bytes()).collect()
    }
}

/// Remembered digests, one file per model file, under `dir`.
pub(crate) struct DigestMemo {
    dir: PathBuf,
}

impl DigestMemo {
    pub(crate) fn new(dir: PathBuf) -> Self {
        Self { dir }
    }

    /// The digest remembered for `file`, or `compute()`'s, remembered if it may be.
    pub(crate) fn get_or_compute(
        &self,
        file: &Path,
        compute: impl FnOnce() -> [u8; 32],
    ) -> [u8; 32] {
        let started = SystemTime::now();
        let Some(before) = Identity::of(file) else {
            return compute();
        };
        let path = self.path_of(&before);
        if let Some(digest) = read(&path, &before) {
            tracing::debug!(file = %file.display(), "the model file's content digest remembered");
            return digest;
        }
        let digest = compute();
        if before.settled_at(started) && Identity::of(file) == Some(before) {
            if let Err(e) = self.write(&path, &before, &digest) {
                tracing::debug!(error = %e, "could not remember the content digest");
            }
        }
        digest
    }

    fn path_of(&self, id: &Identity) -> PathBuf {
        let name = blake3::hash(&id.bytes()[..32]); // device and inode
        self.dir.join(format!("{}.digest", &name.to_hex()[..32]))
    }

    fn write(&self, path: &Path, id: &Identity, digest: &[u8; 32]) -> std::io::Result<()> {
        fs::create_dir_all(&self.dir)?;
        let mut bytes = MAGIC.to_vec();
        bytes.extend_from_slice(&id.bytes());
        bytes.extend_from_slice(digest);
        let sum = *blake3::hash(&bytes).as_bytes();
        bytes.extend_from_slice(&sum);
        kiln_formats::write_atomically(path, &bytes)
    }
}

/// The digest in the memo at `path`, if it is whole and for exactly `id`.
fn read(path: &Path, id: &Identity) -> Option<[u8; 32]> {
    let bytes = fs::read(path).ok()?;
    let id_bytes = id.bytes();
    let body_len = MAGIC.len() + id_bytes.len() + 32;
    if bytes.len() != body_len + 32 {
        return None;
    }
    let (body, sum) = bytes.split_at(body_len);
    if blake3::hash(body).as_bytes()[..] != *sum
        || body[..MAGIC.len()] != MAGIC[..]
        || body[MAGIC.len()..MAGIC.len() + id_bytes.len()] != id_bytes[..]
    {
        return None;
    }
    body[body_len - 32..].try_into().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    /// Sets a file's mtime; its ctime becomes now, as the kernel wills.
    fn set_mtime(path: &Path, to: SystemTime) {
        let f = fs::File::options().write(true).open(path).expect("open");
        f.set_modified(to).expect("set mtime");
    }

    #[test]
    fn remembers_settled_files_only_and_forgets_on_any_write() {
        let dir = tempfile::tempdir().expect("tmp");
        let memo = DigestMemo::new(dir.path().join("digests"));
        let model = dir.path().join("model.gguf");
        fs::write(&model, b"weights").expect("write");
        let calls = Cell::new(0);
        let digest = |memo: &DigestMemo| {
            memo.get_or_compute(&model, || {
                calls.set(calls.get() + 1);
                *blake3::hash(&fs::read(&model).expect("read")).as_bytes()
            })
        };

        // Just written: its ctime is now, so nothing is remembered.
        let first = digest(&memo);
        digest(&memo);
        assert_eq!(
            calls.get(),
            2,
            "a file written just now is hashed every time"
        );

        // Settled (a ctime can only be aged by waiting): remembered after one hash.
        std::thread::sleep(SETTLED + Duration::from_millis(100));
        assert_eq!(digest(&memo), first);
        assert_eq!(digest(&memo), first);
        assert_eq!(calls.get(), 3, "a settled file is hashed once");

        // A write of the same size, its mtime set back to what it was: the ctime moves.
        let mtime = fs::metadata(&model)
            .and_then(|m| m.modified())
            .expect("mtime");
        fs::write(&model, b"Weights").expect("rewrite");
        set_mtime(&model, mtime);
        let changed = digest(&memo);
        assert_ne!(changed, first);
        assert_eq!(calls.get(), 4);

        // A damaged memo is a miss.
        std::thread::sleep(SETTLED + Duration::from_millis(100));
        digest(&memo);
        let memo_file = fs::read_dir(dir.path().join("digests"))
            .expect("memo dir")
            .flatten()
            .next()
            .expect("a memo")
            .path();
        let mut bytes = fs::read(&memo_file).expect("memo");
        bytes[90] ^= 1;
        fs::write(&memo_file, &bytes).expect("damage");
        assert_eq!(digest(&memo), changed);
        assert_eq!(calls.get(), 6, "hashed again after the damage");
    }
}
