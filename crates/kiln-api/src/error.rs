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

/// What kind of failure an error is, which decides its status (kiln-http maps each kind
/// to one) and whether the client should retry. Every service's error says its kind, so
/// the HTTP layers convert any of them to the same body without knowing their variants.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The request is wrong (a field, a conflict of fields, a cap reached): 400.
    Invalid,
    /// No or a wrong credential: 401.
    Unauthorized,
    /// The credential may not do this, or a policy refused it: 403.
    Forbidden,
    /// What the request names does not exist: 404.
    NotFound,
    MethodNotAllowed,
    /// The body did not arrive in time: 408.
    Timeout,
    /// The body is over its limit: 413.
    TooLarge,
    UnsupportedMedia,
    /// Over a rate limit or quota: 429.
    Limited,
    /// The model's queue is full or the model is busy: 429.
    Busy,
    /// The service can't serve it now (shutting down, loading, a store down): 503.
    Unavailable,
    /// The server's fault: 500.
    Internal,
    /// An upstream the request was passed to failed: 502.
    Upstream,
}

/// An error a client is told about: its kind, OpenAI's `code`, the field at fault, and
/// a message safe to send (no server paths).
pub trait ClassifiedError: std::fmt::Display {
    fn error_kind(&self) -> ErrorKind;

    /// OpenAI's `code` field (also a stable label for logs).
    fn code(&self) -> &str;

    /// The request field at fault, if one is.
    fn param(&self) -> Option<String> {
        None
    }

    /// The message the client gets.
    fn safe_message(&self) -> String {
        self.to_string()
    }

    /// Whether the client should try again shortly (a `Retry-After` header).
    fn retry_later(&self) -> bool {
        matches!(self.error_kind(), ErrorKind::Limited | ErrorKind::Busy)
    }

    /// Seconds to wait before retrying, when the error knows better than the default.
    fn retry_after_secs(&self) -> Option<u64> {
        None
    }
}

/// `text` with every absolute path cut to its file name: clients see which file, never
/// where the server keeps it (the full text is in the server's log).
pub fn without_paths(text: &str) -> String {
    text.split_inclusive(char::is_whitespace)
        .map(|word| {
            let start = word.find(['/', '\\']).filter(|&i| {
                let lead = &word[..i];
                lead.chars().all(|c| "\"'`([{<".contains(c)) || lead.ends_with(':')
            });
            match start {
                Some(i) if word[i + 1..].contains(['/', '\\']) => {
                    let tail = word.rsplit(['/', '\\']).next().unwrap_or_default();
                    format!("{}{tail}", &word[..i])
                }
                _ => word.to_string(),
            }
        })
        .collect()
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

    #[test]
    fn paths_are_cut_to_file_names() {
        assert_eq!(
            without_paths("cannot open /root/.cache/kiln/models/x.gguf: No such file"),
            "cannot open x.gguf: No such file"
        );
        assert_eq!(
            without_paths("bad tensor in \"/data/m/y.gguf\" at 12"),
            "bad tensor in \"y.gguf\" at 12"
        );
        assert_eq!(
            without_paths("ratio 1/2 and a/b stay"),
            "ratio 1/2 and a/b stay"
        );
    }
}
