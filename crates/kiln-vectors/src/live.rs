//! Each index's graph in memory: loaded from its graph file (with the log replayed
//! after it) or rebuilt from SQLite the first time the index is used (`graph_load`),
//! then kept in step with every committed write.
//!
//! A loaded graph starts as a read-only view of its mapped file, so the first query
//! after a start does not wait for a copy. Until the worker thaws it (a writable copy
//! swapped in under the writer lock), keys removed from it are `masked` and added
//! vectors wait in the tail.
//!
//! Writes to one index are serialized by its `writer` lock, which loading, draining
//! and checkpointing also hold, so no committed write can slip between a read of
//! SQLite and the graph that reflects it. Vectors committed but not yet in the graph
//! (the log replayed at load, or every vector while a graph is rebuilt) are the
//! graph's `tail`: searched exactly, and moved into the graph a chunk at a time by
//! the graph worker (`worker.rs`), so a query waits at most for one chunk's inserts
//! (under the write lock: usearch's search must not run beside an insert), never for
//! a build. A graph that failed to take a committed write is dropped and rebuilt:
//! SQLite is the truth.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock, RwLockReadGuard};
use std::time::Instant;

use rusqlite::Connection;

use crate::error::{Result, VectorError};
use crate::graph::AnnGraph;
use crate::graph_file::{self, FileError, Header};
use crate::graph_load::{index_exists, load, rebuild, Unusable};
use crate::graph_log;
use crate::limits::GraphParams;
use crate::metric::Metric;

/// What loading, rebuilding and saving a graph needs; shared with the graph worker.
pub(crate) struct Store {
    pub conn: Mutex<Connection>,
    /// The index directory (graph files live in its `graphs/`).
    pub dir: std::path::PathBuf,
    pub params: GraphParams,
    pub live: LiveSet,
    /// Where indexes with a tail are sent to be drained.
    pub drain: Mutex<Option<std::sync::mpsc::Sender<i64>>>,
}

impl Store {
    pub(crate) fn conn(&self) -> MutexGuard<'_, Connection> {
        // SQLite rolls back an unfinished transaction on drop, so a poisoned lock is
        // still consistent.
        self.conn.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn wake_drain(&self, index_id: i64) {
        if let Some(tx) = self
            .drain
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
        {
            let _ = tx.send(index_id);
        }
    }
}

/// What building a graph needs to know about its index.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Shape {
    pub index_id: i64,
    pub dimensions: usize,
    pub metric: Metric,
}

/// One index's graph and the committed vectors not yet in it.
pub(crate) struct Graph {
    pub ann: Box<dyn AnnGraph>,
    /// Committed vectors the graph does not hold yet, by key; searched exactly.
    pub tail: HashMap<u64, Vec<f32>>,
    /// Keys a frozen `ann` still holds but the index no longer does (removed, or
    /// updated with the new vector in the tail); never returned from `ann`.
    pub masked: HashSet<u64>,
    pub shape: Shape,
}

impl Graph {
    /// Vectors searchable: in the graph or its tail.
    pub(crate) fn len(&self) -> usize {
        self.in_graph() + self.tail.len()
    }

    /// Vectors the graph walk can return.
    pub(crate) fn in_graph(&self) -> usize {
        self.ann.len() - self.masked.len()
    }

    /// The vector stored under `key`, into `out`; false if absent.
    pub(crate) fn get(&self, key: u64, out: &mut [f32]) -> bool {
        if let Some(v) = self.tail.get(&key) {
            out.copy_from_slice(v);
            return true;
        }
        !self.masked.contains(&key) && self.ann.get(key, out)
    }

    /// [`AnnGraph::search`] without the masked keys.
    pub(crate) fn search(
        &self,
        query: &[f32],
        k: usize,
        ef: usize,
        admit: Option<&dyn Fn(u64) -> bool>,
    ) -> Result<Vec<(u64, f32)>> {
        if self.masked.is_empty() {
            return self.ann.search(query, k, ef, admit);
        }
        let unmasked = |key: u64| !self.masked.contains(&key) && admit.is_none_or(|f| f(key));
        self.ann.search(query, k, ef, Some(&unmasked))
    }

