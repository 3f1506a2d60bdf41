//! Vector stores' [`Embedder`] over the first embedding model served: leases, admission,
//! the encoder's turn queue and metering, exactly as `/v1/embeddings` gets them;
//! ingestion is metered as background (batch) usage.

use std::ops::Range;
use std::sync::Arc;

use futures_util::future::BoxFuture;
use kiln_api::Caller;
use kiln_api::{ClassifiedError, ErrorKind};
use kiln_host::{Lease, ModelKind};
use kiln_rag::{EmbedError, Embedder, EmbedderInfo};

use crate::call::{Call, RequestClass};
use crate::error::GenerateError;
use crate::generator::{admit, Generator};

/// The generator as the vector stores' embedder.
pub struct StoreEmbedder(pub Arc<Generator>);

impl StoreEmbedder {
    /// A lease on the embedding model for `caller`.
    fn lease(
        &self,
        caller: Caller,
        class: RequestClass,
    ) -> impl std::future::Future<Output = Result<Lease, EmbedError>> + 'static {
        let generator = self.0.clone();
        async move {
            let hosted = generator.resolve_for(None, ModelKind::Embed).map_err(|e| {
                EmbedError::Input(format!(
                    "vector stores need an embedding model and this server serves none ({e}); \
                     start it with --model all-minilm-l6-v2"
                ))
            })?;
            let call = Call::new(caller, class);
            generator
                .lease_hosted(hosted, &call)
                .await
                .map_err(embed_error)
        }
    }
}

impl Embedder for StoreEmbedder {
    fn info(&self) -> BoxFuture<'static, Result<EmbedderInfo, EmbedError>> {
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
    ) -> BoxFuture<'static, Result<Vec<Range<usize>>, EmbedError>> {
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
    ) -> BoxFuture<'static, Result<Vec<Vec<f32>>, EmbedError>> {
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
            e.run::<_, GenerateError, _>(lease, permit, move |m| {
                let out = m
                    .embed(&texts, true)
                    .map_err(|e| GenerateError::Internal(e.to_string()))?;
                let tokens = out.total_tokens();
                Ok((out.vectors, tokens))
            })
            .await
            .map_err(embed_error)
        })
    }
}

/// A client-side failure (4xx) is the input's fault; anything else the model's.
fn embed_error(e: GenerateError) -> EmbedError {
    let message = e.safe_message();
    match e.error_kind() {
        ErrorKind::Internal | ErrorKind::Unavailable | ErrorKind::Upstream => {
            EmbedError::Model(message)
        }
        _ => EmbedError::Input(message),
    }
}
