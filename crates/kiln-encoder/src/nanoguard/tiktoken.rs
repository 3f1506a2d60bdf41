//! A pickled `tiktoken.Encoding` as a Hugging Face `tokenizer.json`.
//!
//! tiktoken splits text with a regex, then merges each piece's bytes by lowest rank,
//! taking a whole piece at once when it is itself a token. The equivalent `tokenizers`
//! file is a byte-level BPE with the same split regex, the ranks as ids, one merge for
//! every way of splitting each token into two tokens (ordered by the result's rank, then
//! the parts'), and `ignore_merges` for the whole-piece shortcut. Checked against
//! tiktoken over 60,000 ShareGPT turns (20M tokens) with no difference.

use std::collections::HashMap;

use serde::ser::SerializeMap;
use serde::{Serialize, Serializer};

use super::pickle::Value;

/// What the pickle holds: `Encoding.__getstate__`'s dict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TiktokenState {
    pub pat_str: String,
    /// Token bytes by rank (= id), ascending.
    pub ranks: Vec<(Vec<u8>, u32)>,
    /// Special tokens by id, ascending.
    pub special_tokens: Vec<(String, u32)>,
}

impl TiktokenState {
    /// Reads `Build(tiktoken.core.Encoding(), state)` as pickled by tiktoken.
    pub fn from_value(v: &Value) -> Result<Self, String> {
        let Value::Build { obj, state } = v else {
            return Err("not a pickled object with state".into());
        };
        match &**obj {
            Value::Call { func, .. } if func.is_global("tiktoken.core", "Encoding") => {}
            other => {
                return Err(format!(
                    "object is {other:?}, expected tiktoken.core.Encoding"
                ))
            }
        }
        let field = |name: &str| {
            state
                .get(name)
                .ok_or_else(|| format!("state has no {name:?}"))
        };
        let pat_str = field("pat_str")?
            .as_str()
            .ok_or("pat_str is not a string")?
            .to_owned();
        let id = |v: &Value| v.as_int().and_then(|i| u32::try_from(i).ok());
        let mut ranks = field("mergeable_ranks")?
            .as_dict()
            .ok_or("mergeable_ranks is not a dict")?
            .iter()
            .map(|(k, v)| match (k, id(v)) {
                (Value::Bytes(b), Some(r)) => Ok((b.clone(), r)),
                _ => Err(format!("mergeable_ranks entry {k:?}: {v:?}")),
            })
            .collect::<Result<Vec<_>, String>>()?;
        ranks.sort_by_key(|&(_, r)| r);
        let mut special_tokens = field("special_tokens")?
            .as_dict()
            .ok_or("special_tokens is not a dict")?
            .iter()
            .map(|(k, v)| match (k.as_str(), id(v)) {
                (Some(s), Some(i)) => Ok((s.to_owned(), i)),
                _ => Err(format!("special_tokens entry {k:?}: {v:?}")),
            })
            .collect::<Result<Vec<_>, String>>()?;
        special_tokens.sort_by_key(|&(_, i)| i);
        Ok(Self {
            pat_str,
            ranks,
            special_tokens,
        })
    }

    /// Id of special token `name`.
    pub fn special_id(&self, name: &str) -> Option<u32> {
        self.special_tokens
            .iter()
            .find(|(s, _)| s == name)
            .map(|&(_, i)| i)
    }

    /// The `tokenizer.json` bytes, in the exact spelling of `nanoguard_convert.py`
    /// (compact JSON, UTF-8, keys in its order). `bos` is prepended by the
    /// post-processor, as NanoGuard's tokenizer does.
    pub fn tokenizer_json(&self, bos: &str) -> Result<Vec<u8>, String> {
        let bos_id = self
            .special_id(bos)
            .ok_or_else(|| format!("no special token {bos:?}"))?;
        let byte_char = bytes_to_unicode();
        let text = |b: &[u8]| -> String { b.iter().map(|&x| byte_char[usize::from(x)]).collect() };
        let by_bytes: HashMap<&[u8], u32> =
            self.ranks.iter().map(|(b, r)| (b.as_slice(), *r)).collect();
        let vocab: Vec<(String, u32)> = self.ranks.iter().map(|(b, r)| (text(b), *r)).collect();
        let mut merges = Vec::new();
        for (token, _) in &self.ranks {
            let mut splits: Vec<(u32, u32, usize)> = (1..token.len())
                .filter_map(|i| Some((*by_bytes.get(&token[..i])?, *by_bytes.get(&token[i..])?, i)))
                .collect();
            splits.sort_unstable();
            merges.extend(
                splits
                    .into_iter()
                    .map(|(_, _, i)| [text(&token[..i]), text(&token[i..])]),
            );
        }
        let bos_piece = Piece::Special {
            id: bos,
            type_id: 0,
        };
        let file = TokenizerFile {
            version: "1.0",
            truncation: None,
            padding: None,
            added_tokens: self
                .special_tokens
                .iter()
                .map(|(content, id)| AddedToken {
                    id: *id,
                    content,
                    single_word: false,
                    lstrip: false,
                    rstrip: false,
                    normalized: false,
                    special: true,
                })
                .collect(),
            normalizer: None,
            pre_tokenizer: PreTokenizer {
                kind: "Sequence",
                pretokenizers: (
                    Split {
                        kind: "Split",
                        pattern: Pattern {
                            regex: &self.pat_str,
                        },
                        behavior: "Isolated",
                        invert: false,
                    },
                    ByteLevel {
                        kind: "ByteLevel",
                        add_prefix_space: false,
                        trim_offsets: true,
                        use_regex: false,
                    },
                ),
            },
            post_processor: PostProcessor {
                kind: "TemplateProcessing",
                single: vec![
                    bos_piece,
                    Piece::Sequence {
                        id: "A",
                        type_id: 0,
                    },
                ],
                pair: vec![
                    bos_piece,
                    Piece::Sequence {
                        id: "A",
                        type_id: 0,
                    },
                    Piece::Sequence {
                        id: "B",
                        type_id: 1,
                    },
                ],
                special_tokens: OneSpecial {
                    name: bos,
                    id: bos_id,
                },
            },
            decoder: ByteLevel {
                kind: "ByteLevel",
                add_prefix_space: true,
                trim_offsets: true,
                use_regex: true,
            },
            model: Bpe {
                kind: "BPE",
                dropout: None,
                unk_token: None,
                continuing_subword_prefix: None,
                end_of_word_suffix: None,
                fuse_unk: false,
                byte_fallback: false,
                ignore_merges: true,
                vocab: OrderedVocab(&vocab),
                merges,
            },
        };
        serde_json::to_vec(&file).map_err(|e| e.to_string())
    }
}

