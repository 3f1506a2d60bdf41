//! The public tokenizer: one type over GGUF vocabularies and `tokenizer.json` files.

use std::path::Path;

use kiln_formats::GgufFile;

use crate::error::Result;
use crate::gguf_backend::GgufBackend;
use crate::hf_json::JsonBackend;
use crate::vocab::TokenAttr;

const KEY_CHAT_TEMPLATE: &str = "tokenizer.chat_template";

#[derive(Debug)]
pub(crate) enum Backend {
    Gguf(Box<GgufBackend>),
    Json(Box<JsonBackend>),
}

/// Text <-> token ids.
///
/// Built from a GGUF file, it reproduces llama.cpp's `llama_tokenize` and
/// `llama_detokenize` exactly (same ids, same text), including its special-token rules.
/// Built from a Hugging Face `tokenizer.json`, it follows the `tokenizers` crate.
#[derive(Debug)]
pub struct Tokenizer {
    pub(crate) backend: Backend,
    chat_template: Option<String>,
}

impl Tokenizer {
    /// The tokenizer described by a GGUF file's `tokenizer.*` metadata.
    ///
    /// `tokenizer.ggml.model` `gpt2` gives byte-level BPE with the pre-tokenizer named by
    /// `tokenizer.ggml.pre` (an unknown name is an error listing the supported ones);
    /// `llama` gives SentencePiece with byte fallback.
    pub fn from_gguf(gguf: &GgufFile) -> Result<Tokenizer> {
        let backend = GgufBackend::new(gguf)?;
        let chat_template = gguf.get_str(KEY_CHAT_TEMPLATE)?.map(str::to_string);
        Ok(Tokenizer {
            backend: Backend::Gguf(Box::new(backend)),
            chat_template,
        })
    }

    /// A Hugging Face `tokenizer.json` (e.g. a WordPiece BERT tokenizer). BOS/EOS are the
    /// conventional `[CLS]`/`[SEP]` (or `<s>`/`</s>`...) tokens when present. The file's
    /// padding and truncation settings are dropped: [`encode`](Self::encode) returns all
    /// ids of the text and the caller applies its own length limit.
    pub fn from_tokenizer_json(path: impl AsRef<Path>) -> Result<Tokenizer> {
        Ok(Tokenizer {
            backend: Backend::Json(Box::new(JsonBackend::load(path.as_ref())?)),
            chat_template: None,
        })
    }

    /// Token ids for `text`.
    ///
    /// `add_special` adds BOS and/or EOS as the model asks (`add_bos_token`,
    /// `add_eos_token`). With `parse_special`, control-token text such as `<|im_start|>`
    /// becomes that token; without it, such text is tokenized as plain text. User-defined
    /// tokens are always recognised, as in llama.cpp.
    pub fn encode(&self, text: &str, add_special: bool, parse_special: bool) -> Result<Vec<u32>> {
        match &self.backend {
            Backend::Gguf(g) => g.encode(text, add_special, parse_special),
            Backend::Json(j) => j.encode(text, add_special, parse_special),
        }
    }

    /// Text for `ids`. With `skip_special`, control tokens render as nothing and a leading
    /// BOS / trailing EOS the model adds are dropped; without it, they render as their
    /// text. Invalid UTF-8 becomes U+FFFD; ids outside the vocabulary are ignored.
    pub fn decode(&self, ids: &[u32], skip_special: bool) -> String {
        match &self.backend {
            Backend::Gguf(g) => {
                String::from_utf8_lossy(&g.decode_bytes(ids, skip_special)).into_owned()
            }
            Backend::Json(j) => j.decode(ids, skip_special),
        }
    }

    /// The exact bytes of one token with special tokens shown: byte-level BPE unmapped,
    /// `▁` as a space and `<0xXX>` as its byte for SentencePiece, control tokens as their
    /// text. Empty for unused tokens and ids outside the vocabulary.
    pub fn token_bytes(&self, id: u32) -> &[u8] {
        match &self.backend {
            Backend::Gguf(g) => g.pieces.get(id),
            Backend::Json(j) => j.pieces.get(id),
        }
    }

    pub fn bos_id(&self) -> Option<u32> {
        match &self.backend {
            Backend::Gguf(g) => g.vocab.special.bos,
            Backend::Json(j) => j.bos,
        }
    }

    pub fn eos_id(&self) -> Option<u32> {
        match &self.backend {
            Backend::Gguf(g) => g.vocab.special.eos,
            Backend::Json(j) => j.eos,
        }
    }

    /// Every token that ends generation (llama.cpp's EOG set: EOS plus end-of-turn tokens
    /// such as `<|im_end|>`, `<end_of_turn>`, `<|endoftext|>`), ascending.
    pub fn eos_ids(&self) -> &[u32] {
        match &self.backend {
            Backend::Gguf(g) => &g.vocab.eog,
            Backend::Json(j) => j.eos.as_slice(),
        }
    }

    /// Whether generating `id` should end generation.
    pub fn is_eog(&self, id: u32) -> bool {
        self.eos_ids().binary_search(&id).is_ok()
    }

    /// Whether `id` is a control (or unknown) token: one that `decode(.., true)` hides.
    pub fn is_special(&self, id: u32) -> bool {
        match &self.backend {
            Backend::Gguf(g) => g
                .vocab
                .attr(id)
                .has(TokenAttr::CONTROL | TokenAttr::UNKNOWN),
            Backend::Json(j) => j.special.get(id as usize).copied().unwrap_or(false),
        }
    }

    pub fn vocab_size(&self) -> usize {
        match &self.backend {
            Backend::Gguf(g) => g.vocab.len(),
            Backend::Json(j) => j.vocab_size,
        }
    }

    /// The id of the token whose vocabulary entry is exactly `text` (as stored: special
    /// tokens by their text, e.g. `"<|im_end|>"`).
    pub fn token_id(&self, text: &str) -> Option<u32> {
        match &self.backend {
            Backend::Gguf(g) => g.token_id(text),
            Backend::Json(j) => j.parsing.token_to_id(text),
        }
    }

    /// Whether `encode(.., add_special = true, ..)` prepends BOS.
    pub fn adds_bos(&self) -> bool {
        match &self.backend {
            Backend::Gguf(g) => g.vocab.add_bos,
            Backend::Json(j) => j.bos.is_some(),
        }
    }

    /// The Jinja chat template stored with the model, if any.
    pub fn chat_template(&self) -> Option<&str> {
        self.chat_template.as_deref()
    }
}
