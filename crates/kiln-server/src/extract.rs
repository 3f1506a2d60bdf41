//! The JSON body extractor: every failure becomes an OpenAI-shaped [`ApiError`] naming
//! the offending field (`param`), never axum's plain-text rejection.

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::header::CONTENT_TYPE;
use axum::http::StatusCode;
use kiln_http::TransportError;
use serde::de::DeserializeOwned;
use serde_json::error::Category;

use crate::error::ApiError;
use crate::state::AppState;

/// Like `axum::Json`, but with OpenAI's error shape, the field path of type errors, the
/// server's body limit reported as 413 and its body deadline as 408. A body without a
/// `Content-Type` is taken as JSON; one that names another type gets 415.
pub struct ApiJson<T>(pub T);

impl<T: DeserializeOwned> FromRequest<AppState> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, ApiError> {
        let ApiBody(bytes) = ApiBody::from_request(req, state).await?;
        parse(&bytes).map(ApiJson)
    }
}

/// The raw body under the server's limit (413 past it), for endpoints whose JSON type
/// depends on the model (`/ai/run/{model}`); [`parse`] it once the type is known.
pub struct ApiBody(pub Bytes);

impl FromRequest<AppState> for ApiBody {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, ApiError> {
        check_json_type(&req)?;
        Ok(ApiBody(read_body(req, state).await?))
    }
}

/// A newline-delimited JSON body (`application/x-ndjson`, or JSON, or no type) under
/// the server's limit: Vectorize's insert and upsert.
pub struct NdjsonBody(pub Bytes);

impl FromRequest<AppState> for NdjsonBody {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, ApiError> {
        let ndjson = req.headers().get(CONTENT_TYPE).is_some_and(|v| {
            let t = v.to_str().unwrap_or_default();
            let essence = t.split(';').next().unwrap_or_default().trim();
            essence.eq_ignore_ascii_case("application/x-ndjson")
        });
        if !ndjson {
            check_json_type(&req)?;
        }
        Ok(NdjsonBody(read_body(req, state).await?))
    }
}

async fn read_body(req: Request, state: &AppState) -> Result<Bytes, ApiError> {
    let limit = crate::body_limit::of_request(req.extensions(), state.config().body_limit);
    let timeout = state.config().body_timeout;
    let bytes = Bytes::from_request(req, state).await.map_err(|e| {
        if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
            TransportError::PayloadTooLarge { limit }.into()
        } else if kiln_http::is_body_timeout(&e) {
            TransportError::BodyTimeout {
                limit_s: timeout.as_secs(),
            }
            .into()
        } else {
            ApiError::InvalidJson {
                message: format!("cannot read the request body: {}", e.body_text()),
            }
        }
    })?;
    Ok(bytes)
}

/// 415 unless the request says its body is JSON (`application/json`, or any
/// `application/*+json`) or says nothing.
fn check_json_type(req: &Request) -> Result<(), ApiError> {
    let Some(value) = req.headers().get(CONTENT_TYPE) else {
        return Ok(());
    };
    let text = value.to_str().unwrap_or_default();
    let essence = text.split(';').next().unwrap_or_default().trim();
    let essence = essence.to_ascii_lowercase();
    let json = essence == "application/json"
        || (essence.starts_with("application/") && essence.ends_with("+json"));
    if json {
        Ok(())
    } else {
        Err(ApiError::UnsupportedMediaType(text.to_string()))
    }
}

/// Parses `bytes` (a JSON object) as `T`, naming the field that failed.
pub fn parse<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    match bytes.iter().find(|b| !b.is_ascii_whitespace()) {
        None => {
            return Err(ApiError::InvalidJson {
                message: "the request body is empty; expected a JSON object".into(),
            })
        }
        // Serde would also take an array for a struct, field by position; no API wants that.
        Some(b'[') => {
            return Err(ApiError::InvalidJson {
                message: "expected a JSON object, got an array".into(),
            })
        }
        Some(_) => {}
    }
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let value = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        field_error(path, e.into_inner())
    })?;
    de.end().map_err(|e| ApiError::InvalidJson {
        message: format!("invalid JSON after the top-level value: {e}"),
    })?;
    Ok(value)
}

