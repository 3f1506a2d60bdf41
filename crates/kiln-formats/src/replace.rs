//! Replacing a small file whole: the files Kiln derives from model files (converted
//! weights, remembered digests) are read by other processes while they may be written.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Writes `data` beside `path` under a name unique to this call, then renames it over
/// `path`: readers never see a partial file, and concurrent writers (of this process or
/// another) cannot interleave. A failed write leaves no temporary behind.
pub fn write_atomically(path: &Path, data: &[u8]) -> std::io::Result<()> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(format!(
        ".partial-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    let tmp = PathBuf::from(tmp);
    let written = std::fs::write(&tmp, data).and_then(|()| std::fs::rename(&tmp, path));
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}
