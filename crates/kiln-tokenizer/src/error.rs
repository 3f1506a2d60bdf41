use std::path::PathBuf;

/// Errors from building tokenizers, encoding text and rendering chat templates.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    #[error(transparent)]
    Gguf(#[from] kiln_formats::Error),
    /// A tokenizer key is present but its value cannot be used.
    #[error("{path}: tokenizer metadata {key:?}: {reason}")]
    InvalidMetadata {
        path: PathBuf,
        key: String,
        reason: String,
    },
    #[error("{path}: unsupported tokenizer model {model:?} (supported: gpt2, llama)")]
    UnsupportedModel { path: PathBuf, model: String },
    #[error(
        "{path}: unsupported pre-tokenizer {pre:?} for a gpt2 tokenizer (supported: {supported})"
    )]
    UnsupportedPreTokenizer {
        path: PathBuf,
        pre: String,
        supported: String,
    },
    /// A Hugging Face `tokenizer.json` could not be read or parsed.
    #[error("{path}: cannot load tokenizer.json: {reason}")]
    TokenizerJson { path: PathBuf, reason: String },
    #[error("encoding {len} bytes of text failed: {reason}")]
    Encode { len: usize, reason: String },
    /// `add_special` asked for a BOS/EOS token the vocabulary does not define.
    #[error("the tokenizer must add a {which} token but defines none")]
    MissingSpecialToken { which: &'static str },
    #[error("chat template does not compile: {detail}")]
    TemplateSyntax { detail: String },
    /// The template called `raise_exception(message)`.
    #[error("chat template raised an exception: {message}")]
    TemplateRaised { message: String },
    #[error("chat template rendering failed: {detail}")]
    TemplateRender { detail: String },
    #[error("invalid chat request: {reason}")]
    InvalidChatRequest { reason: String },
}

pub type Result<T> = std::result::Result<T, Error>;