    /// [`AnnGraph::exact`] without the masked keys.
    pub(crate) fn exact(&self, query: &[f32], k: usize) -> Result<Vec<(u64, f32)>> {
        let mut found = self.ann.exact(query, k + self.masked.len())?;
        found.retain(|(key, _)| !self.masked.contains(key));
        found.truncate(k);
        Ok(found)
    }
}

/// How an index's graph came to be, for tests, benchmarks and operators.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GraphStats {
    /// Vectors in the graph.
    pub in_graph: usize,
    /// Committed vectors not yet in the graph, searched exactly meanwhile.
    pub pending: usize,
    /// Times the graph was loaded from its file since this process opened the database.
    pub loads: u64,
    /// Times it was rebuilt from SQLite (no usable file).
    pub builds: u64,
    /// Graph files written.
    pub checkpoints: u64,
}

/// The in-memory side of one index.
#[derive(Default)]
pub(crate) struct LiveIndex {
    writer: Mutex<()>,
    /// Held while a graph file is saved (see [`LiveIndex::checkpoint`]).
    saving: Mutex<()>,
    /// Held by a reader while it loads the graph: a query waiting for a load waits on
    /// this, not on `writer`, which the worker holds for seconds while it thaws.
    opening: Mutex<()>,
    graph: RwLock<Option<Graph>>,
    /// Keys logged since the graph file's checkpoint.
    logged: AtomicUsize,
    loads: AtomicU64,
    builds: AtomicU64,
    checkpoints: AtomicU64,
}

pub(crate) type GraphGuard<'a> = RwLockReadGuard<'a, Option<Graph>>;

/// A graph serialized for its file, and the logged keys it covers.
struct Snapshot {
    header: Header,
    bytes: Vec<u8>,
    covered: usize,
    started: Instant,
}

/// Vectors moved from a tail into the graph under one hold of the writer lock.
pub(crate) const DRAIN_CHUNK: usize = 512;

