//! `POST /v1/completions`: request (text, texts or token ids), response, legacy logprobs.

use std::collections::BTreeMap;
use std::fmt;

use serde::de::{MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::common::{double_option, StopSequences, StreamOptions, Usage};
use crate::structured::{GuidedFields, ResponseFormat, StructuredOutputs};

/// A completion request: OpenAI's legacy fields plus vLLM's extra sampling fields.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CompletionRequest {
    #[serde(default)]
    pub model: Option<String>,
    /// A LoRA adapter of the model to run with (also written `model: "base:adapter"`).
    #[serde(default)]
    pub lora: Option<String>,
    pub prompt: Prompt,
    /// Only `best_of == n` (or absent) is served.
    #[serde(default)]
    pub best_of: Option<u32>,
    /// Prepend the prompt to each choice's text.
    #[serde(default)]
    pub echo: Option<bool>,
    #[serde(default)]
    pub frequency_penalty: Option<f32>,
    #[serde(default)]
    pub logit_bias: Option<BTreeMap<String, f32>>,
    /// Number of alternatives to report per token (0 reports only the chosen one).
    #[serde(default)]
    pub logprobs: Option<u32>,
    #[serde(default)]
    pub max_tokens: Option<u32>,
    #[serde(default)]
    pub n: Option<u32>,
    #[serde(default)]
    pub presence_penalty: Option<f32>,
    #[serde(default)]
    pub seed: Option<i64>,
    #[serde(default)]
    pub stop: Option<StopSequences>,
    #[serde(default)]
    pub stream: Option<bool>,
    #[serde(default)]
    pub stream_options: Option<StreamOptions>,
    /// Not served (no fill-in-the-middle); only empty or absent is accepted.
    #[serde(default)]
    pub suffix: Option<String>,
    #[serde(default)]
    pub temperature: Option<f32>,
    #[serde(default)]
    pub top_p: Option<f32>,
    #[serde(default)]
    pub user: Option<String>,
    // vLLM's extra sampling fields.
    #[serde(default)]
    pub top_k: Option<i32>,
    #[serde(default)]
    pub min_p: Option<f32>,
    #[serde(default)]
    pub repetition_penalty: Option<f32>,
    #[serde(default)]
    pub ignore_eos: Option<bool>,
    #[serde(default)]
    pub min_tokens: Option<u32>,
    #[serde(default)]
    pub stop_token_ids: Option<Vec<u32>>,
    #[serde(default)]
    pub skip_special_tokens: Option<bool>,
    /// Default true: tokenize with the model's special tokens (e.g. a leading BOS).
    #[serde(default)]
    pub add_special_tokens: Option<bool>,
    /// Kiln's extension: answer 429 at once instead of queueing when the model is busy.
    #[serde(default)]
    pub reject_if_busy: Option<bool>,
    /// Kiln's extension: `false` opts out of speculative decoding (the output is the
    /// same either way; only its speed differs).
    #[serde(default)]
    pub speculative: Option<bool>,
    /// `json_object` or `json_schema` constrain the text (as on chat completions).
    #[serde(default)]
    pub response_format: Option<ResponseFormat>,
    /// vLLM's structured outputs (`json`, `regex`, `choice`, `grammar`, `json_object`).
    #[serde(default)]
    pub structured_outputs: Option<StructuredOutputs>,
    /// vLLM's older `guided_*` fields.
    #[serde(flatten)]
    pub guided: GuidedFields,
}

/// `prompt`: a string, a batch of strings, token ids, or a batch of token-id lists.
/// A batch gives `n` choices per prompt, indexed `prompt_index * n + i`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(
    untagged,
    expecting = "a string, an array of strings, an array of token ids or an array of arrays of token ids"
)]
pub enum Prompt {
    Text(String),
    Tokens(Vec<u32>),
    Texts(Vec<String>),
    TokenBatches(Vec<Vec<u32>>),
}

/// A complete completion, or (with `object` still `text_completion`) one stream chunk.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Completion {
    /// `cmpl-…`
    pub id: String,
    /// `text_completion`
    pub object: String,
    pub created: u64,
    pub model: String,
    pub system_fingerprint: String,
    pub choices: Vec<CompletionChoice>,
    /// Always present in a complete response. In stream chunks: absent without
    /// `stream_options.include_usage`, else `null` until the last chunk.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "double_option"
    )]
    pub usage: Option<Option<Usage>>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CompletionChoice {
    pub text: String,
    pub index: u32,
    pub logprobs: Option<CompletionLogprobs>,
    pub finish_reason: Option<String>,
}

/// Legacy logprobs: parallel arrays over the generated tokens.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CompletionLogprobs {
    pub tokens: Vec<String>,
    pub token_logprobs: Vec<Option<f32>>,
    pub top_logprobs: Vec<Option<TopLogprobMap>>,
    /// Character offset of each token in the choice's text (echoed prompt included).
    pub text_offset: Vec<usize>,
}

/// `{token: logprob}`, most likely first. A list underneath so order survives and
/// tokens with the same text don't collide before serialization.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TopLogprobMap(pub Vec<(String, f32)>);

impl Serialize for TopLogprobMap {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(self.0.len()))?;
        let mut seen = std::collections::HashSet::new();
        for (token, logprob) in &self.0 {
            // JSON objects can't repeat keys; keep the first (most likely) occurrence.
            if seen.insert(token.as_str()) {
                map.serialize_entry(token, logprob)?;
            }
        }
        map.end()
    }
}

impl<'de> Deserialize<'de> for TopLogprobMap {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = TopLogprobMap;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a map from token to logprob")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<TopLogprobMap, A::Error> {
                let mut v = Vec::new();
                while let Some(e) = m.next_entry::<String, f32>()? {
                    v.push(e);
                }
                Ok(TopLogprobMap(v))
            }
        }
        d.deserialize_map(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prompt_forms() {
        let p = |s: &str| serde_json::from_str::<Prompt>(s);
        assert_eq!(p(r#""hi""#).expect("text"), Prompt::Text("hi".into()));
        assert_eq!(p("[1,2]").expect("tokens"), Prompt::Tokens(vec![1, 2]));
        assert_eq!(
            p(r#"["a","b"]"#).expect("texts"),
            Prompt::Texts(vec!["a".into(), "b".into()])
        );
        assert_eq!(
            p("[[1],[2,3]]").expect("batches"),
            Prompt::TokenBatches(vec![vec![1], vec![2, 3]])
        );
        let err = p("[-1]").expect_err("negative id").to_string();
        assert!(err.contains("array of token ids"), "{err}");
    }

    #[test]
    fn top_logprobs_keep_order_and_drop_duplicate_keys() {
        let m = TopLogprobMap(vec![
            ("b".into(), -0.5),
            ("a".into(), -1.0),
            ("b".into(), -2.0),
        ]);
        let s = serde_json::to_string(&m).expect("serialize");
        assert_eq!(s, r#"{"b":-0.5,"a":-1.0}"#);
        let back: TopLogprobMap = serde_json::from_str(&s).expect("parse");
        assert_eq!(
            back.0,
            vec![("b".to_string(), -0.5), ("a".to_string(), -1.0)]
        );
    }
}
