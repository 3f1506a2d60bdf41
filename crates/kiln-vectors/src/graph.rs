//! The approximate-search graph behind a small trait, so the ANN library (usearch
//! today) can change without touching storage, queries or the graph files. Keys are
//! the vectors' row keys in SQLite.

use std::sync::Arc;

use usearch::{Index, IndexOptions, MetricKind, ScalarKind};

use crate::error::{Result, VectorError};
use crate::graph_file::Mapped;
use crate::limits::GraphParams;
use crate::metric::Metric;

/// An HNSW graph over one index's vectors.
pub(crate) trait AnnGraph: Send + Sync {
    /// Makes room for `total` vectors before adding them.
    fn reserve(&self, total: usize) -> Result<()>;
    fn add(&self, key: u64, vector: &[f32]) -> Result<()>;
    fn remove(&self, key: u64) -> Result<()>;
    /// Up to `k` (key, distance) pairs, closest first, among keys `admit` accepts,
    /// walking the graph with a candidate list of `ef` (at least `k`).
    fn search(
        &self,
        query: &[f32],
        k: usize,
        ef: usize,
        admit: Option<&dyn Fn(u64) -> bool>,
    ) -> Result<Vec<(u64, f32)>>;
    /// The `k` closest (key, distance) pairs by scoring every vector (no graph walk).
    fn exact(&self, query: &[f32], k: usize) -> Result<Vec<(u64, f32)>>;
    /// The graph in the library's own encoding, for a graph file.
    fn to_bytes(&self) -> Result<Vec<u8>>;
    fn contains(&self, key: u64) -> bool;
    /// The vector stored under `key`, into `out`; false if absent.
    fn get(&self, key: u64, out: &mut [f32]) -> bool;
    fn len(&self) -> usize;
    /// Whether this is a read-only view of a graph file: searches work, `add`,
    /// `remove` and `reserve` fail.
    fn frozen(&self) -> bool;
    /// A writable copy of a frozen graph (the file's bytes copied into memory).
    fn thaw(&self) -> Result<Box<dyn AnnGraph>>;
}

/// usearch's HNSW, f32 storage.
pub(crate) struct Usearch {
    index: Index,
    /// The mapped graph file a view reads. Declared after `index` so it is dropped
    /// after it: the view points into the mapping.
    mapped: Option<Arc<Mapped>>,
    dimensions: usize,
    metric: Metric,
    params: GraphParams,
}

/// Concurrent operations usearch keeps a context for; a call beyond them fails, so
/// this is well above the blocking threads that query one index at once.
const THREADS: usize = 64;

fn graph_err(e: impl std::fmt::Display) -> VectorError {
    VectorError::Graph(e.to_string())
}

impl Usearch {
    pub(crate) fn new(dimensions: usize, metric: Metric, params: &GraphParams) -> Result<Self> {
        let options = IndexOptions {
            dimensions,
            metric: match metric {
                Metric::Cosine => MetricKind::Cos,
                Metric::Euclidean => MetricKind::L2sq,
                Metric::DotProduct => MetricKind::IP,
            },
            quantization: ScalarKind::F32,
            connectivity: params.connectivity,
            expansion_add: params.expansion_add,
            expansion_search: params.expansion_search,
            multi: false,
        };
        Ok(Self {
            index: Index::new(&options).map_err(graph_err)?,
            mapped: None,
            dimensions,
            metric,
            params: *params,
        })
    }

    /// A graph from [`AnnGraph::to_bytes`] (already checksummed by its file).
    pub(crate) fn from_bytes(
        dimensions: usize,
        metric: Metric,
        params: &GraphParams,
        bytes: &[u8],
    ) -> Result<Self> {
        let graph = Self::new(dimensions, metric, params)?;
        graph.index.load_from_buffer(bytes).map_err(graph_err)?;
        graph.check_dimensions()?;
        // Loading sizes the graph to its contents; concurrent searches need contexts.
        graph
            .index
            .reserve_capacity_and_threads(graph.index.size().max(1024), THREADS)
            .map_err(graph_err)?;
        Ok(graph)
    }

