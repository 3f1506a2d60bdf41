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
use axum::response::{IntoResponse, Response};
use axum::Json;
use base64::Engine as _;
use kiln_api::embeddings::{
    Embedding, EmbeddingInput, EmbeddingVector, EmbeddingsRequest, EmbeddingsResponse,
    EmbeddingsUsage, EncodingFormat,
};
use kiln_generate::{check_count, Call, EmbedRequest, EncodeInput, Generator, Truncation};
use kiln_host::ModelKind;

use crate::error::ApiError;
use crate::extract::{parse, ApiBody};
use crate::lease::CallContext;
use crate::state::AppState;

pub async fn embeddings(
    State(state): State<AppState>,
    ctx: CallContext,
    ApiBody(body): ApiBody,
) -> Result<Response, ApiError> {
    respond(state.generator(), &ctx.call(), &body).await
}

/// Answers an embeddings body for `call`: the route's work, shared with batch lines.
pub async fn respond(
    generator: &Generator,
    call: &Call,
    body: &[u8],
) -> Result<Response, ApiError> {
    let req: EmbeddingsRequest = parse(body)?;
    let hosted = generator.resolve_for(req.model.as_deref(), ModelKind::Embed)?;
    let (texts, single) = texts(req.input)?;
    let format = req.encoding_format.unwrap_or_default();
    let embedded = generator
        .embed(
            EmbedRequest {
                hosted,
                input: EncodeInput {
                    texts,
                    param: "input",
                    single,
                    truncation: Truncation::OpenAi {
                        truncate: req.truncate,
                        prompt_tokens: req.truncate_prompt_tokens,
                    },
                    truncate_field: "truncate",
                },
                dimensions: req.dimensions,
            },
            call,
        )
        .await?;
    let data = embedded
        .vectors
        .into_iter()
        .enumerate()
        .map(|(index, v)| Embedding {
            object: "embedding".into(),
            index,
            embedding: encode(v, format),
        })
        .collect();
    let tokens = embedded.tokens as u64;
    Ok(Json(EmbeddingsResponse {
        object: "list".into(),
        data,
        model: embedded.model,
        usage: EmbeddingsUsage {
            prompt_tokens: tokens,
            total_tokens: tokens,
        },
    })
    .into_response())
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
    use kiln_http::ClassifiedError;

    #[test]
    fn inputs_and_encoding() {
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
        // 0.5 is 0x3f000000, little-endian 00 00 00 3f.
        assert_eq!(
            encode(vec![0.5], EncodingFormat::Base64),
            EmbeddingVector::Base64("AAAAPw==".into())
        );
    }
}
