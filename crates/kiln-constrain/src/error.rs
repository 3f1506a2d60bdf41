//! What can go wrong preparing a constraint.

/// A constraint could not be prepared.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The schema, regex or grammar is invalid or unsupported (the caller's fault).
    #[error("{0}")]
    Grammar(String),
    /// The model's vocabulary can't back a token trie (e.g. no end-of-sequence token).
    #[error("cannot build the token trie: {0}")]
    Vocabulary(String),
}

pub type Result<T> = std::result::Result<T, Error>;
