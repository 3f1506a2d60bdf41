//! The prefix cache's disk tier: full KV blocks of hashed prefixes kept as files under
//! the data directory, so a block evicted from RAM, or lost with the process, is read
//! back instead of recomputed. An agent's next turn after a restart, or a shared system
//! prompt, costs a file read per block instead of a prefill.
//!
//! **Written through, not spilled at eviction.** A block goes to disk once, soon after it
//! is computed and hashed (by a writer thread, off the step): a block that waited for
//! eviction would be lost to a `kill -9`, which is the restart this tier is for. The
//! writer's queue is bounded; when the disk falls behind, blocks are skipped, never
//! waited for (the tier is a cache).
//!
//! **Never wrong.** The tier's directory is named by a fingerprint of everything a
//! block's bytes derive from (the model file's content, the KV dtype and layout, the
//! model's settings, the kernels and this format), so another model or setting never
//! finds it; each file repeats the fingerprint and its block's hash and carries a
//! checksum, and a file that fails any check is deleted, never used (see
//! [`super::disk_file`]). Blocks keyed by a LoRA adapter stay off disk: adapter ids are
//! per process.
//!
//! **Crash ordering.** A file is written under a temporary name and renamed into place:
//! after a crash a block file is whole or absent; a start removes leftover temporaries.

use std::fs::{self, File};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::SystemTime;

use super::disk_file::{self, HEADER_LEN};
use super::disk_index::DiskIndex;
use super::disk_others;
use super::prefix_hash::BlockHash;
use crate::stats::EngineStats;

/// Blocks waiting for the writer; past this, new ones are skipped.
const WRITE_QUEUE: usize = 256;
/// Written blocks' buffers kept for the next exports (so a step that fills a block
/// allocates nothing once the tier is warm).
const SPARE_BUFFERS: usize = 64;
const EXT: &str = "kvb";
const TMP_EXT: &str = "tmp";

/// Where the tier lives and how much it may keep.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiskTierConfig {
    /// The directory of every model's tier; this one uses `root/<fingerprint>`.
    pub root: PathBuf,
    /// Bytes of block files kept; the least recently used go past it.
    pub budget_bytes: u64,
    /// See [`fingerprint`].
    pub fingerprint: [u8; 32],
}

/// The fingerprint of a tier: `model_digest` (the model file's content) and `layout`,
/// a description of everything else a block's bytes depend on.
pub fn fingerprint(model_digest: &[u8; 32], layout: &str) -> [u8; 32] {
    let mut h = blake3::Hasher::new();
    h.update(b"kiln-kv-disk-v1");
    h.update(model_digest);
    h.update(layout.as_bytes());
    *h.finalize().as_bytes()
}

pub struct DiskTier {
    dir: PathBuf,
    fingerprint: [u8; 32],
    index: Arc<Mutex<DiskIndex>>,
    writes: Option<SyncSender<(BlockHash, Vec<u8>)>>,
    writer: Option<JoinHandle<()>>,
    spare: Arc<Mutex<Vec<Vec<u8>>>>,
    stats: EngineStats,
}

impl DiskTier {
    /// Opens (or creates) the tier's directory and indexes the blocks an earlier run
    /// left there.
    pub fn open(cfg: &DiskTierConfig, stats: EngineStats) -> std::io::Result<Self> {
        let dir = cfg.root.join(hex(&cfg.fingerprint));
        fs::create_dir_all(&dir)?;
        disk_others::opened(&dir);
        disk_others::prune(&cfg.root, cfg.budget_bytes);
        let mut index = DiskIndex::default();
        for (_, h, size) in scan(&dir)? {
            index.insert(h, size);
        }
        for h in index.evict_to(cfg.budget_bytes) {
            let _ = fs::remove_file(block_path(&dir, &h));
        }
        if index.len() > 0 {
            tracing::info!(
                blocks = index.len(),
                mib = index.bytes() >> 20,
                dir = %dir.display(),
                "KV disk tier: prefix blocks from earlier runs are ready"
            );
        }
        stats.kv_disk_stored(index.bytes());
        let index = Arc::new(Mutex::new(index));
        let (tx, rx) = sync_channel(WRITE_QUEUE);
        let spare = Arc::new(Mutex::new(Vec::with_capacity(SPARE_BUFFERS)));
        let writer = {
            let (dir, index, stats) = (dir.clone(), index.clone(), stats.clone());
            let (fp, budget, spare) = (cfg.fingerprint, cfg.budget_bytes, spare.clone());
            let writer = Writer {
                dir,
                fingerprint: fp,
                budget,
                index,
                spare,
                stats,
            };
            std::thread::Builder::new()
                .name("kiln-kv-disk".into())
                .spawn(move || writer.run(rx))?
        };
        Ok(Self {
            dir,
            fingerprint: cfg.fingerprint,
            index,
            writes: Some(tx),
            writer: Some(writer),
            spare,
            stats,
        })
    }

    fn index(&self) -> MutexGuard<'_, DiskIndex> {
        self.index.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn stats(&self) -> &EngineStats {
        &self.stats
    }

    pub fn contains(&self, h: &BlockHash) -> bool {
        self.index().contains(h)
    }

