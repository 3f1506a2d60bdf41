//! Kiln's tokenizers, streaming detokenizer and chat templates.
//!
//! * [`Tokenizer`] turns text into token ids and back. Built from a GGUF file it gives
//!   exactly llama.cpp's ids (byte-level BPE for `gpt2` vocabularies, SentencePiece with
//!   byte fallback for `llama` ones): a BPE merger of its own (see `bpe.rs` for why)
//!   with llama.cpp's pre-tokenizers and special-token rules around it. It also reads
//!   Hugging Face `tokenizer.json` files, through the `tokenizers` crate.
//! * [`IncrementalDecoder`] turns generated ids into text as it becomes valid UTF-8.
//! * [`ChatTemplate`] renders a model's Jinja chat template the way Hugging Face
//!   `transformers` does.

mod bpe;
mod bpe_build;
mod byte_level;
mod chat_message;
mod chat_template;
mod detok;
mod error;
mod gguf_backend;
mod hf_json;
mod incremental;
mod pre_split;
mod py_json;
mod special_split;
mod special_tokens;
mod token_index;
mod tokenizer;
mod unicode_class;
mod vocab;

pub use chat_message::{ChatMessage, ContentPart, MessageContent};
pub use chat_template::{ChatRequestView, ChatTemplate};
pub use error::{Error, Result};
pub use incremental::IncrementalDecoder;
pub use tokenizer::Tokenizer;

#[cfg(test)]
mod tests {
    /// Tokenizers and templates are shared across request threads.
    #[test]
    fn shared_types_are_send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<crate::Tokenizer>();
        check::<crate::ChatTemplate>();
        check::<crate::IncrementalDecoder<std::sync::Arc<crate::Tokenizer>>>();
    }
}
