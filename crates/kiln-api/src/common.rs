//! Types shared by several endpoints: token usage, `stop`, `stream_options`.

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Token counts of one request, summed over its choices.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Usage {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub total_tokens: u64,
    /// OpenAI always sends this object; older servers omit it.
    #[serde(default)]
    pub prompt_tokens_details: PromptTokensDetails,
    /// Kiln's extension: what speculative decoding did for this request, when it
    /// verified any draft.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub speculative: Option<SpeculativeUsage>,
}

/// Draft tokens verified and accepted for a request (the acceptance rate is their ratio).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SpeculativeUsage {
    pub draft_tokens: u64,
    pub accepted_tokens: u64,
    pub acceptance_rate: f64,
}

impl SpeculativeUsage {
    /// None when nothing was drafted.
    pub fn new(draft_tokens: u64, accepted_tokens: u64) -> Option<Self> {
        (draft_tokens > 0).then(|| Self {
            draft_tokens,
            accepted_tokens,
            acceptance_rate: accepted_tokens as f64 / draft_tokens as f64,
        })
    }
}

impl Usage {
    /// Usage with `total_tokens` filled in.
    pub fn new(prompt_tokens: u64, completion_tokens: u64, cached_tokens: u64) -> Self {
        Self {
            prompt_tokens,
            completion_tokens,
            total_tokens: prompt_tokens + completion_tokens,
            prompt_tokens_details: PromptTokensDetails { cached_tokens },
            speculative: None,
        }
    }
}

/// Prompt tokens served from the prefix cache instead of being computed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PromptTokensDetails {
    #[serde(default)]
    pub cached_tokens: u64,
}

/// `stop`: one string or a list of them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged, expecting = "a string or an array of strings")]
pub enum StopSequences {
    One(String),
    Many(Vec<String>),
}

impl StopSequences {
    pub fn into_vec(self) -> Vec<String> {
        match self {
            StopSequences::One(s) => vec![s],
            StopSequences::Many(v) => v,
        }
    }
}

/// `stream_options` of a streamed request.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamOptions {
    /// Send a last chunk with `usage` (and `"usage": null` on every other chunk).
    #[serde(default, deserialize_with = "null_as_default")]
    pub include_usage: bool,
}

/// Deserializes `null` as the type's default (OpenAI SDKs send explicit nulls).
pub fn null_as_default<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

/// Serde helpers for a field that is absent (`None`), `null` (`Some(None)`) or a value,
/// as the `usage` of stream chunks is: absent without `include_usage`, `null` on every
/// chunk but the last with it.
pub mod double_option {
    use super::*;

    pub fn serialize<S: Serializer, T: Serialize>(
        v: &Option<Option<T>>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        match v {
            Some(inner) => inner.serialize(s),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
        d: D,
    ) -> Result<Option<Option<T>>, D::Error> {
        Option::<T>::deserialize(d).map(Some)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stop_accepts_a_string_or_a_list() {
        let one: StopSequences = serde_json::from_str(r#""\n""#).expect("string");
        assert_eq!(one.into_vec(), vec!["\n".to_string()]);
        let many: StopSequences = serde_json::from_str(r#"["a","b"]"#).expect("list");
        assert_eq!(many.into_vec(), vec!["a".to_string(), "b".to_string()]);
        let err = serde_json::from_str::<StopSequences>("3").expect_err("number");
        assert!(
            err.to_string().contains("a string or an array of strings"),
            "{err}"
        );
    }

    #[test]
    fn usage_has_openai_fields() {
        let v = serde_json::to_value(Usage::new(10, 5, 4)).expect("serialize");
        assert_eq!(
            v,
            serde_json::json!({"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15,
                "prompt_tokens_details": {"cached_tokens": 4}})
        );
    }
}