    /// A read-only view of a verified graph file: no copy, so a start answers at once
    /// (pages are read as searches touch them); [`AnnGraph::thaw`] makes it writable.
    pub(crate) fn view(
        dimensions: usize,
        metric: Metric,
        params: &GraphParams,
        mapped: Arc<Mapped>,
    ) -> Result<Self> {
        let mut graph = Self::new(dimensions, metric, params)?;
        // A view keeps the thread contexts reserved before it (none can be added after).
        graph
            .index
            .reserve_capacity_and_threads(1024, THREADS)
            .map_err(graph_err)?;
        // SAFETY: usearch keeps pointers into the buffer; `mapped` holds the mapping
        // and is dropped after `index` (field order), and a graph file's bytes never
        // change while mapped (`graph_file`'s module doc).
        unsafe { graph.index.view_from_buffer(mapped.payload()) }.map_err(graph_err)?;
        graph.mapped = Some(mapped);
        graph.check_dimensions()?;
        Ok(graph)
    }

    fn check_dimensions(&self) -> Result<()> {
        if self.index.dimensions() != self.dimensions {
            return Err(graph_err("the saved graph has other dimensions"));
        }
        Ok(())
    }
}

impl AnnGraph for Usearch {
    fn reserve(&self, total: usize) -> Result<()> {
        if total > self.index.capacity() {
            // Grow geometrically: a reserve copies the graph's node table.
            let want = total.max(self.index.capacity() * 3 / 2).max(1024);
            self.index
                .reserve_capacity_and_threads(want, THREADS)
                .map_err(graph_err)?;
        }
        Ok(())
    }

    fn add(&self, key: u64, vector: &[f32]) -> Result<()> {
        self.index.add(key, vector).map_err(graph_err)
    }

    fn remove(&self, key: u64) -> Result<()> {
        self.index.remove(key).map(drop).map_err(graph_err)
    }

    fn search(
        &self,
        query: &[f32],
        k: usize,
        ef: usize,
        admit: Option<&dyn Fn(u64) -> bool>,
    ) -> Result<Vec<(u64, f32)>> {
        if k == 0 || self.index.size() == 0 {
            return Ok(Vec::new());
        }
        // usearch's candidate list is the larger of its `expansion_search` (kept at
        // the smallest ef) and the count asked, so asking for `ef` results searches
        // with ef without touching state other queries share.
        let count = ef.max(k);
        let m = match admit {
            None => self.index.search(query, count),
            Some(f) => self.index.filtered_search(query, count, f),
        }
        .map_err(graph_err)?;
        Ok(m.keys.into_iter().zip(m.distances).take(k).collect())
    }

    fn exact(&self, query: &[f32], k: usize) -> Result<Vec<(u64, f32)>> {
        if k == 0 || self.index.size() == 0 {
            return Ok(Vec::new());
        }
        let m = self.index.exact_search(query, k).map_err(graph_err)?;
        Ok(m.keys.into_iter().zip(m.distances).collect())
    }

    fn to_bytes(&self) -> Result<Vec<u8>> {
        let mut out = vec![0u8; self.index.serialized_length()];
        self.index.save_to_buffer(&mut out).map_err(graph_err)?;
        Ok(out)
    }

    fn contains(&self, key: u64) -> bool {
        self.index.contains(key)
    }

    fn get(&self, key: u64, out: &mut [f32]) -> bool {
        matches!(self.index.get(key, out), Ok(n) if n > 0)
    }

    fn len(&self) -> usize {
        self.index.size()
    }

    fn frozen(&self) -> bool {
        self.mapped.is_some()
    }

    fn thaw(&self) -> Result<Box<dyn AnnGraph>> {
        let Some(mapped) = &self.mapped else {
            return Err(graph_err("only a view of a graph file is thawed"));
        };
        let copy = Self::from_bytes(self.dimensions, self.metric, &self.params, mapped.payload())?;
        Ok(Box::new(copy))
    }
}
