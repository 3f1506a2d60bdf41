//! The complexity estimator: what the routing rules ([`crate::rules`]) see of a request.
//! Its task, the names its model goes by, its prompt's size in tokens and the most
//! tokens it asks for.
//!
//! The router has no tokenizer, so a prompt's tokens are estimated by
//! [`prompt_tokens`]: the UTF-8 bytes of the text the model reads as its prompt, at
//! [`BYTES_PER_TOKEN`] a token (rounded up), plus one token per token id a
//! `/v1/completions` prompt gives as numbers. Four bytes a token is the usual rule of
//! thumb for English under BPE vocabularies (the rate limiter counts the same way); it
//! over-counts code and under-counts languages written in few bytes, so rules'
//! thresholds are approximate by design. Only prompt text counts, not the JSON around
//! it, so a threshold means the same for chat, completions, embeddings and Workers AI.

use serde_json::Value;

/// Bytes of prompt text estimated as one token.
pub const BYTES_PER_TOKEN: u64 = 4;

/// Nesting followed inside `prompt`/`input`/`text` (a list of strings, or a list of
/// token-id lists); deeper values are not prompt text.
const MAX_DEPTH: usize = 2;

/// One request as the rules see it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Complexity<'a> {
    /// The model's catalogue task (`text-generation`, `embeddings`,
    /// `text-classification`), or the one its path implies; `None` when neither is known.
    pub task: Option<&'a str>,
    /// The model as the request named it, and its canonical id when a node lists it.
    pub models: [Option<&'a str>; 2],
    /// Estimated prompt tokens ([`prompt_tokens`]); 0 when the body was not read.
    pub prompt_tokens: u64,
    /// The request's `max_completion_tokens`, `max_tokens` or `max_output_tokens`.
    pub max_tokens: Option<u64>,
}

impl<'a> Complexity<'a> {
    /// Measures a request: `body` is its parsed JSON, or `None` when no rule looks at
    /// sizes (so a router whose rules don't need it never parses a body).
    pub fn of(task: Option<&'a str>, models: [Option<&'a str>; 2], body: Option<&Value>) -> Self {
        Self {
            task,
            models,
            prompt_tokens: body.map_or(0, prompt_tokens),
            max_tokens: body.and_then(max_tokens),
        }
    }
}

/// The task an inference path implies whatever its model (`/ai/run/{model}` implies
/// none: that depends on the model).
pub fn path_task(path: &str) -> Option<&'static str> {
    match path.split('?').next().unwrap_or_default() {
        "/v1/chat/completions" | "/v1/completions" => Some("text-generation"),
        "/v1/embeddings" => Some("embeddings"),
        _ => None,
    }
}

/// The estimated prompt tokens of a request body: the bytes of its `prompt`, `input` and
/// `text` strings (a string or a list of them) and of its `messages`' text content, at
/// [`BYTES_PER_TOKEN`] a token rounded up, plus one per token id given as a number.
pub fn prompt_tokens(body: &Value) -> u64 {
    let mut sizes = Sizes::default();
    for field in ["prompt", "input", "text"] {
        if let Some(v) = body.get(field) {
            sizes.add(v, 0);
        }
    }
    for message in body
        .get("messages")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        match message.get("content") {
            Some(Value::String(s)) => sizes.bytes += s.len() as u64,
            // Content parts: only text parts are text (images are not counted).
            Some(Value::Array(parts)) => {
                for part in parts {
                    if let Some(t) = part.get("text").and_then(Value::as_str) {
                        sizes.bytes += t.len() as u64;
                    }
                }
            }
            _ => {}
        }
    }
    sizes.bytes.div_ceil(BYTES_PER_TOKEN) + sizes.token_ids
}

/// The most tokens a request asks to generate, under any of its APIs' names.
pub fn max_tokens(body: &Value) -> Option<u64> {
    ["max_completion_tokens", "max_tokens", "max_output_tokens"]
        .iter()
        .find_map(|f| body.get(*f).and_then(Value::as_u64))
}

#[derive(Default)]
struct Sizes {
    bytes: u64,
    token_ids: u64,
}

impl Sizes {
    fn add(&mut self, v: &Value, depth: usize) {
        match v {
            Value::String(s) => self.bytes += s.len() as u64,
            Value::Number(_) => self.token_ids += 1,
            Value::Array(items) if depth < MAX_DEPTH => {
                for item in items {
                    self.add(item, depth + 1);
                }
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn prompt_text_is_four_bytes_a_token_rounded_up() {
        let t = |v: Value| prompt_tokens(&v);
        assert_eq!(t(json!({"prompt": "abcd"})), 1);
        assert_eq!(t(json!({"prompt": "abcde"})), 2);
        assert_eq!(t(json!({"prompt": ""})), 0);
        // Multi-byte text counts its UTF-8 bytes: "é" is two.
        assert_eq!(t(json!({"prompt": "éé"})), 1);
        // A list of prompts, embeddings' `input`, Workers AI's `text`.
        assert_eq!(t(json!({"prompt": ["abcd", "abcd"]})), 2);
        assert_eq!(t(json!({"input": "a".repeat(400)})), 100);
        assert_eq!(t(json!({"text": ["abcdefgh"]})), 2);
        // Token ids count one each.
        assert_eq!(t(json!({"prompt": [1, 2, 3]})), 3);
        assert_eq!(t(json!({"prompt": [[1, 2], [3]]})), 3);
        // What is not prompt text does not count.
        assert_eq!(
            t(json!({"model": "a-very-long-model-name", "temperature": 0.5})),
            0
        );
        assert_eq!(t(json!("a bare string")), 0);
    }

    #[test]
    fn messages_count_their_text_content_only() {
        let body = json!({
            "messages": [
                {"role": "system", "content": "abcd"},
                {"role": "user", "content": [
                    {"type": "text", "text": "abcdefgh"},
                    {"type": "image_url", "image_url": {"url": "https://example.com/a-long-url.png"}}
                ]},
                {"role": "assistant", "content": null, "tool_calls": []}
            ]
        });
        assert_eq!(prompt_tokens(&body), 3);
    }

    #[test]
    fn max_tokens_under_each_name() {
        assert_eq!(max_tokens(&json!({"max_tokens": 7})), Some(7));
        assert_eq!(max_tokens(&json!({"max_completion_tokens": 9})), Some(9));
        assert_eq!(max_tokens(&json!({"max_output_tokens": 3})), Some(3));
        assert_eq!(max_tokens(&json!({"max_tokens": -1})), None);
        assert_eq!(max_tokens(&json!({})), None);
    }

    #[test]
    fn paths_imply_tasks() {
        assert_eq!(path_task("/v1/chat/completions"), Some("text-generation"));
        assert_eq!(path_task("/v1/completions?x=1"), Some("text-generation"));
        assert_eq!(path_task("/v1/embeddings"), Some("embeddings"));
        assert_eq!(path_task("/ai/run/@cf/meta/llama"), None);
    }

    #[test]
    fn without_a_body_only_names_are_known() {
        let c = Complexity::of(Some("embeddings"), [Some("m"), None], None);
        assert_eq!((c.prompt_tokens, c.max_tokens), (0, None));
        let body = json!({"prompt": "abcdefgh", "max_tokens": 5});
        let c = Complexity::of(None, [None, None], Some(&body));
        assert_eq!((c.prompt_tokens, c.max_tokens), (2, Some(5)));
    }
}