/// GPT-2's map from bytes to printable characters, as byte-level BPE files spell tokens.
fn bytes_to_unicode() -> [char; 256] {
    let mut out = ['\0'; 256];
    let mut extra = 0u32;
    for b in 0..=255u8 {
        let printable = matches!(b, b'!'..=b'~' | 0xa1..=0xac | 0xae..=0xff);
        let code = if printable {
            u32::from(b)
        } else {
            extra += 1;
            255 + extra
        };
        out[usize::from(b)] = char::from_u32(code).unwrap_or('\u{fffd}');
    }
    out
}

#[derive(Serialize)]
struct TokenizerFile<'a> {
    version: &'static str,
    truncation: Option<()>,
    padding: Option<()>,
    added_tokens: Vec<AddedToken<'a>>,
    normalizer: Option<()>,
    pre_tokenizer: PreTokenizer<'a>,
    post_processor: PostProcessor<'a>,
    decoder: ByteLevel,
    model: Bpe<'a>,
}

#[derive(Serialize)]
struct AddedToken<'a> {
    id: u32,
    content: &'a str,
    single_word: bool,
    lstrip: bool,
    rstrip: bool,
    normalized: bool,
    special: bool,
}

#[derive(Serialize)]
struct PreTokenizer<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    pretokenizers: (Split<'a>, ByteLevel),
}

#[derive(Serialize)]
struct Split<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    pattern: Pattern<'a>,
    behavior: &'static str,
    invert: bool,
}

#[derive(Serialize)]
struct Pattern<'a> {
    #[serde(rename = "Regex")]
    regex: &'a str,
}

#[derive(Serialize)]
struct ByteLevel {
    #[serde(rename = "type")]
    kind: &'static str,
    add_prefix_space: bool,
    trim_offsets: bool,
    use_regex: bool,
}

#[derive(Serialize)]
struct PostProcessor<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    single: Vec<Piece<'a>>,
    pair: Vec<Piece<'a>>,
    special_tokens: OneSpecial<'a>,
}

#[derive(Clone, Copy, Serialize)]
enum Piece<'a> {
    #[serde(rename = "SpecialToken")]
    Special {
        id: &'a str,
        type_id: u32,
    },
    Sequence {
        id: &'static str,
        type_id: u32,
    },
}

/// `special_tokens: {name: {id: name, ids: [id], tokens: [name]}}`.
struct OneSpecial<'a> {
    name: &'a str,
    id: u32,
}

impl Serialize for OneSpecial<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct Entry<'a> {
            id: &'a str,
            ids: [u32; 1],
            tokens: [&'a str; 1],
        }
        let mut map = s.serialize_map(Some(1))?;
        map.serialize_entry(
            self.name,
            &Entry {
                id: self.name,
                ids: [self.id],
                tokens: [self.name],
            },
        )?;
        map.end()
    }
}

#[derive(Serialize)]
struct Bpe<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    dropout: Option<()>,
    unk_token: Option<()>,
    continuing_subword_prefix: Option<()>,
    end_of_word_suffix: Option<()>,
    fuse_unk: bool,
    byte_fallback: bool,
    ignore_merges: bool,
    vocab: OrderedVocab<'a>,
    merges: Vec<[String; 2]>,
}

/// The vocabulary as a JSON object in id order (a map type would reorder it).
struct OrderedVocab<'a>(&'a [(String, u32)]);

impl Serialize for OrderedVocab<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(self.0.len()))?;
        for (token, id) in self.0 {
            map.serialize_entry(token, id)?;
        }
        map.end()
    }
}
