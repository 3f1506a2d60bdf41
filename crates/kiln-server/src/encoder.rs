//! Encoder models (embeddings, text classification) as the server runs them.
//!
//! An encoder has no engine: one request is one call into `kiln-encoder`, a forward pass
//! over all its texts on the model's own worker pool. That call is CPU-bound for up to
//! seconds, so it runs on a blocking thread, never on the async workers. At most
//! [`CONCURRENT_PASSES`] calls per model run at once; further requests wait for a turn
//! without holding a thread (the admission queue bounds how many wait).

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use kiln_api::Usage;
use kiln_formats::{SafetensorsFile, StDtype};
use tokio::sync::Semaphore;

use crate::admission::Permit;
use crate::error::ApiError;
use crate::lease::Lease;

/// Calls that run at once per model: two, so one request's tokenization overlaps
/// another's forward pass. More would only interleave passes on the same worker pool,
/// delaying every one of them.
pub const CONCURRENT_PASSES: usize = 2;

/// Most inputs one request may carry (OpenAI's limit for embeddings).
pub const MAX_INPUTS: usize = 2048;

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

/// A loaded encoder model with what the server needs around it.
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

    /// Runs `f` on a blocking thread once a pass is free, and returns what it made.
    ///
    /// `f` returns its result and the tokens it read. On success the request is counted
    /// in the model's metrics and its usage (those tokens as prompt tokens, none
    /// generated) is recorded through `lease`. The lease and the admission permit are
    /// released only when `f` is done, so a client that goes away mid-pass neither frees
    /// its model for unloading nor its queue place before the work stops.
    pub async fn run<T, F>(
        self: &Arc<Self>,
        lease: Lease,
        permit: Permit,
        f: F,
    ) -> Result<T, ApiError>
    where
        T: Send + 'static,
        F: FnOnce(&M) -> Result<(T, usize), ApiError> + Send + 'static,
    {
        let arrived = Instant::now();
        let pass = self
            .passes
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| ApiError::Internal("the encoder's turn queue was closed".into()))?;
        let queued = arrived.elapsed();
        let me = self.clone();
        tokio::task::spawn_blocking(move || {
            let (_pass, _permit) = (pass, permit);
            let (out, tokens) = f(&me.model)?;
            let m = &lease.slot().metrics;
            m.request_queue_time.observe(queued);
            m.prompt_tokens.add(tokens as u64);
            m.success_stop.add(1);
            m.e2e_request_latency.observe(arrived.elapsed());
            lease.record_usage(&Usage::new(tokens as u64, 0, 0));
            Ok(out)
        })
        .await
        .map_err(|e| ApiError::Internal(format!("encoder task failed: {e}")))?
    }
}

/// Checks the number of inputs of a request (`param` names the field).
pub fn check_count(n: usize, param: &str) -> Result<(), ApiError> {
    if n == 0 {
        return Err(ApiError::invalid(
            param,
            format!("`{param}` must contain at least one text"),
        ));
    }
    if n > MAX_INPUTS {
        return Err(ApiError::invalid(
            param,
            format!("`{param}` has {n} texts; at most {MAX_INPUTS} are allowed per request"),
        ));
    }
    Ok(())
}

/// An encoder's error as the request's: an input that can't be read is a 400 on
/// `param` (`truncate_field` is how the endpoint asks for truncation); anything else
/// is the server's fault.
pub fn input_error(
    e: kiln_encoder::Error,
    param: &str,
    single: bool,
    truncate_field: &str,
) -> ApiError {
    let which = |index: usize| {
        if single {
            format!("`{param}`")
        } else {
            format!("`{param}[{index}]`")
        }
    };
    match e {
        kiln_encoder::Error::InputTooLong { index, tokens, max } => ApiError::invalid(
            param,
            format!(
                "{} has {tokens} tokens, more than this model's maximum of {max}; \
                 shorten it or set `{truncate_field}` to cut it to its first {max} tokens",
                which(index)
            ),
        ),
        kiln_encoder::Error::Tokenize { index, message } => ApiError::invalid(
            param,
            format!("cannot tokenize {}: {message}", which(index)),
        ),
        other => ApiError::Internal(other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_errors_name_the_field() {
        assert!(check_count(1, "input").is_ok());
        assert!(check_count(MAX_INPUTS, "input").is_ok());
        for n in [0, MAX_INPUTS + 1] {
            let e = check_count(n, "input").err().map(|e| e.param());
            assert_eq!(e, Some(Some("input".to_string())));
        }
        let long = || kiln_encoder::Error::InputTooLong {
            index: 3,
            tokens: 300,
            max: 256,
        };
        let e = input_error(long(), "input", false, "truncate");
        assert_eq!(e.param().as_deref(), Some("input"));
        let msg = e.to_string();
        assert!(
            msg.contains("`input[3]` has 300 tokens")
                && msg.contains("maximum of 256")
                && msg.contains("`truncate`"),
            "{msg}"
        );
        let msg = input_error(long(), "text", true, "truncate_inputs").to_string();
        assert!(msg.starts_with("`text` has 300 tokens"), "{msg}");
    }
}
