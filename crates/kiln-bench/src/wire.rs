//! The OpenAI wire format as the benchmark sends and reads it.
//!
//! These are the client's own minimal types rather than the server's: requests carry
//! exactly the fields the method prescribes (in a fixed order, so that two servers get
//! byte-identical bodies), and stream chunks are read leniently, ignoring whatever else
//! a server adds (llama.cpp's `timings`, vLLM's `usage: null`, ...).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::workload::WorkloadRequest;

/// Which API the requests go to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Endpoint {
    /// `/v1/chat/completions`, the prompt as one user message.
    Chat,
    /// `/v1/completions`, the raw prompt.
    Completions,
}

impl Endpoint {
    /// Path below `/v1`.
    pub fn path(self) -> &'static str {
        match self {
            Endpoint::Chat => "/chat/completions",
            Endpoint::Completions => "/completions",
        }
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Endpoint::Chat => "chat",
            Endpoint::Completions => "completions",
        })
    }
}

impl FromStr for Endpoint {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "chat" | "chat-completions" => Ok(Endpoint::Chat),
            "completions" => Ok(Endpoint::Completions),
            other => Err(format!(
                "unknown endpoint {other:?} (expected chat or completions)"
            )),
        }
    }
}

#[derive(Serialize)]
struct Message<'a> {
    role: &'static str,
    content: &'a str,
}

#[derive(Serialize)]
struct StreamOptions {
    include_usage: bool,
}

/// The fields common to both endpoints, after the prompt or messages.
#[derive(Serialize)]
struct Sampling {
    max_tokens: usize,
    temperature: f32,
    ignore_eos: bool,
    stream: bool,
    stream_options: StreamOptions,
}

#[derive(Serialize)]
struct ChatBody<'a> {
    model: &'a str,
    messages: [Message<'a>; 1],
    #[serde(flatten)]
    sampling: Sampling,
}

#[derive(Serialize)]
struct CompletionBody<'a> {
    model: &'a str,
    prompt: &'a str,
    #[serde(flatten)]
    sampling: Sampling,
}

/// The JSON body of one benchmark request: streamed, greedy, `max_tokens` = the target,
/// `ignore_eos` so that every request produces its full target. Keys of `extra` are
/// added (or override) at the top level.
pub fn request_body(
    endpoint: Endpoint,
    model: &str,
    request: &WorkloadRequest,
    max_tokens: usize,
    extra: &Map<String, Value>,
) -> Vec<u8> {
    let sampling = Sampling {
        max_tokens,
        temperature: 0.0,
        ignore_eos: true,
        stream: true,
        stream_options: StreamOptions {
            include_usage: true,
        },
    };
    let value = match endpoint {
        Endpoint::Chat => serde_json::to_value(ChatBody {
            model,
            messages: [Message {
                role: "user",
                content: &request.prompt,
            }],
            sampling,
        }),
        Endpoint::Completions => serde_json::to_value(CompletionBody {
            model,
            prompt: &request.prompt,
            sampling,
        }),
    };
    // Serialising these plain structs into a Value can't fail; keep the error path total.
    let mut value = value.unwrap_or(Value::Null);
    if let Value::Object(map) = &mut value {
        for (k, v) in extra {
            map.insert(k.clone(), v.clone());
        }
    }
    serde_json::to_vec(&value).unwrap_or_default()
}

/// Parses `--extra-body`: a JSON object whose keys are added to every request.
pub fn parse_extra_body(text: &str) -> crate::error::Result<Map<String, Value>> {
    serde_json::from_str(text).map_err(|e| crate::error::Error::Option {
        option: "extra-body",
        reason: format!("not a JSON object: {e}"),
    })
}

/// One streamed chunk, reduced to what the benchmark reads.
#[derive(Debug, Default, Deserialize)]
pub struct StreamChunk {
    #[serde(default)]
    choices: Option<Vec<ChunkChoice>>,
    #[serde(default)]
    pub usage: Option<ChunkUsage>,
    #[serde(default)]
    pub error: Option<Value>,
}

#[derive(Debug, Default, Deserialize)]
struct ChunkChoice {
    #[serde(default)]
    delta: Option<ChunkDelta>,
    #[serde(default)]
    text: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
struct ChunkDelta {
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    reasoning_content: Option<String>,
}

/// Token counts the server reports (in the final chunk, with `include_usage`).
#[derive(Debug, Default, Clone, Copy, Deserialize)]
pub struct ChunkUsage {
    #[serde(default)]
    pub prompt_tokens: Option<u64>,
    #[serde(default)]
    pub completion_tokens: Option<u64>,
}

impl StreamChunk {
    /// Whether the chunk carries generated text (chat `delta.content` or
    /// `reasoning_content`, or completion `text`); role-only and usage-only chunks don't.
    pub fn has_content(&self) -> bool {
        let non_empty = |s: &Option<String>| s.as_deref().is_some_and(|s| !s.is_empty());
        self.choices.iter().flatten().any(|c| {
            non_empty(&c.text)
                || c.delta
                    .as_ref()
                    .is_some_and(|d| non_empty(&d.content) || non_empty(&d.reasoning_content))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req() -> WorkloadRequest {
        WorkloadRequest {
            prompt: "Say \"hi\"".to_owned(),
            prompt_tokens: 4,
            output_tokens: 7,
        }
    }

    #[test]
    fn chat_body_is_exact() {
        let body = request_body(Endpoint::Chat, "m", &req(), 7, &Map::new());
        let v: Value = serde_json::from_slice(&body).expect("json");
        assert_eq!(
            v,
            serde_json::json!({
                "model": "m",
                "messages": [{"role": "user", "content": "Say \"hi\""}],
                "max_tokens": 7, "temperature": 0.0, "ignore_eos": true, "stream": true,
                "stream_options": {"include_usage": true}
            })
        );
        // Same inputs, same bytes.
        assert_eq!(
            body,
            request_body(Endpoint::Chat, "m", &req(), 7, &Map::new())
        );
    }

    #[test]
    fn completion_body_and_extra_keys() {
        let mut extra = Map::new();
        extra.insert("temperature".to_owned(), Value::from(1));
        extra.insert("cache_prompt".to_owned(), Value::from(false));
        let body = request_body(Endpoint::Completions, "m", &req(), 3, &extra);
        let v: Value = serde_json::from_slice(&body).expect("json");
        assert_eq!(v["prompt"], "Say \"hi\"");
        assert_eq!(v["max_tokens"], 3);
        assert_eq!(v["temperature"], 1);
        assert_eq!(v["cache_prompt"], false);
        assert!(v.get("messages").is_none());
    }

    #[test]
    fn chunks_are_read_leniently() {
        let parse = |s: &str| serde_json::from_str::<StreamChunk>(s).expect("chunk");
        assert!(parse(r#"{"choices":[{"delta":{"content":"Hi"}}],"usage":null}"#).has_content());
        assert!(
            !parse(r#"{"choices":[{"delta":{"role":"assistant","content":""}}]}"#).has_content()
        );
        assert!(parse(r#"{"choices":[{"text":" a","index":0}],"timings":{}}"#).has_content());
        let last = parse(r#"{"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":9}}"#);
        assert!(!last.has_content());
        assert_eq!(last.usage.and_then(|u| u.completion_tokens), Some(9));
        assert!(parse(r#"{"error":{"message":"boom"}}"#).error.is_some());
    }
}
