//! The one thing this crate needs from a model: token spans for chunking and vectors
//! for chunks and queries.
//!
//! The server implements [`Embedder`] over its hosted embedding model (leases,
//! admission, metering), so this crate never links the encoder or knows HTTP.

use std::ops::Range;
use std::sync::Arc;

use futures_util::future::BoxFuture;
use kiln_api::Caller;

use crate::error::EmbedError;

/// What a store records about the model that embedded it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EmbedderInfo {
    /// The model's catalogue name.
    pub model: String,
    pub dimensions: usize,
    /// Most text tokens one input may have (the model's limit less its special tokens).
    pub max_text_tokens: usize,
}

pub trait Embedder: Send + Sync + 'static {
    /// The model's name and shape (loading it if needed).
    fn info(&self) -> BoxFuture<'static, Result<EmbedderInfo, EmbedError>>;

    /// The byte range in `text` of each of its tokens, special tokens left out.
    fn token_spans(
        &self,
        text: Arc<str>,
    ) -> BoxFuture<'static, Result<Vec<Range<usize>>, EmbedError>>;

    /// One vector per text, metered to `caller` (as background work when
    /// `background`: ingestion, not a waiting client). A text over the model's limit
    /// is cut to its first tokens.
    fn embed(
        &self,
        caller: &Caller,
        texts: Vec<String>,
        background: bool,
    ) -> BoxFuture<'static, Result<Vec<Vec<f32>>, EmbedError>>;
}
