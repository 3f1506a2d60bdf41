//! The bearer key of a request, read one way at a node and at the router: the scheme
//! is case-insensitive (RFC 7235), and keys are compared without an early exit, so
//! response timing doesn't reveal how much of a guessed key was right.

use std::fmt;

use axum::http::header::AUTHORIZATION;
use axum::http::HeaderMap;

use crate::TransportError;

/// One accepted bearer token and the label its usage is reported under.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKey {
    pub key: String,
    pub label: Option<String>,
}

impl ApiKey {
    pub fn new(key: impl Into<String>, label: Option<String>) -> Self {
        Self {
            key: key.into(),
            label,
        }
    }
}

impl From<&str> for ApiKey {
    fn from(key: &str) -> Self {
        Self::new(key, None)
    }
}

impl From<String> for ApiKey {
    fn from(key: String) -> Self {
        Self::new(key, None)
    }
}

/// Never prints the secret.
impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ApiKey")
            .field("id", &kiln_api::key_id(&self.key))
            .field("label", &self.label)
            .finish()
    }
}

/// The bearer token `headers` carry, if any.
pub fn bearer(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, t)| t.trim())
}

/// The first of `keys` whose secret (`secret(k)`) is `token`, compared in constant time.
pub fn find_key<'k, K>(keys: &'k [K], secret: impl Fn(&K) -> &str, token: &str) -> Option<&'k K> {
    keys.iter()
        .find(|k| constant_time_eq(secret(k).as_bytes(), token.as_bytes()))
}

/// The key `accept` finds for the bearer token `headers` carry, or the 401 saying the
/// `what` key (`API`, `admin`, ...) is missing or wrong.
pub fn authorize<'k, K: ?Sized>(
    headers: &HeaderMap,
    what: &str,
    accept: impl Fn(&str) -> Option<&'k K>,
) -> Result<&'k K, TransportError> {
    let Some(token) = bearer(headers) else {
        let message = format!("missing {what} key: send it as `Authorization: Bearer <key>`");
        return Err(TransportError::Unauthorized(message));
    };
    accept(token).ok_or_else(|| TransportError::Unauthorized(format!("invalid {what} key")))
}

impl ApiKey {
    /// The key of `keys` that `token` is.
    pub fn find<'k>(keys: &'k [ApiKey], token: &str) -> Option<&'k ApiKey> {
        find_key(keys, |k| &k.key, token)
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    #[test]
    fn compares_exactly() {
        assert!(constant_time_eq(b"key", b"key"));
        assert!(!constant_time_eq(b"key", b"kez"));
        assert!(!constant_time_eq(b"key", b"key2"));
        let keys = ["a1".to_string(), "b2".to_string()];
        assert_eq!(find_key(&keys, |k| k, "b2"), Some(&keys[1]));
        assert_eq!(find_key(&keys, |k| k, "b"), None);
    }

    #[test]
    fn the_scheme_is_case_insensitive() {
        let mut h = HeaderMap::new();
        assert_eq!(bearer(&h), None);
        h.insert(AUTHORIZATION, HeaderValue::from_static("bearer  k1 "));
        assert_eq!(bearer(&h), Some("k1"));
        h.insert(AUTHORIZATION, HeaderValue::from_static("Basic k1"));
        assert_eq!(bearer(&h), None);
    }
}
