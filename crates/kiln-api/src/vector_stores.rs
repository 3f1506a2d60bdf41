//! OpenAI's vector stores (`/v1/vector_stores`): stores, the files attached to them
//! (one at a time or in file batches), their chunking strategies and searches.
//!
//! Filters and attributes stay loose (`serde_json::Value`) in requests so the server
//! can name the exact field that is wrong.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// `POST /v1/vector_stores`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct CreateVectorStore {
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub description: Option<String>,
    /// Files to attach at once, as `POST .../files` would one by one.
    #[serde(default)]
    pub file_ids: Option<Vec<String>>,
    #[serde(default)]
    pub chunking_strategy: Option<Value>,
    #[serde(default)]
    pub expires_after: Option<ExpiresAfter>,
    #[serde(default)]
    pub metadata: Option<Map<String, Value>>,
}

/// `POST /v1/vector_stores/{id}`: a field left out is unchanged; `expires_after: null`
/// removes the expiry.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct ModifyVectorStore {
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default, deserialize_with = "present")]
    pub expires_after: Option<Option<ExpiresAfter>>,
    #[serde(default)]
    pub metadata: Option<Map<String, Value>>,
}

/// Tells a field given as `null` (`Some(None)`) from one left out (`None`).
fn present<'de, D, T>(d: D) -> Result<Option<Option<T>>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(d).map(Some)
}

/// A store expires `days` after it was last active.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExpiresAfter {
    /// Always `last_active_at`.
    pub anchor: String,
    pub days: u64,
}

/// A vector store.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VectorStore {
    pub id: String,
    pub object: String,
    pub created_at: u64,
    pub name: Option<String>,
    pub description: Option<String>,
    pub usage_bytes: u64,
    pub file_counts: FileCounts,
    /// `in_progress` while a file is being ingested, `completed`, or `expired`.
    pub status: String,
    pub expires_after: Option<ExpiresAfter>,
    pub expires_at: Option<u64>,
    pub last_active_at: Option<u64>,
    pub metadata: Map<String, Value>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileCounts {
    pub in_progress: u64,
    pub completed: u64,
    pub failed: u64,
    pub cancelled: u64,
    pub total: u64,
}

/// `POST /v1/vector_stores/{id}/files`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct AttachFile {
    #[serde(default)]
    pub file_id: Option<String>,
    #[serde(default)]
    pub attributes: Option<Value>,
    #[serde(default)]
    pub chunking_strategy: Option<Value>,
}

/// `POST /v1/vector_stores/{id}/files/{file_id}`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct UpdateFileAttributes {
    #[serde(default)]
    pub attributes: Option<Value>,
}

/// `POST /v1/vector_stores/{id}/file_batches`: `file_ids` sharing `attributes` and
/// `chunking_strategy`, or `files` each with its own.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct CreateFileBatch {
    #[serde(default)]
    pub file_ids: Option<Vec<String>>,
    #[serde(default)]
    pub files: Option<Vec<AttachFile>>,
    #[serde(default)]
    pub attributes: Option<Value>,
    #[serde(default)]
    pub chunking_strategy: Option<Value>,
}

/// A file in a vector store.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VectorStoreFile {
    pub id: String,
    pub object: String,
    pub created_at: u64,
    pub vector_store_id: String,
    /// `in_progress`, `completed`, `failed` or `cancelled`.
    pub status: String,
    pub usage_bytes: u64,
    pub last_error: Option<LastError>,
    pub chunking_strategy: ChunkingStrategy,
    pub attributes: Map<String, Value>,
}

/// Why a file failed: `server_error`, `unsupported_file` or `invalid_file`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LastError {
    pub code: String,
    pub message: String,
}

/// How a file was cut into chunks (always `static` here; `auto` is stored as the
/// static sizes it chose).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChunkingStrategy {
    #[serde(rename = "type")]
    pub kind: StaticKind,
    #[serde(rename = "static")]
    pub sizes: StaticChunking,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StaticKind {
    Static,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct StaticChunking {
    pub max_chunk_size_tokens: u64,
    pub chunk_overlap_tokens: u64,
}

/// A file batch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FileBatch {
    pub id: String,
    pub object: String,
    pub created_at: u64,
    pub vector_store_id: String,
    /// `in_progress` until every file has ended, then `completed` (or `cancelled`).
    pub status: String,
    pub file_counts: FileCounts,
}

/// `GET .../files/{file_id}/content`: the file's text as ingested.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FileContentPage {
    pub object: String,
    pub data: Vec<TextContent>,
    pub has_more: bool,
    pub next_page: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TextContent {
    #[serde(rename = "type")]
    pub kind: String,
    pub text: String,
}

impl TextContent {
    pub fn text(text: String) -> Self {
        Self {
            kind: "text".into(),
            text,
        }
    }
}

/// `POST /v1/vector_stores/{id}/search`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct SearchRequest {
    /// A string or a list of strings.
    #[serde(default)]
    pub query: Option<Value>,
    #[serde(default)]
    pub filters: Option<Value>,
    #[serde(default)]
    pub max_num_results: Option<u64>,
    #[serde(default)]
    pub ranking_options: Option<RankingOptions>,
    #[serde(default)]
    pub rewrite_query: Option<bool>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RankingOptions {
    #[serde(default)]
    pub ranker: Option<String>,
    #[serde(default)]
    pub score_threshold: Option<f64>,
}

/// One page of search results, best first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SearchPage {
    pub object: String,
    pub search_query: Vec<String>,
    pub data: Vec<SearchResult>,
    pub has_more: bool,
    pub next_page: Option<String>,
}

/// A chunk that matched a search.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SearchResult {
    pub file_id: String,
    pub filename: String,
    pub score: f64,
    pub attributes: Map<String, Value>,
    pub content: Vec<TextContent>,
}

/// `DELETE` of a store or of a store's file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Deleted {
    pub id: String,
    pub object: String,
    pub deleted: bool,
}
