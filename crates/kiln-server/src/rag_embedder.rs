//! Vector stores' [`Embedder`] over the server's first embedding model: leases,
//! admission, the encoder's turn queue and metering, exactly as `/v1/embeddings` gets
//! them; ingestion is metered as background (batch) usage.

use std::ops::Range;
use std::path::Path;
use std::sync::{Arc, Weak};

use futures_util::future::BoxFuture;
use kiln_files::FileStore;
use kiln_host::{Lease, ModelKind};
use kiln_http::OpenAiError;
use kiln_rag::{EmbedError, Embedder, EmbedderInfo, VectorStores};
use kiln_usage::Caller;
use kiln_vectors::VectorDb;

use crate::error::{ApiError, Result};
use crate::lease::{CallContext, RequestClass};
use crate::routes::admit;
use crate::state::{AppState, Inner};

/// The vector stores' directory in the data directory.
pub const VECTOR_STORES_DIR: &str = "vector_stores";

/// Serves vector stores on `state` from `dir`, over `vectors` and `files` (call on the
/// runtime, before serving).
pub fn enable_vector_stores(
    state: &AppState,
    dir: &Path,
    vectors: VectorDb,
    files: Arc<FileStore>,
) -> Result<()> {
    let embedder = Arc::new(ServerEmbedder(state.downgrade()));
    let stores = VectorStores::open(
        &dir.join(VECTOR_STORES_DIR),
        vectors,
        files,
        embedder,
        Default::default(),
    )?;
    stores.start();
    state.set_vector_stores(stores);
    Ok(())
}

/// Holds the state weakly: the state owns the vector stores, which own this.
struct ServerEmbedder(Weak<Inner>);

impl ServerEmbedder {
    /// A lease on the embedding model for `caller`.
    fn lease(
        &self,
        caller: Caller,
        class: RequestClass,
    ) -> impl std::future::Future<Output = std::result::Result<Lease, EmbedError>> + 'static {
        let state = self.0.upgrade().map(AppState::from_inner);
        async move {
            let state =
                state.ok_or_else(|| EmbedError::Model("the server is shutting down".into()))?;
            let hosted = state.resolve_for(None, ModelKind::Embed).map_err(|e| {
                EmbedError::Input(format!(
                    "vector stores need an embedding model and this server serves none ({e}); \
                     start it with --model all-minilm-l6-v2"
                ))
            })?;
            let ctx = CallContext {
                caller,
                warmth: Default::default(),
                class,
            };
            state.lease_hosted(hosted, &ctx).await.map_err(embed_error)
        }
    }
}

impl Embedder for ServerEmbedder {
    fn info(&self) -> BoxFuture<'static, std::result::Result<EmbedderInfo, EmbedError>> {
        let lease = self.lease(Caller::anonymous(), RequestClass::Interactive);
        Box::pin(async move {
            let lease = lease.await?;
            let e = lease.embedder().map_err(|e| embed_error(e.into()))?;
            Ok(EmbedderInfo {
                model: lease.hosted().name.clone(),
                dimensions: e.model().dim(),
                max_text_tokens: e.model().max_text_tokens(),
            })
        })
    }

    fn token_spans(
        &self,
        text: Arc<str>,
    ) -> BoxFuture<'static, std::result::Result<Vec<Range<usize>>, EmbedError>> {
        let lease = self.lease(Caller::anonymous(), RequestClass::Batch);
        Box::pin(async move {
            let lease = lease.await?;
            let e = lease.embedder().map_err(|e| embed_error(e.into()))?;
            // The lease is held until the tokenizer is done, so the model stays loaded.
            tokio::task::spawn_blocking(move || {
                let _lease = lease;
                e.model().token_spans(&text)
            })
            .await
            .map_err(|e| EmbedError::Model(format!("tokenizing failed: {e}")))?
            .map_err(|e| EmbedError::Input(format!("cannot tokenize the text: {e}")))
        })
    }

    fn embed(
        &self,
        caller: &Caller,
        texts: Vec<String>,
        background: bool,
    ) -> BoxFuture<'static, std::result::Result<Vec<Vec<f32>>, EmbedError>> {
        let class = if background {
            RequestClass::Batch
        } else {
            RequestClass::Interactive
        };
        let lease = self.lease(caller.clone(), class);
        Box::pin(async move {
            let lease = lease.await?;
            let e = lease.embedder().map_err(|e| embed_error(e.into()))?;
            let permit = admit(lease.hosted(), 1, false).map_err(embed_error)?;
            e.run::<_, ApiError, _>(lease, permit, move |m| {
                let out = m
                    .embed(&texts, true)
                    .map_err(|e| ApiError::Internal(e.to_string()))?;
                let tokens = out.total_tokens();
                Ok((out.vectors, tokens))
            })
            .await
            .map_err(embed_error)
        })
    }
}

/// A client-side failure (4xx) is the input's fault; anything else the model's.
fn embed_error(e: ApiError) -> EmbedError {
    if e.status().is_client_error() {
        EmbedError::Input(e.to_string())
    } else {
        EmbedError::Model(e.to_string())
    }
}
