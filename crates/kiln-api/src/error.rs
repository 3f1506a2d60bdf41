//! OpenAI's error body: `{"error": {"message", "type", "param", "code"}}`.

use serde::{Deserialize, Serialize};

/// The JSON body of every error response.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorResponse {
    pub error: ErrorBody,
}

/// One error; `param` names the offending request field, when there is one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    pub message: String,
    /// `invalid_request_error`, `authentication_error`, `not_found_error`,
    /// `rate_limit_error`, `server_error`, ...
    #[serde(rename = "type")]
    pub kind: String,
    /// Always sent, `null` when the error is not about one field (as OpenAI does).
    pub param: Option<String>,
    /// A machine-readable code (`model_not_found`, `context_length_exceeded`, ...).
    pub code: Option<String>,
}

impl ErrorResponse {
    pub fn new(
        message: impl Into<String>,
        kind: impl Into<String>,
        param: Option<String>,
        code: Option<String>,
    ) -> Self {
        Self {
            error: ErrorBody {
                message: message.into(),
                kind: kind.into(),
                param,
                code,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serializes_like_openai_with_explicit_nulls() {
        let e = ErrorResponse::new("bad", "invalid_request_error", Some("n".into()), None);
        let v = serde_json::to_value(&e).expect("serialize");
        assert_eq!(
            v,
            serde_json::json!({"error": {"message": "bad", "type": "invalid_request_error",
                "param": "n", "code": null}})
        );
        let back: ErrorResponse = serde_json::from_value(v).expect("round trip");
        assert_eq!(back, e);
    }
}
