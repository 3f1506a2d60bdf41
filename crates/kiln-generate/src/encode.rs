//! [`Generator::embed`] and [`Generator::classify`]: encoder requests, one forward pass
//! each on a blocking thread under the model's lease and admission (no engine).

use std::sync::Arc;

use kiln_host::HostedModel;

use crate::call::Call;
use crate::encode_checks::input_error;
use crate::error::{GenerateError, Result};
use crate::generator::{admit, Generator};

/// How a request asks for over-long inputs to be cut.
#[derive(Debug, Clone, Copy)]
pub enum Truncation {
    /// A plain flag (Workers AI's `truncate_inputs`).
    Flag(bool),
    /// Kiln's `truncate`, or vLLM's `truncate_prompt_tokens` (-1 or the model's maximum).
    OpenAi {
        truncate: Option<bool>,
        prompt_tokens: Option<i64>,
    },
}

impl Truncation {
    /// Whether to truncate to the model's maximum `max`; the model only cuts to its
    /// maximum, keeping the first tokens, so other lengths are refused.
    fn resolve(self, max: usize) -> Result<bool> {
        match self {
            Truncation::Flag(t) => Ok(t),
            Truncation::OpenAi {
                truncate,
                prompt_tokens: None,
            } => Ok(truncate.unwrap_or(false)),
            Truncation::OpenAi {
                prompt_tokens: Some(k),
                ..
            } if k == -1 || k == max as i64 => Ok(true),
            Truncation::OpenAi {
                prompt_tokens: Some(k),
                ..
            } => Err(GenerateError::invalid(
                "truncate_prompt_tokens",
                format!(
                    "this model truncates inputs only to its maximum of {max} tokens (keeping \
                     the first ones); set `truncate_prompt_tokens` to -1 or {max}, or \
                     `truncate: true`, not {k}"
                ),
            )),
        }
    }
}

/// Texts to encode, and how an error about them names the request's fields.
#[derive(Debug, Clone)]
pub struct EncodeInput {
    pub texts: Vec<String>,
    /// The field the texts came from (`input`, `text`).
    pub param: &'static str,
    /// Whether the field held one string rather than a list (for error messages).
    pub single: bool,
    pub truncation: Truncation,
    /// The field that asks for truncation, named in an over-long input's error.
    pub truncate_field: &'static str,
}

/// How an encoder's error about the input names the request's fields.
#[derive(Clone, Copy)]
struct InputNames {
    param: &'static str,
    single: bool,
    truncate_field: &'static str,
}

impl InputNames {
    fn error(self, e: kiln_encoder::Error) -> GenerateError {
        input_error(e, self.param, self.single, self.truncate_field)
    }
}

impl EncodeInput {
    /// The texts, whether to truncate them to the model's maximum `max`, and the names
    /// their errors use.
    fn split(self, max: usize) -> Result<(Vec<String>, bool, InputNames)> {
        let truncate = self.truncation.resolve(max)?;
        let names = InputNames {
            param: self.param,
            single: self.single,
            truncate_field: self.truncate_field,
        };
        Ok((self.texts, truncate, names))
    }
}

/// One embeddings request, typed.
#[derive(Clone)]
pub struct EmbedRequest {
    pub hosted: Arc<HostedModel>,
    pub input: EncodeInput,
    /// The size asked for; only the model's own is served.
    pub dimensions: Option<u64>,
}

/// The vectors, in input order, with the model and the tokens read.
#[derive(Debug, Clone)]
pub struct Embedded {
    pub model: String,
    pub dim: usize,
    pub vectors: Vec<Vec<f32>>,
    pub tokens: usize,
}

/// One classification request, typed: one text.
#[derive(Clone)]
pub struct ClassifyRequest {
    pub hosted: Arc<HostedModel>,
    pub input: EncodeInput,
}

/// Each label's probability, highest first, and the tokens read.
#[derive(Debug, Clone)]
pub struct Classified {
    pub scores: Vec<(String, f32)>,
    pub tokens: usize,
}

impl Generator {
    /// Embeds `req`'s texts on its embedding model, metered to `call`'s caller.
    pub async fn embed(&self, req: EmbedRequest, call: &Call) -> Result<Embedded> {
        let lease = self.lease_hosted(req.hosted, call).await?;
        let embedder = lease.embedder()?;
        let (dim, max) = (embedder.model().dim(), embedder.model().max_tokens());
        if let Some(d) = req.dimensions.filter(|&d| d != dim as u64) {
            return Err(GenerateError::invalid(
                "dimensions",
                format!(
                    "this model's embeddings have a fixed size of {dim}; `dimensions` must be \
                     {dim} or left out, not {d}"
                ),
            ));
        }
        let (texts, truncate, names) = req.input.split(max)?;
        let model = lease.hosted().name.clone();
        let permit = admit(lease.hosted(), 1, false)?;
        let (vectors, tokens) = embedder
            .run::<_, GenerateError, _>(lease, permit, move |m| {
                let out = m.embed(&texts, truncate).map_err(|e| names.error(e))?;
                let tokens = out.total_tokens();
                Ok(((out.vectors, tokens), tokens))
            })
            .await?;
        Ok(Embedded {
            model,
            dim,
            vectors,
            tokens,
        })
    }

    /// Classifies `req`'s one text on its classification model.
    pub async fn classify(&self, req: ClassifyRequest, call: &Call) -> Result<Classified> {
        let lease = self.lease_hosted(req.hosted, call).await?;
        let classifier = lease.classifier()?;
        let permit = admit(lease.hosted(), 1, false)?;
        let (texts, truncate, names) = req.input.split(usize::MAX)?;
        classifier
            .run::<_, GenerateError, _>(lease, permit, move |m| {
                let out = m.classify(&texts, truncate).map_err(|e| names.error(e))?;
                let first = out.into_iter().next().ok_or_else(|| {
                    GenerateError::Internal("the classifier returned no result".into())
                })?;
                let scores = first
                    .scores
                    .into_iter()
                    .map(|s| (s.label, s.score))
                    .collect();
                let tokens = first.tokens;
                Ok((Classified { scores, tokens }, tokens))
            })
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kiln_api::ClassifiedError;

    #[test]
    fn truncation_is_to_the_model_maximum_only() {
        let openai = |truncate, prompt_tokens| Truncation::OpenAi {
            truncate,
            prompt_tokens,
        };
        assert_eq!(openai(None, None).resolve(256).ok(), Some(false));
        assert_eq!(openai(Some(true), None).resolve(256).ok(), Some(true));
        assert_eq!(openai(None, Some(-1)).resolve(256).ok(), Some(true));
        assert_eq!(openai(Some(false), Some(256)).resolve(256).ok(), Some(true));
        for k in [0, 10, 257, -2] {
            let e = openai(None, Some(k))
                .resolve(256)
                .err()
                .and_then(|e| e.param());
            assert_eq!(e.as_deref(), Some("truncate_prompt_tokens"));
        }
        assert_eq!(Truncation::Flag(true).resolve(8).ok(), Some(true));
    }
}
