//! Kiln's embedded vector index, the store behind the Vectorize API and vector stores.
//!
//! SQLite is the system of record: every index, vector (id, namespace, values,
//! metadata) and declared metadata index lives in one database file, and a write is
//! acknowledged only after its transaction commits, so a crash never loses an
//! acknowledged mutation. Declared metadata indexes are real columns with SQL indexes.
//!
//! Approximate search runs on an HNSW graph per index (`usearch`, behind the small
//! [`graph`] trait), saved to a graph file at checkpoints and loaded at start with the
//! writes logged since replayed (`graph_file`, `graph_log`); vectors not yet in the
//! graph, and small indexes, are searched exactly (`search`). Filters are applied
//! before top-K: a selective filter's candidates are scored exactly; a broad one
//! searches the graph with a membership predicate.
//!
//! An index can instead live on a remote engine (Qdrant, through `kiln-qdrant`) behind
//! the same calls ([`RemoteIndexes`]); SQLite then keeps only its row.
//!
//! Everything here is synchronous; servers call it from blocking threads.

mod db;
mod error;
mod filter;
mod graph;
mod graph_file;
mod graph_load;
mod graph_log;
mod limits;
mod live;
mod metric;
mod mutate;
mod query;
mod record;
mod remote;
mod schema;
mod search;
mod worker;

pub use db::VectorDb;
pub use error::VectorError;
pub use filter::{Filter, Op, Scalar};
pub use limits::{GraphParams, Limits};
pub use live::GraphStats;
pub use metric::Metric;
pub use record::{
    IndexDesc, IndexInfo, Match, MetaType, MetadataIndex, Mutation, Query, ReturnMetadata,
    VectorRecord, WriteMode, EMBEDDED,
};
pub use remote::{collection, RemoteIndexes};
