//! The other tiers under the disk tier's root: another model's, another KV dtype's, or
//! an earlier build's (every rebuild of Kiln is another fingerprint, see
//! [`super::disk`]). They are never read by this one; left alone they would fill the
//! disk a budget at a time, so those this process does not have open are deleted
//! whole once idle for [`MAX_IDLE`], and the least recently used go first while they
//! hold more than one budget together.

use std::collections::HashSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

/// A tier unused this long is deleted when another opens.
pub(super) const MAX_IDLE: Duration = Duration::from_secs(7 * 24 * 3600);
/// Touched at each open: when the tier was last used.
const USED: &str = ".used";

/// The tier directories open in this process (never pruned).
static OPEN: Mutex<Option<HashSet<PathBuf>>> = Mutex::new(None);

fn open_set<R>(f: impl FnOnce(&mut HashSet<PathBuf>) -> R) -> R {
    let mut guard = OPEN.lock().unwrap_or_else(|e| e.into_inner());
    f(guard.get_or_insert_with(HashSet::new))
}

/// Marks `dir` as open and just used.
pub(super) fn opened(dir: &Path) {
    open_set(|s| s.insert(dir.to_path_buf()));
    let _ = fs::write(dir.join(USED), b"");
}

pub(super) fn closed(dir: &Path) {
    open_set(|s| s.remove(dir));
}

/// Deletes the other tiers under `root` that are idle past [`MAX_IDLE`] or, least
/// recently used first, past `budget` bytes together; logs the ones kept.
pub(super) fn prune(root: &Path, budget: u64) {
    let Ok(entries) = fs::read_dir(root) else {
        return;
    };
    let open = open_set(|s| s.clone());
    let mut others: Vec<(SystemTime, PathBuf, u64)> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_dir() && !open.contains(p))
        .map(|p| {
            let used = fs::metadata(p.join(USED))
                .or_else(|_| fs::metadata(&p))
                .and_then(|m| m.modified())
                .unwrap_or(SystemTime::UNIX_EPOCH);
            (used, p.clone(), dir_bytes(&p))
        })
        .collect();
    others.sort();
    let mut total: u64 = others.iter().map(|(_, _, b)| b).sum();
    let now = SystemTime::now();
    for (used, path, bytes) in others {
        let idle = now.duration_since(used).unwrap_or_default();
        if idle >= MAX_IDLE || total > budget {
            total -= bytes;
            match fs::remove_dir_all(&path) {
                Ok(()) => {
                    tracing::info!(dir = %path.display(), mib = bytes >> 20, idle_h = idle.as_secs() / 3600, "KV disk tier: removed the unused tier of another model, KV layout or build")
                }
                Err(e) => {
                    tracing::warn!(dir = %path.display(), error = %e, "KV disk tier: cannot remove an unused tier")
                }
            }
        } else {
            tracing::info!(
                dir = %path.display(),
                mib = bytes >> 20,
                "KV disk tier: ignoring blocks of another model, KV layout or build"
            );
        }
    }
}

fn dir_bytes(dir: &Path) -> u64 {
    fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .filter_map(|f| f.metadata().ok())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tier(root: &Path, name: &str, bytes: usize, age: Duration) -> PathBuf {
        let dir = root.join(name);
        fs::create_dir_all(&dir).expect("dir");
        fs::write(dir.join("a.kvb"), vec![0u8; bytes]).expect("block");
        let used = fs::File::create(dir.join(USED)).expect("used");
        used.set_modified(SystemTime::now() - age).expect("mtime");
        dir
    }

    #[test]
    fn idle_or_over_budget_tiers_go_open_ones_stay() {
        let root = tempfile::tempdir().expect("root");
        let old = tier(root.path(), "old", 10, MAX_IDLE + Duration::from_secs(60));
        let lru = tier(root.path(), "lru", 100, Duration::from_secs(3600));
        let recent = tier(root.path(), "recent", 100, Duration::from_secs(60));
        let mine = tier(root.path(), "mine", 1000, MAX_IDLE * 2);
        opened(&mine);
        prune(root.path(), 150);
        assert!(!old.exists(), "idle past MAX_IDLE");
        assert!(!lru.exists(), "least recently used, over the budget");
        assert!(recent.exists() && mine.exists(), "within budget, and open");
        closed(&mine);
    }
}
