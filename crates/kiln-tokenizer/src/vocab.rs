//! The vocabulary of a GGUF file: token texts, scores, attributes, special ids and the
//! flags that drive encoding, read the way llama.cpp reads them.

use std::path::Path;

use kiln_formats::{GgufFile, MetaArray};

use crate::error::{Error, Result};
use crate::pre_split::PreSplit;
use crate::special_tokens;
use crate::token_index::TokenIndex;

/// llama.cpp's per-token attributes (a bit set).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct TokenAttr(pub(crate) u16);

impl TokenAttr {
    pub(crate) const UNKNOWN: u16 = 1 << 0;
    pub(crate) const UNUSED: u16 = 1 << 1;
    pub(crate) const NORMAL: u16 = 1 << 2;
    pub(crate) const CONTROL: u16 = 1 << 3;
    pub(crate) const USER_DEFINED: u16 = 1 << 4;
    pub(crate) const BYTE: u16 = 1 << 5;

    pub(crate) fn has(self, bits: u16) -> bool {
        self.0 & bits != 0
    }

    /// From a GGUF `token_type` value.
    fn from_type(t: i32) -> Self {
        TokenAttr(match t {
            1 => Self::NORMAL,
            2 => Self::UNKNOWN,
            3 => Self::CONTROL,
            4 => Self::USER_DEFINED,
            5 => Self::UNUSED,
            6 => Self::BYTE,
            _ => 0,
        })
    }
}

/// Which algorithm turns a piece of plain text into tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum VocabKind {
    /// `gpt2`: byte-level BPE with merge ranks and a pre-tokenizer.
    BytePairs(PreSplit),
    /// `llama`: SentencePiece pieces merged by score, with `<0xXX>` byte fallback.
    SentencePiece,
}

/// Ids of the tokens with a role. `None` where the model has none.
#[derive(Debug, Clone, Default)]
pub(crate) struct SpecialIds {
    pub(crate) bos: Option<u32>,
    pub(crate) eos: Option<u32>,
    pub(crate) eot: Option<u32>,
    pub(crate) eom: Option<u32>,
    pub(crate) fim_pre: Option<u32>,
    pub(crate) fim_suf: Option<u32>,
    pub(crate) fim_mid: Option<u32>,
    pub(crate) fim_pad: Option<u32>,
    pub(crate) fim_rep: Option<u32>,
    pub(crate) fim_sep: Option<u32>,
}

#[derive(Debug)]
pub(crate) struct Vocab {
    pub(crate) kind: VocabKind,
    pub(crate) texts: Vec<String>,
    pub(crate) scores: Vec<f32>,
    pub(crate) attrs: Vec<TokenAttr>,
    /// Text -> id over `texts` (see [`Vocab::id`]).
    ids: TokenIndex,
    pub(crate) special: SpecialIds,
    pub(crate) add_bos: bool,
    pub(crate) add_eos: bool,
    /// SentencePiece: prefix a space to text that starts the input or follows a special
    /// token (and strip it again when detokenizing).
    pub(crate) add_space_prefix: bool,
    /// Detokenizing removes spaces before `?!.,` and in some contractions.
    pub(crate) clean_spaces: bool,
    /// BPE: a word that is itself a token skips the merges (Llama 3).
    pub(crate) ignore_merges: bool,
    /// End-of-generation tokens, ascending.
    pub(crate) eog: Vec<u32>,
    /// Tokens split out of raw text before tokenizing, longest text first.
    pub(crate) partition_order: Vec<u32>,
}

const KEY_MODEL: &str = "tokenizer.ggml.model";
const KEY_PRE: &str = "tokenizer.ggml.pre";
const KEY_TOKENS: &str = "tokenizer.ggml.tokens";
const KEY_SCORES: &str = "tokenizer.ggml.scores";
const KEY_TYPES: &str = "tokenizer.ggml.token_type";

/// Pre-tokenizer names accepted for `gpt2` vocabularies, with their llama.cpp settings.
struct PreConfig {
    split: PreSplit,
    clean_spaces: bool,
    ignore_merges: bool,
    add_bos: bool,
}

const SUPPORTED_PRE: &str = "default, gpt-2, phi-2, mpt, olmo, gigachat, a.x-4.0, mellum, \
    starcoder, refact, codeshell, exaone, minerva-7b, smollm, command-r, qwen2, \
    deepseek-r1-qwen, kormo, f2llmv2, stablelm2, llama3, llama-v3, llama-bpe, falcon3, \
    falcon-h1, pixtral, midm-2.0, lfm2, jina-v5-nano";