fn field_error(path: String, e: serde_json::Error) -> ApiError {
    match e.classify() {
        Category::Syntax | Category::Eof | Category::Io => ApiError::InvalidJson {
            message: format!("the request body is not valid JSON: {e}"),
        },
        Category::Data => {
            let msg = strip_position(&e.to_string());
            // A missing field is reported at its parent's path; name the field itself.
            if let Some(field) = msg
                .strip_prefix("missing field `")
                .and_then(|m| m.strip_suffix('`'))
            {
                let param = if path == "." {
                    field.to_string()
                } else {
                    format!("{path}.{field}")
                };
                return ApiError::invalid(param.clone(), format!("`{param}` is required"));
            }
            if path == "." {
                return ApiError::InvalidJson {
                    message: format!("expected a JSON object: {msg}"),
                };
            }
            ApiError::invalid(path.clone(), format!("invalid value for `{path}`: {msg}"))
        }
    }
}

/// serde_json appends " at line L column C"; the field path says more.
fn strip_position(msg: &str) -> String {
    match msg.rfind(" at line ") {
        Some(i) => msg[..i].to_string(),
        None => msg.to_string(),
    }
}

/// Query parameter `name` as a number in `range`, if given (a 400 naming it otherwise).
/// Routes read their queries as string maps, so no query string fails outside OpenAI's
/// error shape.
pub fn query_number(
    q: &std::collections::HashMap<String, String>,
    name: &str,
    range: std::ops::RangeInclusive<usize>,
) -> Result<Option<usize>, ApiError> {
    let Some(v) = q.get(name) else {
        return Ok(None);
    };
    match v.parse::<usize>() {
        Ok(n) if range.contains(&n) => Ok(Some(n)),
        _ => Err(ApiError::invalid(
            name,
            format!(
                "`{name}` must be an integer from {} to {}",
                range.start(),
                range.end()
            ),
        )),
    }
}

/// Query parameter `order`: `desc` or `asc`, as OpenAI's lists take it; `default` when
/// absent (`Desc` for OpenAI's own lists).
pub fn query_order(
    q: &std::collections::HashMap<String, String>,
    default: kiln_files::Order,
) -> Result<kiln_files::Order, ApiError> {
    match q.get("order").map(String::as_str) {
        None => Ok(default),
        Some("desc") => Ok(kiln_files::Order::Desc),
        Some("asc") => Ok(kiln_files::Order::Asc),
        Some(_) => Err(ApiError::invalid("order", "`order` must be asc or desc")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kiln_api::chat::ChatCompletionRequest;
    use kiln_http::ClassifiedError;

    fn err(body: &str) -> ApiError {
        match parse::<ChatCompletionRequest>(body.as_bytes()) {
            Ok(_) => panic!("{body} parsed"),
            Err(e) => e,
        }
    }

    #[test]
    fn wrong_type_names_the_field() {
        let e = err(r#"{"messages": [], "temperature": "hot"}"#);
        assert_eq!(e.param().as_deref(), Some("temperature"));
        assert!(e.to_string().contains("expected f32"), "{e}");
        let e = err(r#"{"messages": [{"role": "user", "content": 5}]}"#);
        assert_eq!(e.param().as_deref(), Some("messages[0].content"));
        let e = err(r#"{"messages": [{"role": "robot", "content": "x"}]}"#);
        assert_eq!(e.param().as_deref(), Some("messages[0].role"));
    }

    #[test]
    fn missing_and_malformed() {
        let e = err(r#"{"model": "x"}"#);
        assert_eq!(e.param().as_deref(), Some("messages"));
        assert!(matches!(
            err("{\"messages\": ["),
            ApiError::InvalidJson { .. }
        ));
        assert!(matches!(err("[1, 2]"), ApiError::InvalidJson { .. }));
        assert!(matches!(err(""), ApiError::InvalidJson { .. }));
        assert!(matches!(
            err(r#"{"messages": []} x"#),
            ApiError::InvalidJson { .. }
        ));
    }
}
