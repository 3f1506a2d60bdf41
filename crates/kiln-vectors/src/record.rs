//! The values the index takes and gives: vectors, queries, matches, index descriptions.

use serde_json::{Map, Value};

use crate::filter::Filter;
use crate::metric::Metric;

/// One vector as written and read back.
#[derive(Debug, Clone, PartialEq)]
pub struct VectorRecord {
    pub id: String,
    pub values: Vec<f32>,
    pub namespace: Option<String>,
    pub metadata: Option<Map<String, Value>>,
}

/// Insert keeps a vector whose id exists (Vectorize's `insert`); upsert replaces it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteMode {
    Insert,
    Upsert,
}

/// A committed write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mutation {
    pub mutation_id: String,
    /// Vectors written or deleted.
    pub count: usize,
}

/// Which metadata a match carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ReturnMetadata {
    #[default]
    None,
    /// Only properties with a metadata index.
    Indexed,
    All,
}

/// A nearest-neighbour query.
#[derive(Debug, Clone, PartialEq)]
pub struct Query {
    pub vector: Vec<f32>,
    pub top_k: usize,
    pub namespace: Option<String>,
    pub filter: Option<Filter>,
    pub return_values: bool,
    pub return_metadata: ReturnMetadata,
}

/// One result of a query, closest first.
#[derive(Debug, Clone, PartialEq)]
pub struct Match {
    pub id: String,
    pub score: f32,
    pub namespace: Option<String>,
    pub values: Option<Vec<f32>>,
    pub metadata: Option<Map<String, Value>>,
}

/// An index as created.
#[derive(Debug, Clone, PartialEq)]
pub struct IndexDesc {
    pub name: String,
    pub description: Option<String>,
    pub dimensions: usize,
    pub metric: Metric,
    /// Unix seconds.
    pub created_at: u64,
    pub modified_at: u64,
    /// Where its vectors live: [`EMBEDDED`], or a remote engine's name (`qdrant`).
    pub backend: String,
}

/// The backend of an index kept here (SQLite and an HNSW graph).
pub const EMBEDDED: &str = "embedded";

/// An index's contents and its last applied write.
#[derive(Debug, Clone, PartialEq)]
pub struct IndexInfo {
    pub dimensions: usize,
    pub vector_count: u64,
    /// Writes are applied when acknowledged, so this is the last acknowledged one.
    pub processed_up_to_mutation: Option<String>,
    pub processed_up_to_datetime: Option<u64>,
}

/// The type of values a metadata index holds (values of other types are not indexed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetaType {
    String,
    Number,
    Boolean,
}

impl MetaType {
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "string" => Some(Self::String),
            "number" => Some(Self::Number),
            "boolean" => Some(Self::Boolean),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::String => "string",
            Self::Number => "number",
            Self::Boolean => "boolean",
        }
    }
}

/// A declared metadata index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetadataIndex {
    pub property: String,
    pub index_type: MetaType,
}
