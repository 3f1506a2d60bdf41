//! Reading the disk tier's blocks off the engine thread.
//!
//! A prompt whose prefix is on disk has its blocks read (file, checks) by a reader
//! thread while the engine's step runs; the engine then only copies them into the KV
//! cache, after the step, and admits the prompt at the next one. Reading 4k tokens of
//! a 0.5B model's blocks took about 30 ms on the engine thread, which every running
//! sequence waited for. With nothing running there is nothing to overlap, and the
//! engine waits for the reads at once (`KvManager::promote_from_disk`).

use std::fs::{self, File};
use std::io::Read;
use std::path::PathBuf;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::{Arc, Mutex, MutexGuard};

use super::disk_file::{self, HEADER_LEN};
use super::disk_index::DiskIndex;
use super::prefix_hash::BlockHash;
use crate::stats::EngineStats;

/// What reads a block file: the tier's directory, fingerprint and index.
#[derive(Clone)]
pub(super) struct BlockReader {
    pub(super) dir: PathBuf,
    pub(super) fingerprint: [u8; 32],
    pub(super) index: Arc<Mutex<DiskIndex>>,
    pub(super) stats: EngineStats,
}

impl BlockReader {
    fn index(&self) -> MutexGuard<'_, DiskIndex> {
        self.index.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Reads `h`'s block into `out` (replacing its contents); false if the tier does
    /// not have it. A file that fails its checks is deleted and counted.
    pub(super) fn read(&self, h: &BlockHash, out: &mut Vec<u8>) -> bool {
        out.clear();
        let path = super::disk::block_path(&self.dir, h);
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

    /// Reads `hashes` in order, up to the first that cannot be read.
    fn read_run(&self, hashes: &[BlockHash]) -> Vec<(BlockHash, Vec<u8>)> {
        let mut out = Vec::with_capacity(hashes.len());
        for h in hashes {
            let mut bytes = Vec::new();
            if !self.read(h, &mut bytes) {
                break;
            }
            out.push((*h, bytes));
        }
        out
    }
}

pub(super) type Job = (Vec<BlockHash>, SyncSender<Vec<(BlockHash, Vec<u8>)>>);

/// The reader thread's queue; dropping it ends the thread.
pub(super) fn spawn_reader(reader: BlockReader) -> std::io::Result<SyncSender<Job>> {
    // One job per waiting sequence; the engine starts at most `max_num_seqs` at once.
    let (tx, rx) = sync_channel::<Job>(1024);
    std::thread::Builder::new()
        .name("kiln-kv-disk-read".into())
        .spawn(move || {
            for (hashes, done) in rx {
                let _ = done.send(reader.read_run(&hashes));
            }
        })?;
    Ok(tx)
}

/// Blocks being read for one waiting sequence (see the module doc).
pub struct PendingRead {
    rx: Receiver<Vec<(BlockHash, Vec<u8>)>>,
    /// Blocks asked for: free blocks the engine keeps for them meanwhile.
    pub(super) blocks: usize,
}

impl PendingRead {
    pub(super) fn start(queue: &SyncSender<Job>, hashes: Vec<BlockHash>) -> Option<Self> {
        let blocks = hashes.len();
        let (done, rx) = sync_channel(1);
        queue.try_send((hashes, done)).ok()?;
        Some(Self { rx, blocks })
    }

    /// Waits for the reads: the blocks read, in order, up to the first that could not
    /// be read.
    pub(super) fn wait(self) -> Vec<(BlockHash, Vec<u8>)> {
        self.rx.recv().unwrap_or_default()
    }
}
