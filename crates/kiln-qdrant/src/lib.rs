//! Kiln's vector indexes on Qdrant, for when one node's embedded index is not enough:
//! [`QdrantIndexes`] implements `kiln-vectors`' `RemoteIndexes` over the official
//! `qdrant-client` (gRPC), so the Vectorize API serves an index created with
//! `config.backend: "qdrant"` exactly as an embedded one. Every field is checked by
//! `kiln-vectors` before it reaches here.
//!
//! One index is one collection with one unnamed dense vector. A point carries the
//! vector's id, namespace and metadata in its payload (`id`, `namespace`, `metadata`);
//! its Qdrant id is a UUID derived from the vector's id, so an upsert replaces it.
//! Vectorize's filters become Qdrant filters on `metadata.<path>`; metadata indexes
//! become payload indexes. Writes wait for Qdrant's acknowledgement.

mod convert;
mod indexes;

pub use indexes::{QdrantError, QdrantIndexes};
