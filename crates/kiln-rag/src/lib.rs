//! Retrieval without HTTP: OpenAI's vector stores over Kiln's one file store and its
//! embedded vector index.
//!
//! A store is a row here and a vector index in `kiln-vectors` (under an owner name of
//! its own, apart from the key's Vectorize indexes). Attaching a file queues it; a
//! background worker reads it from `kiln-files`, extracts its text (UTF-8, Markdown,
//! HTML stripped), cuts it into chunks by the embedder's own tokens, embeds them in
//! batches through the [`Embedder`] trait (which the server implements over its hosted
//! embedding model) and writes them to the index, the file's attributes as each
//! chunk's metadata. Searches embed the query, let the index apply attribute filters
//! before top-K, and return the chunks' text. Deleting an uploaded file goes through
//! here ([`VectorStores::delete_uploaded_file`]), so its chunks leave every store with
//! it, crash-safe. [`sources`] is how retrieved chunks reach a model (the Responses
//! API's `file_search` tool and chat's server-side tool).

mod attributes;
mod chunking;
mod db;
mod embedder;
mod error;
mod extract;
mod file_batches;
mod idle;
mod ingest;
mod page;
mod removal;
mod schema;
mod search;
mod service;
pub mod sources;
mod store_files;
mod tool;
mod views;

pub use embedder::{Embedder, EmbedderInfo};
pub use error::{EmbedError, RagError, Result};
pub use page::{ListQuery, Order};
pub use schema::{index_of, DB_FILE};
pub use search::{Hit, Search, MAX_RESULTS};
pub use service::{Limits, VectorStores};
pub use tool::FileSearchTool;
