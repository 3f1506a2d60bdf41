//! Encoder models (embeddings, text classification) as Kiln hosts them.
//!
//! An encoder has no engine: one request is one call into `kiln-encoder`, a forward pass
//! over all its texts on the model's own worker pool. That call is CPU-bound for up to
//! seconds, so it runs on a blocking thread, never on the async workers. At most
//! [`CONCURRENT_PASSES`] calls per model run at once; further requests wait for a turn
//! without holding a thread (the admission queue bounds how many wait).

use std::path::Path;
use std::sync::Arc;

use kiln_formats::{SafetensorsFile, StDtype};
use tokio::sync::Semaphore;

/// Calls that run at once per model: two, so one request's tokenization overlaps
/// another's forward pass. More would only interleave passes on the same worker pool,
/// delaying every one of them.
pub const CONCURRENT_PASSES: usize = 2;

/// What an encoder's weights take once loaded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EncoderWeights {
    /// Floating-point weights (integer tensors such as position ids not counted).
    pub parameters: u64,
    /// Bytes they take in memory: `kiln-encoder` decodes every weight into f32.
    pub bytes: u64,
}

impl EncoderWeights {
    /// Counts the float tensors of a safetensors file (reads only its header).
    pub fn read(path: &Path) -> Result<Self, String> {
        let file = SafetensorsFile::open(path).map_err(|e| e.to_string())?;
        let mut parameters = 0u64;
        for t in file.tensors() {
            let t = t.map_err(|e| e.to_string())?;
            if matches!(
                t.dtype,
                StDtype::F16 | StDtype::BF16 | StDtype::F32 | StDtype::F64
            ) {
                parameters = parameters.saturating_add(t.n_elements());
            }
        }
        Ok(Self {
            parameters,
            bytes: parameters.saturating_mul(4),
        })
    }
}

/// A loaded encoder model with what hosting needs around it.
pub struct Encoder<M> {
    model: M,
    weights: EncoderWeights,
    passes: Arc<Semaphore>,
}

impl<M: Send + Sync + 'static> Encoder<M> {
    pub fn new(model: M, weights: EncoderWeights) -> Self {
        Self {
            model,
            weights,
            passes: Arc::new(Semaphore::new(CONCURRENT_PASSES)),
        }
    }

    pub fn model(&self) -> &M {
        &self.model
    }

    pub fn weights(&self) -> EncoderWeights {
        self.weights
    }

    /// Gate of the passes that run at once ([`CONCURRENT_PASSES`]).
    pub(crate) fn passes(&self) -> &Arc<Semaphore> {
        &self.passes
    }
}
