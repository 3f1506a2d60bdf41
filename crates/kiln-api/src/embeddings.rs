//! `POST /v1/embeddings`, OpenAI's shape, with vLLM's `truncate_prompt_tokens` and
//! Kiln's `truncate`.

use serde::{Deserialize, Serialize};

/// `input`: one text, several, token ids, or several token-id lists (OpenAI accepts all
/// four; a server may refuse token ids its model can't take).
pub type EmbeddingInput = crate::completions::Prompt;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EmbeddingsRequest {
    #[serde(default)]
    pub model: Option<String>,
    pub input: EmbeddingInput,
    /// `float` (the default) or `base64`.
    #[serde(default)]
    pub encoding_format: Option<EncodingFormat>,
    /// Size of the returned vectors; a model of fixed size only accepts its own.
    #[serde(default)]
    pub dimensions: Option<u64>,
    /// Ignored (OpenAI uses it for abuse monitoring).
    #[serde(default)]
    pub user: Option<String>,
    /// Kiln's extension: cut inputs over the model's limit to their first tokens instead
    /// of refusing the request.
    #[serde(default)]
    pub truncate: Option<bool>,
    /// vLLM's field: `-1` truncates to the model's limit.
    #[serde(default)]
    pub truncate_prompt_tokens: Option<i64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EncodingFormat {
    /// A JSON array of numbers.
    #[default]
    Float,
    /// The little-endian f32 bytes of the vector, base64-encoded.
    Base64,
}

/// `{"object": "list", "data": [...], "model": ..., "usage": ...}`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EmbeddingsResponse {
    /// `list`
    pub object: String,
    pub data: Vec<Embedding>,
    pub model: String,
    pub usage: EmbeddingsUsage,
}

/// One input's vector.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Embedding {
    /// `embedding`
    pub object: String,
    /// Position of the input in the request.
    pub index: usize,
    pub embedding: EmbeddingVector,
}

/// Numbers, or a base64 string, as `encoding_format` asked.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum EmbeddingVector {
    Float(Vec<f32>),
    Base64(String),
}

/// Tokens read over all inputs; embeddings produce none.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EmbeddingsUsage {
    pub prompt_tokens: u64,
    pub total_tokens: u64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn request_takes_every_input_shape_and_rejects_unknown_formats() {
        let parse = |v: serde_json::Value| serde_json::from_value::<EmbeddingsRequest>(v);
        let r = parse(json!({"input": "hi", "model": "m", "encoding_format": null, "user": "u"}))
            .expect("text");
        assert_eq!(r.input, EmbeddingInput::Text("hi".into()));
        assert_eq!(r.encoding_format, None);
        let r = parse(json!({"input": ["a", "b"], "encoding_format": "base64"})).expect("texts");
        assert_eq!(r.input, EmbeddingInput::Texts(vec!["a".into(), "b".into()]));
        assert_eq!(r.encoding_format, Some(EncodingFormat::Base64));
        let r = parse(json!({"input": [[1, 2], [3]], "dimensions": 384})).expect("ids");
        assert_eq!(
            r.input,
            EmbeddingInput::TokenBatches(vec![vec![1, 2], vec![3]])
        );
        assert_eq!(r.dimensions, Some(384));
        assert!(parse(json!({"input": "x", "encoding_format": "int8"})).is_err());
        assert!(parse(json!({"model": "m"})).is_err());
    }

    #[test]
    fn response_serializes_as_openai_does() {
        let r = EmbeddingsResponse {
            object: "list".into(),
            data: vec![
                Embedding {
                    object: "embedding".into(),
                    index: 0,
                    embedding: EmbeddingVector::Float(vec![0.5, -1.0]),
                },
                Embedding {
                    object: "embedding".into(),
                    index: 1,
                    embedding: EmbeddingVector::Base64("AAAAPw==".into()),
                },
            ],
            model: "m".into(),
            usage: EmbeddingsUsage {
                prompt_tokens: 3,
                total_tokens: 3,
            },
        };
        assert_eq!(
            serde_json::to_value(&r).expect("serialize"),
            json!({"object": "list", "model": "m",
                "data": [{"object": "embedding", "index": 0, "embedding": [0.5, -1.0]},
                         {"object": "embedding", "index": 1, "embedding": "AAAAPw=="}],
                "usage": {"prompt_tokens": 3, "total_tokens": 3}})
        );
    }
}
