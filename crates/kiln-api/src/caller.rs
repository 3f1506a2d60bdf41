//! Who is calling: an API key's id and label, without keeping the secret. Metering,
//! stored state and the rate limits are keyed by it.

use sha2::{Digest, Sha256};

/// The caller id when the server runs without API keys.
pub const ANONYMOUS: &str = "anonymous";

/// Who is calling: the API key's id ([`key_id`], never the key) and its label, or
/// [`ANONYMOUS`] when the server has no keys. Metering and stored state are keyed by it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    pub key_id: String,
    pub label: Option<String>,
}

impl Caller {
    pub fn anonymous() -> Self {
        Self {
            key_id: ANONYMOUS.to_string(),
            label: None,
        }
    }
}

/// `key_` and the first 16 hex digits (64 bits) of the key's SHA-256: stable across
/// restarts, distinct for a deployment's keys, and useless for recovering the key.
pub fn key_id(key: &str) -> String {
    let digest = Sha256::digest(key.as_bytes());
    format!("key_{}", hex::encode(&digest[..8]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn id_is_a_stable_prefix_of_the_sha256_and_hides_the_key() {
        let id = key_id("sk-test");
        assert_eq!(id.len(), 4 + 16);
        assert!(id.starts_with("key_"));
        assert_eq!(id, key_id("sk-test"));
        assert_ne!(id, key_id("sk-test2"));
        assert!(!id.contains("sk-test"));
        let full = hex::encode(Sha256::digest(b"sk-test"));
        assert_eq!(&id[4..], &full[..16]);
    }
}