    /// Reads `h`'s block into `out` (replacing its contents); false if the tier does not
    /// have it. A file that fails its checks is deleted and counted.
    pub fn read(&self, h: &BlockHash, out: &mut Vec<u8>) -> bool {
        out.clear();
        let path = block_path(&self.dir, h);
        let read = File::open(&path).and_then(|mut f| f.read_to_end(out));
        if read.is_err() {
            // Evicted or removed since the lookup.
            self.index().remove(h);
            return false;
        }
        if let Err(why) = disk_file::payload(out, &self.fingerprint, h) {
            tracing::warn!(file = %path.display(), %why, "KV disk tier: ignoring and deleting a bad block file");
            self.index().remove(h);
            let _ = fs::remove_file(&path);
            self.stats.kv_disk_bad_block();
            return false;
        }
        out.drain(..HEADER_LEN);
        self.index().touch(h);
        self.stats.kv_disk_read(out.len() as u64);
        true
    }

    /// An empty buffer to export a block into (a written block's, when one is spare).
    pub fn buffer(&self) -> Vec<u8> {
        let mut spare = self.spare.lock().unwrap_or_else(|e| e.into_inner());
        spare.pop().unwrap_or_default()
    }

    /// Whether `h` should be written: it is neither stored nor on its way.
    pub fn wants(&self, h: &BlockHash) -> bool {
        !self.index().known(h)
    }

    /// Hands `h`'s exported block to the writer (skipped if it is already known or the
    /// writer is behind).
    pub fn write(&self, h: BlockHash, payload: Vec<u8>) {
        let Some(tx) = &self.writes else {
            return;
        };
        if !self.index().begin_write(h) {
            return;
        }
        if let Err(TrySendError::Full((h, _)) | TrySendError::Disconnected((h, _))) =
            tx.try_send((h, payload))
        {
            self.index().abandon_write(&h);
            self.stats.kv_disk_skipped();
        }
    }
}

/// Lets queued blocks reach the disk when the engine stops normally.
impl Drop for DiskTier {
    fn drop(&mut self) {
        self.writes = None;
        if let Some(w) = self.writer.take() {
            let _ = w.join();
        }
        disk_others::closed(&self.dir);
    }
}

/// The writer thread's state.
struct Writer {
    dir: PathBuf,
    fingerprint: [u8; 32],
    budget: u64,
    index: Arc<Mutex<DiskIndex>>,
    spare: Arc<Mutex<Vec<Vec<u8>>>>,
    stats: EngineStats,
}

impl Writer {
    fn run(self, rx: Receiver<(BlockHash, Vec<u8>)>) {
        let lock = || self.index.lock().unwrap_or_else(|e| e.into_inner());
        let mut failed_once = false;
        for (h, mut payload) in rx {
            let path = block_path(&self.dir, &h);
            let tmp = path.with_extension(TMP_EXT);
            let header = disk_file::header(&self.fingerprint, &h, &payload);
            let written = File::create(&tmp)
                .and_then(|mut f| {
                    f.write_all(&header)?;
                    f.write_all(&payload)
                })
                .and_then(|()| fs::rename(&tmp, &path));
            let size = (header.len() + payload.len()) as u64;
            match written {
                Ok(()) => {
                    let evicted = {
                        let mut ix = lock();
                        ix.insert(h, size);
                        let evicted = ix.evict_to(self.budget);
                        self.stats.kv_disk_stored(ix.bytes());
                        evicted
                    };
                    self.stats.kv_disk_written(size);
                    for e in evicted {
                        let _ = fs::remove_file(block_path(&self.dir, &e));
                    }
                }
                Err(e) => {
                    let _ = fs::remove_file(&tmp);
                    lock().abandon_write(&h);
                    self.stats.kv_disk_skipped();
                    if !failed_once {
                        failed_once = true;
                        tracing::warn!(dir = %self.dir.display(), error = %e, "KV disk tier: cannot write a block (further failures are counted, not logged)");
                    }
                }
            }
            payload.clear();
            let mut spare = self.spare.lock().unwrap_or_else(|e| e.into_inner());
            if spare.len() < SPARE_BUFFERS {
                spare.push(payload);
            }
        }
    }
}

fn block_path(dir: &Path, h: &BlockHash) -> PathBuf {
    dir.join(format!("{}.{EXT}", hex(h)))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn parse_hash(stem: &str) -> Option<BlockHash> {
    if stem.len() != 32 {
        return None;
    }
    let mut h = [0u8; 16];
    for (i, b) in h.iter_mut().enumerate() {
        *b = u8::from_str_radix(stem.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(h)
}

/// The block files in `dir`, least recently modified first; removes temporaries a
/// crash left behind.
fn scan(dir: &Path) -> std::io::Result<Vec<(SystemTime, BlockHash, u64)>> {
    let mut found = Vec::new();
    for entry in fs::read_dir(dir)? {
        let Ok(entry) = entry else { continue };
        let path = entry.path();
        let ext = path.extension().and_then(|e| e.to_str());
        if ext == Some(TMP_EXT) {
            let _ = fs::remove_file(&path);
            continue;
        }
        let hash = path
            .file_stem()
            .and_then(|s| s.to_str())
            .and_then(parse_hash);
        let (Some(h), Some(EXT), Ok(meta)) = (hash, ext, entry.metadata()) else {
            continue;
        };
        found.push((
            meta.modified().unwrap_or(SystemTime::UNIX_EPOCH),
            h,
            meta.len(),
        ));
    }
    found.sort();
    Ok(found)
}