impl LiveIndex {
    /// The graph for reading, loaded or rebuilt first if needed.
    pub(crate) fn read(&self, store: &Store, shape: &Shape) -> Result<GraphGuard<'_>> {
        loop {
            let g = self.graph.read().unwrap_or_else(|e| e.into_inner());
            if g.is_some() {
                return Ok(g);
            }
            drop(g);
            let _opening = self.opening.lock().unwrap_or_else(|e| e.into_inner());
            if self
                .graph
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .is_some()
            {
                continue; // loaded while this reader waited
            }
            let w = self.lock_writer();
            self.open(&w, store, shape)?;
        }
    }

    /// Serializes writes to this index.
    pub(crate) fn lock_writer(&self) -> MutexGuard<'_, ()> {
        self.writer.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Waits for a graph file being saved (an index is deleted only after it).
    pub(crate) fn lock_saving(&self) -> MutexGuard<'_, ()> {
        self.saving.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn stats(&self) -> GraphStats {
        let g = self.graph.read().unwrap_or_else(|e| e.into_inner());
        GraphStats {
            in_graph: g.as_ref().map_or(0, Graph::in_graph),
            pending: g.as_ref().map_or(0, |g| g.tail.len()),
            loads: self.loads.load(Ordering::Relaxed),
            builds: self.builds.load(Ordering::Relaxed),
            checkpoints: self.checkpoints.load(Ordering::Relaxed),
        }
    }

    /// Loads the graph from its file, or starts a rebuild from SQLite, if it isn't
    /// in memory (the caller holds the writer lock).
    pub(crate) fn open(
        &self,
        writer: &MutexGuard<'_, ()>,
        store: &Store,
        shape: &Shape,
    ) -> Result<()> {
        if self
            .graph
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .is_some()
        {
            return Ok(());
        }
        let started = Instant::now();
        let loaded;
        let graph = match load(store, shape) {
            Ok((graph, replayed)) => {
                tracing::info!(
                    index = shape.index_id,
                    vectors = graph.ann.len(),
                    replayed,
                    pending = graph.tail.len(),
                    ms = started.elapsed().as_millis() as u64,
                    "vector graph loaded"
                );
                self.loads.fetch_add(1, Ordering::Relaxed);
                self.logged.store(replayed, Ordering::Relaxed);
                loaded = true;
                graph
            }
            Err(why) => {
                let graph = rebuild(store, shape)?;
                let level_warn = !matches!(why, Unusable::File(FileError::Missing));
                if level_warn {
                    tracing::warn!(index = shape.index_id, reason = %why, pending = graph.tail.len(), "vector graph file unusable; rebuilding the graph from the database");
                } else {
                    tracing::info!(
                        index = shape.index_id,
                        pending = graph.tail.len(),
                        "vector graph built"
                    );
                }
                self.builds.fetch_add(1, Ordering::Relaxed);
                self.logged.store(0, Ordering::Relaxed);
                loaded = false;
                graph
            }
        };
        // The worker thaws a view and inserts a tail, but only once there is something
        // to write: a view with nothing pending stays a view (its pages shared with the
        // page cache, no 1.7 GB copy per 1M × 384 index, and no copy competing with
        // the first queries); the first write wakes the worker.
        let work = !graph.tail.is_empty() || !graph.masked.is_empty();
        *self.graph.write().unwrap_or_else(|e| e.into_inner()) = Some(graph);
        if work {
            store.wake_drain(shape.index_id);
        } else if !loaded {
            // A graph built whole (a new or empty index): saved at once, so the next
            // start loads it and replays the log from here.
            self.checkpoint_held(writer, store);
        }
        Ok(())
    }

    /// Applies a committed write to the graph (caller holds the writer lock); on
    /// failure the graph is dropped, to be rebuilt from SQLite. A frozen graph takes
    /// the write as masked keys and tail vectors, for the worker to thaw and insert.
    pub(crate) fn apply(&self, store: &Store, removed: &[u64], added: &[(u64, &[f32])]) {
        let mut g = self.graph.write().unwrap_or_else(|e| e.into_inner());
        let Some(graph) = g.as_mut() else { return };
        self.logged
            .fetch_add(removed.len() + added.len(), Ordering::Relaxed);
        if graph.ann.frozen() {
            for k in removed {
                if graph.tail.remove(k).is_none() && graph.ann.contains(*k) {
                    graph.masked.insert(*k);
                }
            }
            graph
                .tail
                .extend(added.iter().map(|(k, v)| (*k, v.to_vec())));
            store.wake_drain(graph.shape.index_id);
            return;
        }
        let result = removed
            .iter()
            .try_for_each(|k| match graph.tail.remove(k) {
                Some(_) => Ok(()),
                None => graph.ann.remove(*k),
            })
            .and_then(|()| graph.ann.reserve(graph.ann.len() + added.len()))
            .and_then(|()| add_parallel(graph.ann.as_ref(), added));
        if let Err(e) = result {
            tracing::warn!(error = %e, "vector graph dropped after a failed update; it will be rebuilt");
            *g = None;
        }
    }

    /// Saves the graph if enough was logged since its file that replaying it at the
    /// next start would cost more than saving now: at least
    /// [`GraphParams::checkpoint_min_keys`] keys, and a quarter of the graph or
    /// [`GraphParams::checkpoint_max_replay_bytes`] of vectors, whichever is fewer
    /// (a start reads the logged vectors back before its first query). A failed save
    /// is logged; it loses nothing (the log still holds every write).
    pub(crate) fn maybe_checkpoint(&self, writer: MutexGuard<'_, ()>, store: &Store) {
        let (size, dimensions) = {
            let g = self.graph.read().unwrap_or_else(|e| e.into_inner());
            match g.as_ref() {
                Some(g) => (g.in_graph(), g.shape.dimensions),
                None => return,
            }
        };
        let by_bytes = store.params.checkpoint_max_replay_bytes / (4 * dimensions.max(1));
        let due = store
            .params
            .checkpoint_min_keys
            .max((size / 4).min(by_bytes));
        if self.logged.load(Ordering::Relaxed) >= due {
            self.checkpoint_logged(writer, store);
        }
    }

    fn checkpoint_logged(&self, writer: MutexGuard<'_, ()>, store: &Store) {
        warn_if_unsaved(self.checkpoint(writer, store));
    }

    /// Writes the graph file and records it in SQLite. The graph is serialized under
    /// the writer lock, so its bytes match the log's sequence number, and the lock is
    /// given up before the file is written and synced: at 1M × 384 that is 1.7 GB and
    /// seconds that writes no longer wait for (later writes log later sequence
    /// numbers, which the checkpoint does not cover). Saves are serialized by `saving`,
    /// so files and checkpoints land in the order their snapshots were taken.
    pub(crate) fn checkpoint(&self, writer: MutexGuard<'_, ()>, store: &Store) -> Result<()> {
        let _saving = self.lock_saving();
        let snapshot = self.snapshot(&writer, store)?;
        drop(writer);
        snapshot.map_or(Ok(()), |s| self.save(s, store))
    }

    /// [`Self::checkpoint`] keeping the writer lock (a caller that only borrows it).
    fn checkpoint_held(&self, writer: &MutexGuard<'_, ()>, store: &Store) {
        let _saving = self.lock_saving();
        warn_if_unsaved(
            self.snapshot(writer, store)
                .and_then(|s| s.map_or(Ok(()), |s| self.save(s, store))),
        );
    }

    /// The graph's bytes and header, if it is to be saved (the caller holds the writer
    /// lock). Only a thawed graph without a tail is saved: the tail's keys may be older
    /// than the log, and a view's file is already saved.
    fn snapshot(&self, _writer: &MutexGuard<'_, ()>, store: &Store) -> Result<Option<Snapshot>> {
        let g = self.graph.read().unwrap_or_else(|e| e.into_inner());
        let Some(graph) = g.as_ref() else {
            return Ok(None);
        };
        if !graph.tail.is_empty() || graph.ann.frozen() {
            return Ok(None);
        }
        let shape = graph.shape;
        let seq = {
            let conn = store.conn();
            if !index_exists(&conn, shape.index_id)? {
                return Ok(None); // deleted meanwhile: no file for it
            }
            graph_log::latest(&conn, shape.index_id)?
        };
        let started = Instant::now();
        let bytes = graph.ann.to_bytes()?;
        let header = Header {
            index_id: shape.index_id,
            dimensions: shape.dimensions as u32,
            metric: shape.metric.code(),
            connectivity: store.params.connectivity as u32,
            seq,
            vectors: graph.ann.len() as u64,
        };
        let covered = self.logged.load(Ordering::Relaxed);
        Ok(Some(Snapshot {
            header,
            bytes,
            covered,
            started,
        }))
    }

    fn save(&self, s: Snapshot, store: &Store) -> Result<()> {
        let id = s.header.index_id;
        graph_file::write(&store.dir, &s.header, &s.bytes)
            .map_err(|e| VectorError::Graph(format!("cannot save the graph file: {e}")))?;
        graph_log::record(&mut store.conn(), id, s.header.seq)?;
        // Keys logged since the snapshot still count towards the next save.
        let _ = self
            .logged
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                Some(n.saturating_sub(s.covered))
            });
        self.checkpoints.fetch_add(1, Ordering::Relaxed);
        tracing::info!(
            index = id,
            vectors = s.header.vectors,
            bytes = s.bytes.len(),
            ms = s.started.elapsed().as_millis() as u64,
            "vector graph saved"
        );
        Ok(())
    }

    /// Replaces a frozen view with writes pending by a writable copy without its masked
    /// keys. The caller holds the writer lock, so no write lands between the copy and
    /// the swap; queries go on reading the view while it is copied.
    fn thaw(&self, _writer: &MutexGuard<'_, ()>) -> Result<()> {
        let started = Instant::now();
        let copy = {
            let g = self.graph.read().unwrap_or_else(|e| e.into_inner());
            let pending = |g: &&Graph| !g.tail.is_empty() || !g.masked.is_empty();
            let Some(graph) = g.as_ref().filter(|g| g.ann.frozen()).filter(pending) else {
                return Ok(());
            };
            let copy = graph.ann.thaw()?;
            for k in &graph.masked {
                copy.remove(*k)?;
            }
            copy
        };
        let mut g = self.graph.write().unwrap_or_else(|e| e.into_inner());
        if let Some(graph) = g.as_mut() {
            graph.ann = copy;
            graph.masked.clear();
            tracing::info!(
                index = graph.shape.index_id,
                vectors = graph.ann.len(),
                ms = started.elapsed().as_millis() as u64,
                "vector graph made writable"
            );
        }
        Ok(())
    }

    /// Thaws a view, then moves up to [`DRAIN_CHUNK`] vectors of the tail into the
    /// graph; saves the graph once the tail is empty. Returns how many are left.
    pub(crate) fn drain(&self, store: &Store) -> Result<usize> {
        let w = self.lock_writer();
        self.thaw(&w)?;
        let chunk: Vec<(u64, Vec<f32>)> = {
            let g = self.graph.read().unwrap_or_else(|e| e.into_inner());
            let Some(graph) = g.as_ref() else {
                return Ok(0);
            };
            graph
                .tail
                .iter()
                .take(DRAIN_CHUNK)
                .map(|(k, v)| (*k, v.clone()))
                .collect()
        };
        if chunk.is_empty() {
            return Ok(0);
        }
        let left = {
            // Inserted under the write lock, like `apply`'s: usearch's base-layer search
            // reads neighbour lists unlocked ("assuming read-only simultaneous access"),
            // and an insert links a node on its upper levels before its base one and
            // rewrites neighbours' lists in place, so a query beside it could stop at an
            // unlinked node (1 candidate instead of ef: recall collapsed) or race a
            // rewrite (undefined behaviour). Queries wait for one chunk at most.
            let mut g = self.graph.write().unwrap_or_else(|e| e.into_inner());
            let Some(graph) = g.as_mut() else {
                return Ok(0);
            };
            graph.ann.reserve(graph.ann.len() + chunk.len())?;
            let items: Vec<(u64, &[f32])> = chunk.iter().map(|(k, v)| (*k, v.as_slice())).collect();
            add_parallel(graph.ann.as_ref(), &items)?;
            for (k, _) in &chunk {
                graph.tail.remove(k);
            }
            graph.tail.len()
        };
        if left == 0 {
            self.checkpoint(w, store)?;
        }
        Ok(left)
    }
}