fn pre_config(pre: &str) -> Option<PreConfig> {
    let cfg = |split, clean_spaces, ignore_merges, add_bos| PreConfig {
        split,
        clean_spaces,
        ignore_merges,
        add_bos,
    };
    Some(match pre {
        "default" => cfg(PreSplit::Default, true, false, false),
        "gpt-2" | "phi-2" | "mpt" | "olmo" | "gigachat" | "a.x-4.0" | "mellum" => {
            cfg(PreSplit::Gpt2, true, false, false)
        }
        "starcoder" | "refact" | "codeshell" | "exaone" | "minerva-7b" => {
            cfg(PreSplit::DigitsThenGpt2, true, false, false)
        }
        "smollm" | "command-r" => cfg(PreSplit::DigitsThenGpt2, false, false, false),
        "qwen2" | "deepseek-r1-qwen" | "kormo" | "f2llmv2" => {
            cfg(PreSplit::Qwen2, false, false, false)
        }
        "stablelm2" => cfg(PreSplit::Qwen2, true, false, false),
        "llama3" | "llama-v3" | "llama-bpe" | "falcon3" | "falcon-h1" | "pixtral" | "midm-2.0"
        | "lfm2" | "jina-v5-nano" => cfg(PreSplit::Llama3, true, true, true),
        _ => return None,
    })
}

fn invalid(path: &Path, key: &str, reason: impl Into<String>) -> Error {
    Error::InvalidMetadata {
        path: path.to_path_buf(),
        key: key.to_string(),
        reason: reason.into(),
    }
}

fn read_tokens(gguf: &GgufFile) -> Result<Vec<String>> {
    let path = gguf.path();
    match gguf.get_array(KEY_TOKENS)? {
        Some(MetaArray::String(tokens)) if !tokens.is_empty() => {
            // llama.cpp substitutes a placeholder for empty token texts.
            Ok(tokens
                .iter()
                .enumerate()
                .map(|(i, t)| {
                    if t.is_empty() {
                        format!("[EMPTY_{i}]")
                    } else {
                        t.clone()
                    }
                })
                .collect())
        }
        Some(MetaArray::String(_)) => Err(invalid(path, KEY_TOKENS, "the token list is empty")),
        Some(other) => Err(invalid(
            path,
            KEY_TOKENS,
            format!(
                "expected an array of strings, found {} items of another type",
                other.len()
            ),
        )),
        None => Err(kiln_formats::Error::MissingKey {
            path: path.to_path_buf(),
            key: KEY_TOKENS.to_string(),
        }
        .into()),
    }
}

fn read_scores(gguf: &GgufFile, n: usize) -> Result<Vec<f32>> {
    let path = gguf.path();
    let scores: Vec<f32> = match gguf.get_array(KEY_SCORES)? {
        None => return Ok(vec![0.0; n]),
        Some(MetaArray::F32(s)) => s.clone(),
        // Integer scores are converted as llama.cpp does.
        Some(MetaArray::I32(s)) => s.iter().map(|&v| v as f32).collect(),
        Some(_) => return Err(invalid(path, KEY_SCORES, "expected an f32 or i32 array")),
    };
    if scores.len() < n {
        return Err(invalid(
            path,
            KEY_SCORES,
            format!("{} scores for {n} tokens", scores.len()),
        ));
    }
    Ok(scores[..n].to_vec())
}

fn read_attrs(gguf: &GgufFile, n: usize) -> Result<Vec<TokenAttr>> {
    let path = gguf.path();
    match gguf.get_array(KEY_TYPES)? {
        None => Ok(vec![TokenAttr(TokenAttr::NORMAL); n]),
        Some(MetaArray::I32(types)) if types.len() >= n => Ok(types[..n]
            .iter()
            .map(|&t| TokenAttr::from_type(t))
            .collect()),
        Some(MetaArray::I32(types)) => Err(invalid(
            path,
            KEY_TYPES,
            format!("{} token types for {n} tokens", types.len()),
        )),
        Some(_) => Err(invalid(path, KEY_TYPES, "expected an i32 array")),
    }
}

