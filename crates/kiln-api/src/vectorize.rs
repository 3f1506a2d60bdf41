//! Cloudflare Vectorize's v2 REST shapes (without the account prefix): indexes,
//! metadata indexes, NDJSON vector lines, queries and their matches. Every answer is
//! wrapped in Cloudflare's envelope ([`Envelope`]).

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

pub use crate::workers_ai::AiRunEnvelope as Envelope;

/// `POST /vectorize/v2/indexes`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct CreateIndex {
    pub name: String,
    #[serde(default)]
    pub description: Option<String>,
    pub config: IndexConfig,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IndexConfig {
    pub dimensions: u64,
    pub metric: String,
    /// Kiln's extension: where the vectors live, `embedded` (the default) or `qdrant`
    /// (on a server started with `--qdrant-url`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backend: Option<String>,
}

/// An index as Vectorize describes it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IndexResult {
    pub name: String,
    pub description: Option<String>,
    pub config: IndexConfig,
    /// RFC 3339.
    pub created_on: String,
    pub modified_on: String,
}

/// A metadata index: `POST .../metadata_index/create` and each entry of the list.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MetadataIndex {
    pub property_name: String,
    pub index_type: String,
}

/// `POST .../metadata_index/delete`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MetadataIndexName {
    pub property_name: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MetadataIndexList {
    pub metadata_indexes: Vec<MetadataIndex>,
}

/// One line of an insert or upsert body, and a vector read back.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VectorLine {
    pub id: String,
    pub values: Vec<f32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map<String, Value>>,
}

/// What a write answers: the id of the mutation it committed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MutationResult {
    pub mutation_id: String,
    /// Kiln's addition: vectors written or deleted.
    pub count: usize,
}

/// `POST .../query`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct QueryRequest {
    pub vector: Vec<f32>,
    #[serde(default)]
    pub top_k: Option<u64>,
    #[serde(default)]
    pub return_values: bool,
    /// `none`, `indexed` or `all` (v1's `true`/`false` are read as `all`/`none`).
    #[serde(default)]
    pub return_metadata: Option<Value>,
    #[serde(default)]
    pub namespace: Option<String>,
    #[serde(default)]
    pub filter: Option<Value>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QueryResult {
    pub count: usize,
    pub matches: Vec<QueryMatch>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QueryMatch {
    pub id: String,
    pub score: f32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub values: Option<Vec<f32>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map<String, Value>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}

/// `POST .../get_by_ids` and `.../delete_by_ids`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Ids {
    pub ids: Vec<String>,
}

/// `GET .../info`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct IndexInfo {
    pub dimensions: u64,
    pub vector_count: u64,
    pub processed_up_to_datetime: Option<String>,
    pub processed_up_to_mutation: Option<String>,
}