/// A failed save loses nothing (the log still holds every write); it is only logged.
fn warn_if_unsaved(saved: Result<()>) {
    if let Err(e) = saved {
        tracing::warn!(error = %e, "vector graph not saved; the next start replays more of the log");
    }
}

/// Adds `items` to `graph` from one thread per core (usearch inserts concurrently).
fn add_parallel(graph: &dyn AnnGraph, items: &[(u64, &[f32])]) -> Result<()> {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    if threads == 1 || items.len() < 64 {
        return items.iter().try_for_each(|(k, v)| graph.add(*k, v));
    }
    let chunk = items.len().div_ceil(threads);
    std::thread::scope(|s| {
        let handles: Vec<_> = items
            .chunks(chunk)
            .map(|part| s.spawn(move || part.iter().try_for_each(|(k, v)| graph.add(*k, v))))
            .collect();
        handles.into_iter().try_for_each(|h| {
            h.join().unwrap_or_else(|_| {
                Err(crate::VectorError::Graph(
                    "an insert thread panicked".into(),
                ))
            })
        })
    })
}

/// The live indexes by their row id.
#[derive(Default)]
pub(crate) struct LiveSet(Mutex<HashMap<i64, Arc<LiveIndex>>>);

impl LiveSet {
    pub(crate) fn get(&self, index_id: i64) -> Arc<LiveIndex> {
        let mut map = self.0.lock().unwrap_or_else(|e| e.into_inner());
        map.entry(index_id).or_default().clone()
    }

    /// The live index of `index_id` if it is in memory (the worker drains only those).
    pub(crate) fn existing(&self, index_id: i64) -> Option<Arc<LiveIndex>> {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&index_id)
            .cloned()
    }

    pub(crate) fn forget(&self, index_id: i64) {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&index_id);
    }
}

/// Deletes the graph file of a deleted index (after its rows are gone).
pub(crate) fn forget_file(dir: &Path, index_id: i64) {
    graph_file::remove(dir, index_id);
}

#[cfg(test)]
#[path = "live_tests.rs"]
mod tests;