/// Reads an id key; ids outside the vocabulary keep the default, as in llama.cpp.
fn read_id(gguf: &GgufFile, key: &str, default: Option<u32>, n: usize) -> Result<Option<u32>> {
    let in_range = |id: u64| usize::try_from(id).is_ok_and(|i| i < n);
    let default = default.filter(|&d| in_range(u64::from(d)));
    Ok(match gguf.get_u64(key)? {
        Some(id) if in_range(id) => u32::try_from(id).ok(),
        _ => default,
    })
}

impl Vocab {
    pub(crate) fn from_gguf(gguf: &GgufFile) -> Result<Vocab> {
        let path = gguf.path();
        let model = gguf.require_str(KEY_MODEL)?;
        let (kind, pre) = match model {
            "gpt2" => {
                let name = gguf.get_str(KEY_PRE)?.unwrap_or("default");
                let pre = pre_config(name).ok_or_else(|| Error::UnsupportedPreTokenizer {
                    path: path.to_path_buf(),
                    pre: name.to_string(),
                    supported: SUPPORTED_PRE.to_string(),
                })?;
                (VocabKind::BytePairs(pre.split), Some(pre))
            }
            "llama" => (VocabKind::SentencePiece, None),
            other => {
                return Err(Error::UnsupportedModel {
                    path: path.to_path_buf(),
                    model: other.to_string(),
                })
            }
        };

        let texts = read_tokens(gguf)?;
        let n = texts.len();
        if u32::try_from(n).is_err() {
            return Err(invalid(
                path,
                KEY_TOKENS,
                format!("{n} tokens do not fit 32-bit ids"),
            ));
        }
        let scores = read_scores(gguf, n)?;
        let attrs = read_attrs(gguf, n)?;
        let ids = TokenIndex::build(&texts).map_err(|(i, first)| {
            let t = &texts[i as usize];
            invalid(
                path,
                KEY_TOKENS,
                format!("token {i} repeats the text {t:?} of token {first}"),
            )
        })?;

        // Defaults per model type, overridden by the file.
        let (bos, eos) = match kind {
            VocabKind::SentencePiece => (Some(1), Some(2)),
            VocabKind::BytePairs(_) => (Some(11), Some(11)),
        };
        let id = |key: &str, default| read_id(gguf, &format!("tokenizer.ggml.{key}"), default, n);
        let special = SpecialIds {
            bos: id("bos_token_id", bos)?,
            eos: id("eos_token_id", eos)?,
            eot: id("eot_token_id", None)?,
            eom: id("eom_token_id", None)?,
            fim_pre: id("prefix_token_id", None)?.or(id("fim_pre_token_id", None)?),
            fim_suf: id("suffix_token_id", None)?.or(id("fim_suf_token_id", None)?),
            fim_mid: id("middle_token_id", None)?.or(id("fim_mid_token_id", None)?),
            fim_pad: id("fim_pad_token_id", None)?,
            fim_rep: id("fim_rep_token_id", None)?,
            fim_sep: id("fim_sep_token_id", None)?,
        };

        let (default_add_bos, default_space_prefix) = match kind {
            VocabKind::SentencePiece => (true, true),
            VocabKind::BytePairs(_) => (pre.as_ref().is_some_and(|p| p.add_bos), false),
        };
        let flag = |key: &str, default: bool| -> Result<bool> {
            Ok(gguf
                .get_bool(&format!("tokenizer.ggml.{key}"))?
                .unwrap_or(default))
        };

        let mut vocab = Vocab {
            kind,
            texts,
            scores,
            attrs,
            ids,
            special,
            add_bos: flag("add_bos_token", default_add_bos)?,
            add_eos: flag("add_eos_token", false)?,
            add_space_prefix: flag("add_space_prefix", default_space_prefix)?,
            clean_spaces: pre.as_ref().is_some_and(|p| p.clean_spaces),
            ignore_merges: pre.as_ref().is_some_and(|p| p.ignore_merges),
            eog: Vec::new(),
            partition_order: Vec::new(),
        };
        special_tokens::resolve(&mut vocab);
        Ok(vocab)
    }

    /// The id of the token whose text is `text`.
    pub(crate) fn id(&self, text: &str) -> Option<u32> {
        self.ids.get(&self.texts, text)
    }

    pub(crate) fn len(&self) -> usize {
        self.texts.len()
    }

    pub(crate) fn attr(&self, id: u32) -> TokenAttr {
        self.attrs.get(id as usize).copied().unwrap_or_default()
    }
}
