//! `POST /v1/embeddings`, OpenAI's shape: `input` as one text or an array of texts,
//! `encoding_format` `float` or `base64` (the vector's little-endian f32 bytes),
//! `dimensions` accepted only when it is the model's own size, `user` ignored.
//!
//! An input over the model's limit is a 400 naming it, its length and the limit, unless
//! the request sets `truncate: true` (Kiln's extension) or vLLM's
//! `truncate_prompt_tokens: -1`: then it is cut to its first tokens, as
//! sentence-transformers does. Token-id inputs are refused: the model's tokenizer adds
//! its own special tokens around text, so ids from elsewhere would not mean the same.

use axum::extract::State;
use axum::Json;
use base64::Engine as _;
use kiln_api::embeddings::{
    Embedding, EmbeddingInput, EmbeddingVector, EmbeddingsRequest, EmbeddingsResponse,
    EmbeddingsUsage, EncodingFormat,
};
use kiln_host::ModelKind;

use super::admit;

use crate::encoder::{check_count, input_error};
use crate::error::ApiError;
use crate::extract::ApiJson;
use crate::lease::CallContext;
use crate::state::AppState;

pub async fn embeddings(
    State(state): State<AppState>,
    ctx: CallContext,
    ApiJson(req): ApiJson<EmbeddingsRequest>,
) -> Result<Json<EmbeddingsResponse>, ApiError> {
    let hosted = state.resolve_for(req.model.as_deref(), ModelKind::Embed)?;
    let (texts, single) = texts(req.input)?;
    let lease = state.lease_hosted(hosted, &ctx).await?;
    let embedder = lease.embedder()?;
    let (dim, max) = (embedder.model().dim(), embedder.model().max_tokens());
    if let Some(d) = req.dimensions.filter(|&d| d != dim as u64) {
        return Err(ApiError::invalid(
            "dimensions",
            format!(
                "this model's embeddings have a fixed size of {dim}; `dimensions` must be {dim} \
                 or left out, not {d}"
            ),
        ));
    }
    let truncate = truncation(req.truncate, req.truncate_prompt_tokens, max)?;
    let format = req.encoding_format.unwrap_or_default();
    let model = lease.hosted().name.clone();
    let permit = admit(lease.hosted(), 1, false)?;
    let (data, tokens) = embedder
        .run::<_, ApiError, _>(lease, permit, move |m| {
            let out = m
                .embed(&texts, truncate)
                .map_err(|e| input_error(e, "input", single, "truncate"))?;
            let tokens = out.total_tokens();
            let data: Vec<Embedding> = out
                .vectors
                .into_iter()
                .enumerate()
                .map(|(index, v)| Embedding {
                    object: "embedding".into(),
                    index,
                    embedding: encode(v, format),
                })
                .collect();
            Ok(((data, tokens), tokens))
        })
        .await?;
    Ok(Json(EmbeddingsResponse {
        object: "list".into(),
        data,
        model,
        usage: EmbeddingsUsage {
            prompt_tokens: tokens as u64,
            total_tokens: tokens as u64,
        },
    }))
}

/// The texts of `input`, and whether it was a single string (for error messages).
fn texts(input: EmbeddingInput) -> Result<(Vec<String>, bool), ApiError> {
    let (texts, single) = match input {
        EmbeddingInput::Text(t) => (vec![t], true),
        EmbeddingInput::Texts(v) => (v, false),
        // `[]` parses as an empty list of ids; it is an empty input all the same.
        EmbeddingInput::Tokens(ids) if ids.is_empty() => (Vec::new(), false),
        EmbeddingInput::Tokens(_) | EmbeddingInput::TokenBatches(_) => {
            return Err(ApiError::invalid(
                "input",
                "token-id input is not supported by this server's embedding models; send the \
                 text (a string or an array of strings)",
            ))
        }
    };
    check_count(texts.len(), "input")?;
    Ok((texts, single))
}

/// Whether to truncate over-long inputs: `truncate`, or vLLM's `truncate_prompt_tokens`
/// of `-1` (or the model's own maximum `max`). The model only cuts to its maximum,
/// keeping the first tokens, so other values are refused rather than half-honoured.
fn truncation(
    truncate: Option<bool>,
    truncate_prompt_tokens: Option<i64>,
    max: usize,
) -> Result<bool, ApiError> {
    match truncate_prompt_tokens {
        None => Ok(truncate.unwrap_or(false)),
        Some(k) if k == -1 || k == max as i64 => Ok(true),
        Some(k) => Err(ApiError::invalid(
            "truncate_prompt_tokens",
            format!(
                "this model truncates inputs only to its maximum of {max} tokens (keeping the \
                 first ones); set `truncate_prompt_tokens` to -1 or {max}, or `truncate: true`, \
                 not {k}"
            ),
        )),
    }
}

fn encode(v: Vec<f32>, format: EncodingFormat) -> EmbeddingVector {
    match format {
        EncodingFormat::Float => EmbeddingVector::Float(v),
        EncodingFormat::Base64 => {
            let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
            EmbeddingVector::Base64(base64::engine::general_purpose::STANDARD.encode(bytes))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kiln_http::OpenAiError;

    #[test]
    fn inputs_truncation_and_encoding() {
        assert_eq!(
            texts(EmbeddingInput::Text("a".into())).ok(),
            Some((vec!["a".to_string()], true))
        );
        for bad in [
            EmbeddingInput::Tokens(vec![]),
            EmbeddingInput::Texts(vec![]),
            EmbeddingInput::Tokens(vec![101, 102]),
            EmbeddingInput::TokenBatches(vec![vec![101]]),
        ] {
            let e = texts(bad).err().and_then(|e| e.param());
            assert_eq!(e.as_deref(), Some("input"));
        }
        assert_eq!(truncation(None, None, 256).ok(), Some(false));
        assert_eq!(truncation(Some(true), None, 256).ok(), Some(true));
        assert_eq!(truncation(None, Some(-1), 256).ok(), Some(true));
        assert_eq!(truncation(Some(false), Some(256), 256).ok(), Some(true));
        for k in [0, 10, 257, -2] {
            let e = truncation(None, Some(k), 256).err().and_then(|e| e.param());
            assert_eq!(e.as_deref(), Some("truncate_prompt_tokens"));
        }
        // 0.5 is 0x3f000000, little-endian 00 00 00 3f.
        assert_eq!(
            encode(vec![0.5], EncodingFormat::Base64),
            EmbeddingVector::Base64("AAAAPw==".into())
        );
    }
}
