//! Caps on what an index holds and a query asks, Cloudflare Vectorize's by default, and
//! the graph's parameters.

/// Caps; going past one is a [`crate::VectorError::Invalid`] naming it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Most dimensions an index may have (Vectorize: 1536).
    pub max_dimensions: usize,
    /// Most results a query may ask for (Vectorize: 100).
    pub max_top_k: usize,
    /// Most results when values or all metadata are returned (Vectorize: 20).
    pub max_top_k_with_payload: usize,
    /// Largest metadata object, as JSON bytes (Vectorize: 10 KiB).
    pub max_metadata_bytes: usize,
    /// Longest vector id and namespace, in bytes (Vectorize: 64).
    pub max_id_bytes: usize,
    /// Most metadata indexes per index (Vectorize: 10; the table has that many columns).
    pub max_metadata_indexes: usize,
    /// Most vectors one insert or upsert may carry (Vectorize's HTTP API: 5000).
    pub max_batch: usize,
    /// Most indexes one owner may have.
    pub max_indexes_per_owner: usize,
    /// Most vectors one index may hold.
    pub max_vectors_per_index: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_dimensions: 1536,
            max_top_k: 100,
            max_top_k_with_payload: 20,
            max_metadata_bytes: 10 << 10,
            max_id_bytes: 64,
            max_metadata_indexes: crate::schema::SLOTS,
            max_batch: 5000,
            max_indexes_per_owner: 100,
            max_vectors_per_index: 5_000_000,
        }
    }
}

/// HNSW parameters of every graph (see BENCHMARKS.md for how they were chosen).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GraphParams {
    /// Neighbours per node (HNSW's M).
    pub connectivity: usize,
    /// Candidate list while inserting (efConstruction).
    pub expansion_add: usize,
    /// The smallest candidate list while searching (ef); a query's ef grows from it
    /// with the index's size and top-K (the rule is in `search.rs`).
    pub expansion_search: usize,
    /// A filter with at most this many candidates is scored exactly instead of
    /// searching the graph (a graph walk that admits few nodes visits most of them).
    pub exact_scan_max: usize,
    /// An index of at most this many values (vectors × dimensions) is searched
    /// exactly, without the graph: 8M is about 2.5 ms a query on one AVX-512 core,
    /// less than a walk at the ef its recall needs. 0 always walks the graph.
    pub exact_search_max: usize,
    /// A graph is saved to its file once at least this many keys, and a quarter of
    /// the graph or `checkpoint_max_replay_bytes` of vectors (whichever is fewer),
    /// were written since its last save, bounding the log a start replays.
    pub checkpoint_min_keys: usize,
    /// The most vector bytes logged since a graph's last save before it is saved
    /// again: a start reads them back from SQLite before its first query (64 MiB is
    /// 43,690 vectors of 384 dimensions, about 0.1 s).
    pub checkpoint_max_replay_bytes: usize,
}

impl Default for GraphParams {
    fn default() -> Self {
        Self {
            connectivity: 16,
            expansion_add: 128,
            expansion_search: 128,
            exact_scan_max: 4096,
            exact_search_max: 8_000_000,
            checkpoint_min_keys: 10_000,
            checkpoint_max_replay_bytes: 64 << 20,
        }
    }
}
